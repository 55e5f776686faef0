"""Generator recipes side by side: the prior Bayes-TrEx samples from and where its chains start (issue 68).

For one data set's default classifier and VAE it compares, on the same trained VAE:

- **prior**: the VAE's N(0, I), or a density fitted on its training codes afterwards
  (:class:`probe_core.models.density.ClassCodeDensity`: one Gaussian per class, shared covariance, whitened);
- **start**: chains from prior draws, or from the target class's component (where that class's codes live).

and prints, per recipe: how often the classifier calls a decoding of the class's own component that class
("class kept by samples"; the N(0, I) rows have no class component and show the prior's share), `high:C` chains
that hit and the share of hits an independent classifier (the same recipe, seed 1001) agrees with, and the
seconds the chains took. Run:

    .venv/bin/python benchmarks/generators.py --workspace WS [--dataset digits] [--classes 0,3,7] [--quick]

``--quick`` (CI's smoke run): one class, 4 chains, 10 + 10 iterations. What this does not measure yet: other
generator families (an autoencoder trained without a prior) and the 32x32 and 64x64 stand-ins, which need
their VAEs trained (``benchmarks/real_size.py`` trains them).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from probe_core.data.catalog import load_dataset  # noqa: E402
from probe_core.models import ModelSpec  # noqa: E402
from probe_core.models.checks import judge_agreement  # noqa: E402
from probe_core.models.density import DensityGenerator, fit_code_density  # noqa: E402
from probe_core.runs.workspace import Workspace  # noqa: E402
from probe_core.sampling import BayesTrExPosterior, SamplerConfig, run_hmc  # noqa: E402
from probe_core.sampling.targets import TargetBatch, parse_targets  # noqa: E402

JUDGE_SEED = 1001


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workspace", required=True)
    parser.add_argument("--dataset", default="digits")
    parser.add_argument("--classes", help="the classes probed with high:C (default: three spread over the classes)")
    parser.add_argument("--quick", action="store_true", help="one class, 4 chains, 10 + 10 (a smoke run)")
    args = parser.parse_args()
    torch.set_num_threads(2)
    registry = Workspace(args.workspace).registry
    data = load_dataset(args.dataset, registry.data_dir)
    classifier = registry.get_or_train(ModelSpec(dataset=args.dataset, kind="classifier"))
    vae = registry.get_or_train(ModelSpec(dataset=args.dataset, kind="vae"))
    judge = registry.get_or_train(ModelSpec(dataset=args.dataset, kind="classifier", seed=JUDGE_SEED))
    names = tuple(classifier.class_names)
    count = len(names)
    classes = ([names.index(c) for c in args.classes.split(",")] if args.classes
               else [count // 7 % count] if args.quick else sorted({1 % count, count // 2, (2 * count) // 3}))
    chains, steps = (4, 10) if args.quick else (16, 100)

    started = time.perf_counter()
    density = fit_code_density(vae.module, data.train_images, data.train_labels)
    fit_seconds = time.perf_counter() - started
    seen_through = DensityGenerator(vae.module, density, names)
    print(f"{args.dataset}: classifier {classifier.id}, VAE {vae.id} (latent {vae.module.latent_dim}), judge "
          f"{judge.id}; density fitted on {len(data.train_labels):,} training codes in {fit_seconds:.1f} s; "
          f"{chains} chains, {steps} + {steps} iterations per target")
    print("| recipe | class | class kept by samples | chains hit | judge agrees with hits | seconds |")
    print("|---|---|---|---|---|---|")
    rng = torch.Generator().manual_seed(0)
    for cls in classes:
        with torch.no_grad():  # decodings of the class's component: does the classifier see the class?
            own = classifier.module(seen_through.decode(density.sample(256, rng, class_index=cls))).argmax(1)
            prior = classifier.module(vae.module.decode(torch.randn(256, vae.module.latent_dim, generator=rng)))
        kept = {"density": float((own == cls).float().mean()), "normal": float((prior.argmax(1) == cls).float().mean())}
        for prior_name, start_name in (("N(0, I)", "prior"), ("density", "prior"), ("density", "class codes")):
            generator = vae.module if prior_name == "N(0, I)" else seen_through
            [target] = parse_targets(f"high:{names[cls]}", names)
            targets = TargetBatch([target], chains)
            posterior = BayesTrExPosterior(classifier.module, generator, targets)
            initial = density.sample(chains, rng, class_index=cls) if start_name == "class codes" else None
            config = SamplerConfig(num_warmup=steps, num_samples=steps, seed=cls, init="prior")
            began = time.perf_counter()
            result = run_hmc(posterior, config, initial=initial)
            seconds = time.perf_counter() - began
            probs = result.probs.reshape(chains, steps, count)
            hit = target.is_hit(probs.reshape(-1, count)).reshape(chains, steps)
            positions = result.positions.reshape(chains * steps, -1)[hit.reshape(-1)]
            with torch.no_grad():
                images = generator.decode(positions) if len(positions) else None
            agree, total = judge_agreement(judge.module, images, (cls,))
            share = f"{agree / total:.0%} of {total}" if total else "no hits"
            kept_text = (f"{kept['density']:.0%} (its component)" if prior_name == "density"
                         else f"{kept['normal']:.0%} of N(0, I) draws")
            print(f"| {prior_name} prior, start from {start_name} | {names[cls]} | {kept_text} | "
                  f"{int(hit.any(1).sum())} of {chains} | {share} | {seconds:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
