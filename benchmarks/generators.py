"""Generator recipes side by side: the flat VAE against the regularized autoencoder with a fitted density (issue 68).

For one data set (an embedded one, or the 32x32 SVHN-like and 64x64 sign-like stand-ins that
``benchmarks/real_size.py`` builds from ``../shared``'s MNIST digits) it trains the default classifier, an
independent judge (the same recipe, seed 1001, never probed) and each generator recipe:

- **vae**: the data set's default VAE, sampled under its N(0, I) prior, and under a density fitted on its
  training codes afterwards (:class:`probe_core.models.density.ClassCodeDensity`);
- **rae**: the regularized autoencoder (``ModelSpec(kind="rae")``: a deterministic convolutional autoencoder
  trained on pixels + SSIM + a feature network of its own, with the density fitted afterwards), with the code
  the recipe gives the data's size (flat below 64x64);
- **rae-spatial**: the same with the spatial code (8 channels of 8x8, a code of 512) at any size, which the
  recipe keeps for 64x64 and up.

Each autoencoder is sampled through each prior (``--priors``), refitted on its training codes here whatever its
stored model holds: the kernel density (the default; ``--bandwidths`` lists the kernels' sizes measured), manifold
Parzen windows (kernels spread along each code's same-class neighbours), one Gaussian per class with a shared
covariance, and a RealNVP flow over the whitened codes whose N(0, I) noise the chains run on (issue 99; from 32x32
up the recipe's own prior, measured as stored). It prints one row per recipe, density, chain start and target:
training seconds,
the generator check's verdict with the judge (:func:`probe_core.models.checks.judged_probe`: the share of a short
high:C probe's hits the judge agrees with) and figures (FD-clf against the data's own train-vs-test, sharpness,
the share of held-out images whose reconstructions keep their class, against the images), the class kept on
training images, then ``high:C`` chains (``SamplerConfig`` at the real-size defaults) started from prior draws or
from the target class's part of the density (``init="classes"``), and, with ``--size``, ``ambiguous:A,B`` for the
pair ``benchmarks/real_size.py`` chooses (also from tempered SMC, the start for it without a density) (the classes the classifier confuses most among those it knows): chains
that hit, the share of hits the judge calls the class (for a pair: either of the two), the hits' provenance (the
share that are near copies of a training image, their median distance to the nearest training image over a real
test image's, distinct nearest training images and per chain: :mod:`probe_core.data.provenance`), a two-sample
test (:func:`probe_core.models.two_sample.two_sample_accuracy`: a small network told hits from the test images of
the target's classes; 50 % is indistinguishable), the chains' ESS and seconds. ``auto`` is the product's default
start (:func:`probe_core.bayestrex.run.auto_init`), named in brackets.
Run:

    .venv/bin/python benchmarks/generators.py --workspace WS [--size 32|64 [--train-images N] | --dataset digits]
        [--recipes rae-spatial,vae] [--bandwidths 0.2] [--quick]

``--quick`` (CI's smoke run): digits (or the stand-in's few images), short trainings, 4 chains of 5 + 5.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from probe_core.catalog import canonical_dataset_name  # noqa: E402
from probe_core.data.provenance import ProvenanceMeter, training_index  # noqa: E402
from probe_core.models import ModelSpec  # noqa: E402
from probe_core.models.checks import check_generator, judge_agreement  # noqa: E402
from probe_core.bayestrex.run import auto_init  # noqa: E402
from probe_core.mcmc.diagnostics import effective_sample_size  # noqa: E402
from probe_core.models.code_flow import NoiseFlowGenerator, noise_flow_generator  # noqa: E402
from probe_core.models.two_sample import MIN_TWO_SAMPLE_IMAGES, two_sample_accuracy  # noqa: E402
from probe_core.models.density import (  # noqa: E402
    ClassCodeDensity,
    ManifoldCodeDensity,
    DensityGenerator,
    KernelCodeDensity,
    fit_code_density,
)
from probe_core.models.training import classifier_accuracy  # noqa: E402
from probe_core.runs.workspace import Workspace  # noqa: E402
from probe_core.sampling import BayesTrExPosterior, SamplerConfig, run_hmc  # noqa: E402
from probe_core.sampling.targets import TargetBatch, parse_targets  # noqa: E402

JUDGE_SEED = 1001
QUICK_EPOCHS = {"classifier": 2, "vae": 4, "rae": 4}
# A recipe's name -> what its ModelSpec sets beyond the data set (the real-size recipe fills in the rest).
# The priors over an autoencoder's codes: the kernel density (today's default), manifold Parzen windows, one Gaussian
# per class, and a flow whose N(0, I) noise the chains run on.
PRIORS = ("kernel", "manifold", "class", "flow")
RECIPES = {"vae": {"kind": "vae"}, "rae": {"kind": "rae"},
           "rae-spatial": {"kind": "rae", "architecture": "SpatialDensityAutoencoder", "latent_dim": 512}}


class TemperedNoise(torch.nn.Module):
    """A flow generator whose chains' noise is scaled by ``temperature`` before the flow: under the chains' N(0, I)
    the flow's input is N(0, t^2 I), reduced-temperature sampling (Kingma & Dhariwal, Glow, 2018)."""

    def __init__(self, flowed: NoiseFlowGenerator, temperature: float) -> None:
        super().__init__()
        self.flowed, self.temperature, self.latent_dim = flowed, float(temperature), flowed.latent_dim

    def decode(self, noise: torch.Tensor) -> torch.Tensor:
        return self.flowed.decode(self.temperature * noise)

    def encode(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        noise, log_variance = self.flowed.encode(images)
        return noise / self.temperature, log_variance


class ClassStartedNoise(torch.nn.Module):
    """A flow generator whose chains may start at the noise of training images of their targets' classes
    (``init="classes"``: :class:`~probe_core.sampling.protocols.ClassConditionalPrior`); its prior stays N(0, I)."""

    def __init__(self, flowed: NoiseFlowGenerator, images: torch.Tensor, labels: torch.Tensor, classes: int) -> None:
        super().__init__()
        self.flowed, self.latent_dim, self.classes = flowed, flowed.latent_dim, classes
        with torch.no_grad():
            self.noise = torch.cat([flowed.encode(images[s:s + 256])[0] for s in range(0, len(images), 256)])
        self.labels = labels.long()

    def decode(self, noise: torch.Tensor) -> torch.Tensor:
        return self.flowed.decode(noise)

    def encode(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.flowed.encode(images)

    def sample_for_targets(self, weights: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        chosen = torch.multinomial(weights.float(), 1, generator=generator).squeeze(1)
        rows = []
        for cls in chosen.tolist():
            of_class = (self.labels == cls).nonzero().squeeze(1)
            rows.append(of_class[torch.randint(len(of_class), (1,), generator=generator)])
        return self.noise[torch.cat(rows)].clone()


def trained(registry, spec: ModelSpec, quick: bool):
    """The model for ``spec`` and the seconds its training took. A quick run trains what it must with few epochs;
    it uses the default models a workspace already holds (``make bench-quick`` installs the shipped ones)."""
    if quick and not registry.exists(registry.model_id(spec)):
        spec = ModelSpec(**{**spec.__dict__, "epochs": QUICK_EPOCHS[spec.kind]})
    model = registry.get_or_train(spec)
    return model, model.metrics.get("train_seconds", float("nan"))


def kept_on_training_images(classifier, generator, dataset, count: int = 1000) -> float:
    """Accuracy on reconstructions of the first ``count`` training images over accuracy on the images."""
    images, labels = dataset.train_images[:count], dataset.train_labels[:count]
    with torch.no_grad():
        reconstructions = torch.cat([generator.decode(generator.encode(images[s:s + 256])[0])
                                     for s in range(0, len(images), 256)])
    return classifier_accuracy(classifier, reconstructions, labels) / max(classifier_accuracy(classifier, images,
                                                                                              labels), 1e-6)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workspace", required=True)
    parser.add_argument("--dataset", default="digits", help="an embedded data set (ignored with --size)")
    parser.add_argument("--size", type=int, choices=(32, 64), help="the real-size stand-in of this size")
    parser.add_argument("--classes", help="the classes probed with high:C (default: one, or three on small sets)")
    parser.add_argument("--recipes", default="vae,rae", help=f"generator recipes compared, of {', '.join(RECIPES)} (default vae,rae)")
    parser.add_argument("--mnist", default=os.environ.get("MNIST_DIR", str(Path(__file__).resolve().parents[2]
                                                                          / "shared" / "data" / "mnist-t10k")))
    parser.add_argument("--bandwidths", default="0.2",
                        help="the kernel density's bandwidths measured, in whitened units (default 0.2, the default)")
    parser.add_argument("--priors", default="kernel,manifold,class,flow",
                        help=f"the autoencoder's priors compared, of {', '.join(PRIORS)} (default all)")
    parser.add_argument("--judge", choices=("seed", "features"), default="seed",
                        help="the independent judge: a classifier of seed 1001 (default), or the first recipe's "
                             "feature network (a ResNet of another seed trained with the generator: one classifier "
                             "less to train)")
    parser.add_argument("--quick", action="store_true", help="short trainings, 4 chains of 5 + 5 (a smoke run)")
    parser.add_argument("--flow-temperatures", default="",
                        help="also the recipe's flow prior sampled at these temperatures t < 1 (the chains' noise "
                        "scaled by t before the flow, so the prior is N(0, t^2 I) over the flow's input: the "
                        "reduced-temperature sampling of Glow, fidelity for diversity), comma-separated")
    parser.add_argument("--flow-class-starts", action="store_true",
                        help="also the recipe's flow prior with chains started at the noise of training images of "
                        "the target's classes (T^-1 of their whitened codes; init='classes')")
    parser.add_argument("--starts", default="auto,prior,classes,smc",
                        help="the chain starts measured, of auto, prior, classes, smc (default all that apply)")
    parser.add_argument("--train-images", type=int,
                        help="with --size: the stand-in with this many training images (per class at 64x64; the "
                             "same test images), to measure how each recipe grows with the data")
    args = parser.parse_args()
    torch.set_num_threads(2)
    began = time.perf_counter()
    workspace = Workspace(args.workspace)
    registry = workspace.registry
    reference = args.dataset
    if args.size:
        from real_size import build_data
        path, _ = build_data(args.size, args.quick, Path(args.mnist), Path(workspace.root) / "data",
                             train_count=args.train_images)
        reference = canonical_dataset_name(str(path))
    data = registry.dataset(reference)
    classifier, classifier_seconds = trained(registry, ModelSpec(dataset=reference, kind="classifier"), args.quick)
    judge = None
    if args.judge == "seed":
        judge, _ = trained(registry, ModelSpec(dataset=reference, kind="classifier", seed=JUDGE_SEED), args.quick)
    names = tuple(classifier.class_names)
    count = len(names)
    pair = None
    if args.classes:
        classes = [names.index(c) for c in args.classes.split(",")]
    elif args.quick or args.size:
        from real_size import confidently_known_class, describe_class_choice, high_shares, similar_pair
        shares = high_shares(classifier, data)
        chosen, share, passed_over = confidently_known_class(classifier, data, shares=shares)
        classes = [chosen]
        print(f"high:C's class: {describe_class_choice(names, chosen, share, passed_over)}")
        known = [index for index in range(count) if shares[index] >= 0.5]
        pair = similar_pair(classifier, data, among=known)
        print(f"ambiguous pair: {names[pair[0]]},{names[pair[1]]}, the pair the classifier confuses most among the "
              f"{len(known)} classes on whose test images it meets high:C at least half the time")
    else:
        classes = sorted({1 % count, count // 2, (2 * count) // 3})
    probes = [(f"high:{names[cls]}", (cls,)) for cls in classes]
    if pair is not None:
        probes.append((f"ambiguous:{names[pair[0]]},{names[pair[1]]}", pair))
    chains, steps = (4, 5) if args.quick else (16, 100)
    judged_by = (f"judge {judge.id} ({judge.metrics.get('test_accuracy', 0):.1%})" if judge is not None
                 else "judge: the first recipe's feature network")
    print(f"{data.name}: {len(data.train_labels):,} training and {len(data.test_labels):,} test images of "
          f"{data.image_shape}; classifier {classifier.id} ({classifier.metrics.get('test_accuracy', 0):.1%}, "
          f"{classifier_seconds:.0f} s), {judged_by}; "
          f"{chains} chains of {steps} + {steps} per target; torch threads {torch.get_num_threads()}")
    print("| recipe | prior | train s | check (judged) | FD-clf ratio | sharpness | class kept held-out | "
          "class kept training | target | start | chains hit | judge agrees with hits | two-sample test (50 %: "
          "like real) | hits near copies | hits' distance vs test | distinct nearest (per chain) | ESS | chain s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    meter = ProvenanceMeter.for_classes(training_index(data), names)
    bandwidths = [float(value) for value in args.bandwidths.split(",")]
    for recipe in args.recipes.split(","):
        if recipe not in RECIPES:
            parser.error(f"unknown recipe {recipe!r}; use of {', '.join(RECIPES)}")
        model, seconds = trained(registry, ModelSpec(dataset=reference, **RECIPES[recipe]), args.quick)
        loaded = registry.resolve(model.id, "generator", reference)
        if judge is None:  # --judge features
            judge = registry.resolve(f"features:{model.id}", "classifier", reference)
            print(f"judge: {judge.id} ({judge.metrics.get('test_accuracy', 0):.1%}), the feature network of "
                  f"{model.id}", flush=True)
        kept_training = kept_on_training_images(classifier.module, loaded.module, data)
        network = getattr(loaded.module, "generator", loaded.module)  # an autoencoder's network, without a density
        priors = args.priors.split(",")
        unknown = set(priors) - set(PRIORS)
        if unknown:
            parser.error(f"unknown prior(s) {', '.join(sorted(unknown))}; use of {', '.join(PRIORS)}")
        densities = ([(f"kernel density, bandwidth {bandwidth}", KernelCodeDensity(bandwidth=bandwidth))
                      for bandwidth in bandwidths] if "kernel" in priors else [])
        if "manifold" in priors:
            densities.append(("manifold kernels", ManifoldCodeDensity()))
        if "class" in priors:
            densities.append(("class Gaussians", ClassCodeDensity()))
        variants = [] if RECIPES[recipe]["kind"] == "rae" else [("N(0, I)", loaded)]
        if isinstance(loaded.module, NoiseFlowGenerator):  # the recipe's own flow prior (the real-size default)
            fitted = {name[len("flow_"):]: value for name, value in loaded.metrics.items() if name.startswith("flow_")}
            print(f"flow prior (the recipe's): kept step {fitted.get('steps')}, held-out "
                  f"{fitted.get('held_out_nll')} nats/dim (N(0, I): {fitted.get('gaussian_nll')})", flush=True)
            variants.append(("flow (noise), the default", loaded))
            for temperature in (float(t) for t in args.flow_temperatures.split(",") if t.strip()):
                variants.append((f"flow (noise) at temperature {temperature:g}", dataclasses.replace(
                    loaded, id=f"{loaded.id}-t{temperature:g}", module=TemperedNoise(loaded.module, temperature),
                    capabilities=None)))
            if args.flow_class_starts:
                variants.append(("flow (noise), class starts", dataclasses.replace(
                    loaded, id=f"{loaded.id}-class-starts",
                    module=ClassStartedNoise(loaded.module, data.train_images, data.train_labels, count),
                    capabilities=None)))
        elif "flow" in priors:  # a flow over the codes, HMC on its N(0, I) noise (probe_core.models.code_flow)
            started = time.perf_counter()
            flowed, fitted = noise_flow_generator(network, data.train_images, data.test_images,
                                                  **({"max_steps": 20} if args.quick else {}))
            print(f"flow prior: {time.perf_counter() - started:.0f} s to fit, kept step {fitted['steps']}, held-out "
                  f"{fitted['held_out_nll']} nats/dim (N(0, I): {fitted['gaussian_nll']})", flush=True)
            variants.append(("flow (noise)", dataclasses.replace(loaded, id=f"{loaded.id}-flow", module=flowed,
                                                                 capabilities=None)))
        for prior_name, estimator in densities:
            density = fit_code_density(network, data.train_images, data.train_labels, estimator=estimator,
                                       num_classes=count)
            # an id of its own per density: the check's results are cached by generator id
            own_id = f"{loaded.id}-{prior_name.replace(', ', '-').replace(' ', '-')}"
            variants.append((prior_name, dataclasses.replace(
                loaded, id=own_id, module=DensityGenerator(network, density, names), capabilities=None)))
        for prior_name, variant in variants:
            generator = variant.module
            check = check_generator(variant, classifier, data, judge=judge)
            figures = check.figures
            starts = [start for start in (("auto", "prior", "classes", "smc")
                                          if isinstance(generator, (DensityGenerator, ClassStartedNoise))
                                          else ("auto", "prior", "smc")) if start in args.starts.split(",")]
            for start in starts:
                for probe, probed in probes:
                    [target] = parse_targets(probe, names)
                    if start == "smc" and not target.needs_tempered_start:
                        continue  # tempered SMC: the start without a density for ambiguous targets
                    init = auto_init(generator, target.needs_tempered_start, "hmc") if start == "auto" else start
                    if start != "auto" and init == auto_init(generator, target.needs_tempered_start, "hmc"):
                        continue  # measured as the product's default start
                    posterior = BayesTrExPosterior(classifier.module, generator, TargetBatch([target], chains))
                    config = SamplerConfig(num_warmup=steps, num_samples=steps, seed=probed[0], init=init)
                    started = time.perf_counter()
                    result = run_hmc(posterior, config)
                    chain_seconds = time.perf_counter() - started
                    probs = result.probs.reshape(chains, steps, count)
                    hit = target.is_hit(probs.reshape(-1, count)).reshape(chains, steps)
                    positions = result.positions.reshape(chains * steps, -1)[hit.reshape(-1)]
                    with torch.no_grad():
                        images = torch.cat([generator.decode(positions[s:s + 256])
                                            for s in range(0, len(positions), 256)]) if len(positions) else None
                    agree, total = judge_agreement(judge.module, images, probed)
                    share = f"{agree / total:.0%} of {total}" if total else "no hits"
                    placed = {"measured": 0}
                    if total:  # every hit against its nearest training image (probe_core.data.provenance)
                        hit_chains = hit.nonzero()[:, 0].numpy()
                        placed = meter.measure(images, probs.reshape(-1, count)[hit.reshape(-1)], hit_chains)
                    novelty = (f"{placed['near_copy_share']:.0%} | {placed['median_ratio']:.2f} | "
                               f"{placed['distinct_nearest']} ({placed['distinct_per_chain']:.1f})"
                               if placed["measured"] else "- | - | -")
                    real = data.test_images[torch.isin(data.test_labels, torch.tensor(probed))]
                    told = (f"{two_sample_accuracy(images, real, seed=probed[0])['accuracy']:.0%}"
                            if total >= MIN_TWO_SAMPLE_IMAGES and len(real) >= MIN_TWO_SAMPLE_IMAGES else "-")
                    ess = effective_sample_size(result.positions.reshape(chains, steps, -1))
                    verdict = f"{check.verdict} ({figures['judge_agreement'] or 0:.0%} of {figures['judge_hits']})"
                    print(f"| {recipe} | {prior_name} | {seconds:.0f} | {verdict} | "
                          f"{figures['fd_ratio']:.1f} | {figures['sharpness_ratio']:.2f} | "
                          f"{figures.get('reconstruction_class_ratio', float('nan')):.2f} | {kept_training:.2f} | "
                          f"{probe} | {start if start != 'auto' else f'auto ({init})'} | "
                          f"{int(hit.any(1).sum())} of {chains} | {share} | {told} | {novelty} | {ess:.0f} | "
                          f"{chain_seconds:.0f} |",
                          flush=True)
    print(f"({time.perf_counter() - began:.0f} s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
