"""Real-size data with its default models, as a new user meets it: colour 32×32 (SVHN-like) and 64×64 (43 sign classes).

For each size it builds the stand-in data set (``probe_core.data.synthetic``: MNIST's test digits from
``../shared`` on cluttered colour backgrounds; 43 drawn sign classes), writes it as a ``.npz`` and then does what
``probe models defaults``, ``probe sample`` and ``probe defuse run`` do with no flags, printing one table per size:

- training: each default model's recipe and time;
- the classifier's test accuracy (against chance) and the generator check (FD-clf ratio, verdict);
- ``high:C`` and an ambiguous pair of similar classes with 16 chains and default settings: chains with a
  hit, time, and how many hits an **independent judge** (a second classifier of the same recipe with
  another seed, trained on the real images and never probed) calls the target class;
- the sampler against its ceiling: gradient evaluations/s of a short batched HMC run against the
  decoder+classifier forward+backward throughput at that batch, and Pyro NUTS's evaluations/s;
- Defuse identification and distillation with the defaults the data's size chooses: failures, regions, time.

Run: ``.venv/bin/python benchmarks/real_size.py [--quick] [--sizes 32,64] [--workspace DIR] [--mnist DIR]``;
``--sizes 128`` draws the sign-like set at 128×128, where the classifier runs at 128×128 and the generator is trained
at 64×64 and seen through a differentiable resize, as the Defuse authors probed German signs.
``--quick`` (CI): a few hundred images, a few epochs, 4 chains; it checks that the pipeline runs, not the goals.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # sampler.py's ceiling()

MNIST = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "mnist-t10k"
# (train images, test images) of each size: the figures, and a smoke run
SIZES = {32: {"full": (8000, 2000), "quick": (400, 200)},
         64: {"full": (90, 30), "quick": (6, 4)},  # 64 and 128: per class, 43 classes
         128: {"full": (90, 30), "quick": (6, 4)}}  # a classifier at 128x128 seen through a 64x64 generator
QUICK_EPOCHS = 2
JUDGE_SEED = 1001  # the independent judge: the clean classifier recipe with another seed


def build_data(size: int, quick: bool, mnist: Path, out: Path,
               train_count: int | None = None) -> tuple[Path, tuple[str, ...]]:
    """The stand-in of ``size`` as a ``.npz`` in ``out``: :data:`SIZES`' image counts, or ``train_count`` training
    images (per class at 64x64) with the same test images, to measure how a recipe grows with the data."""
    from probe_core.data.idx import read_idx
    from probe_core.data.synthetic import SIGN_CLASSES, SVHN_CLASSES, signs_like, svhn_like, write_npz

    digits = read_idx(next(mnist.glob("t10k-images*")))
    labels = read_idx(next(mnist.glob("t10k-labels*")))
    default_train, test_count = SIZES[size]["quick" if quick else "full"]
    train_count = train_count or default_train
    # train and test digits come from disjoint halves of MNIST's test set: no handwriting is in both
    half = len(digits) // 2
    if size == 32:
        train = svhn_like(digits[:half], labels[:half], train_count, 32, seed=1)
        test = svhn_like(digits[half:], labels[half:], test_count, 32, seed=2)
        names = SVHN_CLASSES
    else:
        train = signs_like(digits[:half], labels[:half], train_count, size, seed=1)
        test = signs_like(digits[half:], labels[half:], test_count, size, seed=2)
        names = SIGN_CLASSES
    more = "" if train_count == default_train else f"-train{train_count}"
    path = write_npz(out / f"real-size-{size}{'-quick' if quick else ''}{more}.npz", train, test, names)
    return path, names


def similar_pair(classifier, dataset, among: list[int] | None = None) -> tuple[int, int]:
    """The two classes the classifier confuses most on the test images (a pair a user would probe), among the
    classes ``among`` where at least two are given (else among all)."""
    with torch.no_grad():
        predicted = torch.cat([classifier.module(dataset.test_images[s:s + 512]).argmax(1)
                               for s in range(0, len(dataset.test_images), 512)])
    count = dataset.num_classes
    confusion = np.zeros((count, count))
    np.add.at(confusion, (dataset.test_labels.numpy(), predicted.numpy()), 1)
    symmetric = confusion + confusion.T
    np.fill_diagonal(symmetric, -1)
    if among is not None and len(among) >= 2:
        outside = np.setdiff1d(np.arange(count), among)
        symmetric[outside, :] = symmetric[:, outside] = -1
    a, b = np.unravel_index(np.argmax(symmetric), symmetric.shape)
    return int(min(a, b)), int(max(a, b))


FIRST_PROBED_CLASS = 7  # the 8th
LEAST_BASELINE_SHARE = 0.5


def ordinal(number: int) -> str:
    suffix = "th" if 10 <= number % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
    return f"{number}{suffix}"


def high_shares(classifier, dataset) -> np.ndarray:
    """(K,) for each class, the share of its real test images on which the classifier meets ``high:C`` (the class's
    own part of the test-set baseline, paper Sec. 4.10; 0 for a class without test images)."""
    from probe_core.sampling.targets import parse_targets

    with torch.no_grad():
        probabilities = torch.cat([classifier.module(dataset.test_images[s:s + 512])
                                   for s in range(0, len(dataset.test_images), 512)])
    names = tuple(str(index) for index in range(dataset.num_classes))
    shares = np.zeros(dataset.num_classes)
    for index in range(dataset.num_classes):
        [target] = parse_targets(f"high:{index}", names)
        own = probabilities[dataset.test_labels == index]
        shares[index] = float(target.is_hit(own).float().mean()) if len(own) else 0.0
    return shares


def confidently_known_class(classifier, dataset, first: int = FIRST_PROBED_CLASS,
                            least_share: float = LEAST_BASELINE_SHARE,
                            shares: np.ndarray | None = None) -> tuple[int, float, list]:
    """``(class, share, passed_over)``: the first class from ``first`` on (in class order, wrapping) on whose real test
    images the classifier meets ``high:C`` at least ``least_share`` of the time (else the one where it does most
    often); ``share`` is that share (:func:`high_shares`), and ``passed_over`` the ``(class, share)`` of the classes
    looked at before it. ``shares``: :func:`high_shares` already computed for this classifier and data set.

    A ``high:C`` whose baseline is 0 asks for what the classifier never does on real images of C: its hits can only
    be images unlike C, whatever the generator, so a judge's agreement with them would measure the target, not the
    generator.
    """
    shares = high_shares(classifier, dataset) if shares is None else shares
    looked_at = []
    for offset in range(dataset.num_classes):
        index = (first + offset) % dataset.num_classes
        looked_at.append((index, float(shares[index])))
        if looked_at[-1][1] >= least_share:
            break
    chosen = looked_at[-1] if looked_at[-1][1] >= least_share else max(looked_at, key=lambda pair: pair[1])
    return chosen[0], chosen[1], [pair for pair in looked_at if pair[0] != chosen[0]]


def describe_class_choice(names, chosen: int, share: float, passed_over: list, first: int = FIRST_PROBED_CLASS,
                          least_share: float = LEAST_BASELINE_SHARE) -> str:
    """What :func:`confidently_known_class` chose from ``first`` on with ``least_share``, and why, in the class names."""
    first = first % len(names)
    rule = (f"the first class from the {ordinal(first + 1)} on with at least {least_share:.0%}" if share >= least_share
            else f"no class reaches {least_share:.0%}: the one with the most")
    skipped = "; passed over: " + ", ".join(f"{names[index]} {value:.0%}" for index, value in passed_over[:6]) \
        if passed_over else ""
    return (f"{names[chosen]}: the classifier meets high:C on {share:.0%} of its real test images ({rule}{skipped})")


def sampler_against_ceiling(classifier, generator, target, chains: int, steps: int) -> dict:
    from sampler import ceiling

    from probe_core.sampling import BayesTrExPosterior, SamplerConfig, run_hmc, run_pyro_nuts
    from probe_core.sampling.targets import TargetBatch

    roof = ceiling(classifier.module, generator.module, chains, repeats=5)
    posterior = BayesTrExPosterior(classifier.module, generator.module, TargetBatch([target], chains))
    fast = run_hmc(posterior, SamplerConfig(num_warmup=steps, num_samples=steps, init="optimize"))
    fast_rate = fast.gradient_evaluations * chains / fast.wall_seconds
    nuts_steps = max(2, steps // 10)
    nuts = run_pyro_nuts(BayesTrExPosterior(classifier.module, generator.module, TargetBatch([target], 1)),
                         num_warmup=nuts_steps, num_samples=nuts_steps, seed=0)
    return {"ceiling": roof, "fast": fast_rate, "nuts": nuts.gradient_evaluations / nuts.wall_seconds}


@torch.no_grad()
def class_kept_on_training_images(classifier, generator, dataset, count: int = 1000) -> tuple[int, float, float]:
    """(images, the classifier's accuracy on the first ``count`` training images, on their reconstructions):
    the generator check measures held-out images; a VAE that learnt its training images keeps far more here."""
    from probe_core.models.training import classifier_accuracy

    images, labels = dataset.train_images[:count], dataset.train_labels[:count]
    reconstructions = generator.module.decode(generator.module.encode(images)[0])
    return (len(images), classifier_accuracy(classifier.module, images, labels),
            classifier_accuracy(classifier.module, reconstructions, labels))


def run_size(size: int, args, workspace) -> None:
    import probe_core.api as mp
    from probe_core.catalog import canonical_dataset_name
    from probe_core.defuse import verbs
    from probe_core.models import ModelSpec
    from probe_core.models.checks import check_classifier, check_generator
    from probe_core.models.recipes import default_generator_kind
    from probe_core.bayestrex.request import SampleRequest

    path, names = build_data(size, args.quick, Path(args.mnist), Path(workspace.root) / "data")
    reference = canonical_dataset_name(str(path))
    registry = workspace.registry
    dataset = registry.dataset(reference)
    print(f"\n## {size}×{size} colour, {dataset.num_classes} classes: {len(dataset.train_labels):,} training and "
          f"{len(dataset.test_labels):,} test images ({path.name}; torch threads {torch.get_num_threads()})")
    rows = [("step", "figure")]
    kind_ids = {}
    for spec in registry.default_specs(reference):
        if args.quick:
            spec = ModelSpec(**{**spec.__dict__, "epochs": QUICK_EPOCHS})
        resolved = spec.resolved(dataset)
        held = registry.exists(resolved.model_id())
        started = time.perf_counter()
        model = registry.get_or_train(spec)
        kind_ids[spec.kind] = model.id
        # a model the workspace already holds reports the time its training took then
        took = model.metrics.get("train_seconds", float("nan")) if held else time.perf_counter() - started
        rows.append((f"train {spec.kind}", f"{resolved.describe_recipe()}: {took:.0f} s"
                     + (" (trained earlier in this workspace)" if held else "")))
    classifier = registry.resolve(kind_ids["classifier"], "classifier", reference)
    generator_kind = default_generator_kind(reference)  # the VAE, or from 64x64 the spatial autoencoder
    generator = registry.resolve(kind_ids[generator_kind], "generator", reference)
    clf_check = check_classifier(classifier, dataset)
    gen_check = check_generator(generator, classifier, dataset)
    rows.append(("classifier test accuracy", f"{clf_check.accuracy:.1%} (chance {clf_check.chance:.1%})"
                 + (" — NEAR CHANCE: refused" if clf_check.near_chance else "")))
    rows.append((f"generator check ({generator_kind})",
                 f"{gen_check.verdict}: FD-clf ratio {gen_check.figures['fd_ratio']:.1f} "
                 f"(limit 50), sharpness {gen_check.figures['sharpness_ratio']:.2f}x the real images', "
                 f"reconstruction ratio {gen_check.figures.get('reconstruction_ratio', float('nan')):.2f}, "
                 f"class kept by reconstructions {gen_check.figures.get('reconstruction_class_ratio', float('nan')):.2f}x "
                 f"(limit 0.8)" + "".join(f"; {reason}" for reason in gen_check.failed)))
    train_kept = class_kept_on_training_images(classifier, generator, dataset)
    rows.append(("class kept, training images", f"the classifier is right on {train_kept[1]:.1%} of "
                 f"{train_kept[0]:,} training images and {train_kept[2]:.1%} of their reconstructions "
                 f"({train_kept[2] / max(train_kept[1], 1e-6):.2f}x; Defuse perturbs these images' codes)"))
    judge_spec = ModelSpec(dataset=reference, kind="classifier", seed=JUDGE_SEED,
                           epochs=QUICK_EPOCHS if args.quick else None)
    started = time.perf_counter()
    judge = registry.get_or_train(judge_spec)
    rows.append(("independent judge", f"{judge_spec.resolved(dataset).describe_recipe()}, seed {JUDGE_SEED}: "
                 f"{judge.metrics.get('test_accuracy', float('nan')):.1%} test accuracy "
                 f"({time.perf_counter() - started:.0f} s)"))
    chains = 4 if args.quick else 16
    # quick mode's 2-epoch classifier is near chance: it insists (flagged), to run every step of the pipeline
    insist = {"allow_weak_classifier": True} if args.quick else {}
    short = {"warmup": 5, "samples": 5, **insist} if args.quick else {}
    shares = high_shares(classifier, dataset)
    high_index, high_share, passed_over = confidently_known_class(classifier, dataset, shares=shares)
    high_class = names[high_index]
    rows.append(("high:C's class", describe_class_choice(names, high_index, high_share, passed_over)))
    # an ambiguous pair is two classes the classifier knows (high:C on at least half their test images, as high:C's
    # class): between two it cannot name, a hit is ambiguous in its eyes only, and no judge can agree with it
    known = [int(index) for index in np.flatnonzero(shares >= LEAST_BASELINE_SHARE)]
    pair = similar_pair(classifier, dataset, among=known)
    why = (f"the pair the classifier confuses most among the {len(known)} of {dataset.num_classes} classes on whose "
           f"test images it meets high:C at least {LEAST_BASELINE_SHARE:.0%} of the time" if len(known) >= 2
           else "the pair the classifier confuses most (it knows fewer than 2 classes)")
    rows.append(("ambiguous pair", why))
    # the pair's own classes are probed too (one run, two targets): an ambiguous hit can look like one of the pair
    # only as far as the generator draws each of them convincingly
    probes = [f"high:{high_class}", f"ambiguous:{names[pair[0]]},{names[pair[1]]}",
              f"high:{names[pair[0]]};high:{names[pair[1]]}"]
    if args.pair:
        named = [name.strip() for name in args.pair.split(",")]
        probes += [f"ambiguous:{named[0]},{named[1]}", f"high:{named[0]};high:{named[1]}"]
    for spec in probes:
        started = time.perf_counter()
        try:  # the run's own judge (probe sample --judge; quick mode's 2-epoch judge is near chance: refused)
            result = mp.sample(spec, kind_ids["classifier"], kind_ids[generator_kind], dataset=reference,
                               workspace=workspace, judge=None if args.quick else judge.id, chains=chains,
                               progress=False, **short)
        except Exception as exc:  # noqa: BLE001 - a benchmark reports a refusal as a row
            rows.append((spec, f"refused: {exc}"))
            continue
        wall = time.perf_counter() - started
        for target in result.targets:
            report, judged = target["summary"], target.get("judge_agreement") or {"agreed": 0, "judged": 0}
            share = f"{judged['agreed'] / judged['judged']:.0%}" if judged["judged"] else "n/a"
            together = f" (one run of {len(result.targets)} targets)" if len(result.targets) > 1 else ""
            rows.append((target["spec"], f"{report['chains_with_hits']} of {chains} chains hit in {wall:.0f} s"
                         f"{together}; the judge agrees with {judged['agreed']} of {judged['judged']} hits ({share})"))
    [target] = SampleRequest(dataset=reference, target=f"high:{high_class}", class_names=names).targets
    rates = sampler_against_ceiling(classifier, generator, target, chains, 5 if args.quick else 30)
    rows.append(("sampler throughput", f"fast HMC {rates['fast']:,.0f} gradient evals/s = "
                 f"{rates['fast'] / rates['ceiling']:.0%} of the {rates['ceiling']:,.0f}/s forward+backward ceiling at "
                 f"batch {chains}; Pyro NUTS {rates['nuts']:,.0f}/s (x{rates['fast'] / rates['nuts']:.0f})"))
    started = time.perf_counter()
    try:
        identified = verbs.identify(dataset=reference, classifier=kind_ids["classifier"], vae=kind_ids[generator_kind],
                                    workspace=workspace, progress=False,
                                    **({"max_images": 40, "samples_per_image": 20, **insist} if args.quick else {}))
        identify_seconds = time.perf_counter() - started
        started = time.perf_counter()
        distilled = verbs.distill(identified, workspace=workspace, progress=False)
        outcome = identified.outcome
        regions = sum(1 for cluster in distilled.report.get("clusters", []) if cluster.get("size", 0))
        rows.append(("Defuse identify + distill", f"{outcome.failures:,} failures from {outcome.images:,} images "
                     f"({identify_seconds:.0f} s), {regions} regions ({time.perf_counter() - started:.0f} s)"))
    except Exception as exc:  # noqa: BLE001 - a benchmark reports a refusal as a row
        rows.append(("Defuse identify + distill", f"refused: {exc}"))
    width = max(len(step) for step, _ in rows)
    for step, figure in rows:
        print(f"| {step:<{width}} | {figure} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few hundred images and epochs (CI's smoke run)")
    parser.add_argument("--sizes", default="32,64", help="image sizes to run, from 32, 64 and 128 (the classifier at "
                        "128x128, the generator trained at 64x64 and seen through a differentiable resize)")
    parser.add_argument("--workspace", default=".bench-workspace-real-size")
    parser.add_argument("--pair", metavar="A,B",
                        help="also probe ambiguous:A,B and high:A;high:B (a pair named by hand, e.g. of classes whose "
                             "high:C hits the judge agrees with)")
    parser.add_argument("--mnist", default=os.environ.get("MNIST_DIR", str(MNIST)),
                        help="folder of MNIST's t10k IDX files (the digits drawn into the images)")
    args = parser.parse_args()
    from probe_core.runs.workspace import Workspace

    workspace = Workspace(args.workspace)
    for size in (int(s) for s in args.sizes.split(",")):
        if size not in SIZES:
            parser.error(f"--sizes takes 32, 64 and 128, got {size}")
        run_size(size, args, workspace)


if __name__ == "__main__":
    main()
