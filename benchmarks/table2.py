"""The paper's Table 2 (achieved confidence, mean ± sd over all samples) on this machine's data and models.

Run: ``.venv/bin/python benchmarks/table2.py [--workspace DIR] [--dataset digits] [--rows A,B,C] [--quick]``

Rows, as in Bayes-TrEx Table 2 for MNIST: A high confidence (p4 = 1), B ambiguous (p1 = p7 = 0.5),
C interpolation point (p8, p9 = 0.6, 0.4), D misclassification (p8 = 1 on a GAN trained without 8),
E novel class (p6 = 1 for a classifier trained on 0, 1, 3, 6, 9, on a GAN trained on the others).
Each row samples with the product's defaults (batched HMC, 32 chains, 150 warm-up + 150 samples,
σ = 0.05) and prints the mean ± sd of the reported classes' confidence over **all** kept samples,
which is what the paper reports, with the hits-only figures beside it (named so) and the hit rate.
``--quick`` runs rows A-C with 2 chains and 10 + 10 iterations, on the default classifier and the quick modes'
shared 1-epoch generator (``quick_models.py``): a smoke run, not the figures.
"""

from __future__ import annotations

import argparse
import math
import time

from probe_core.bayestrex import recipes
from probe_core.bayestrex.request import SampleRequest
from probe_core.runs.workspace import Workspace
from quick_models import quick_models

ROWS = (  # row, what, spec or use case, the target reported, the paper's MNIST figure
    ("A", "high confidence", "high:4", "high:4", "1.00 ± .01"),
    ("B", "ambiguous", "ambiguous:1,7", "ambiguous:1,7", "0.49, 0.49 ± .02, .03"),
    ("C", "interpolation", "probs:8=0.6,9=0.4", "probs:8=0.6,9=0.4", "0.58, 0.37 ± .04, .04"),
    ("D", "misclassification", ("misclassification", {"excluded_class": "8"}), "high:8", "0.98 ± .02"),
    ("E", "novel class", ("novel-class", {"classifier_classes": (0, 1, 3, 6, 9)}), "high confidence in 6",
     "1.00 ± .01"),
)


def _figures(achieved: dict, mean: str, sd: str) -> str:
    values = [(v[mean], v[sd]) for v in achieved.values() if v[mean] is not None and not math.isnan(v[mean])]
    if not values:
        return "-"
    sds = [s for _, s in values]
    return (", ".join(f"{m:.2f}" for m, _ in values) + " ± "
            + ", ".join("-" if s is None or math.isnan(s) else f"{s:.2f}" for s in sds))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workspace", default="workspace")
    parser.add_argument("--dataset", default="digits")
    parser.add_argument("--rows", help="only these rows, e.g. A,B,C (default: all; A-C with --quick)")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    wanted = set(args.rows.upper().split(",")) if args.rows else {"A", "B", "C"} if args.quick else None
    registry = Workspace(args.workspace).registry
    # quick: the default classifier and the quick modes' shared 1-epoch generator (the code path, not the figures)
    models = dict(zip(("classifier", "generator"), quick_models(registry, args.dataset))) if args.quick else {}
    settings = {"chains": 2, "warmup": 10, "samples": 10} if args.quick else {"chains": 32, "warmup": 150,
                                                                              "samples": 150}
    print(f"{args.dataset}, {settings['chains']} chains, {settings['warmup']} warm-up + {settings['samples']} "
          f"samples per target, batched HMC, σ = 0.05")
    print(f"{'row':<4}{'test':<19}{'target':<27}{'all samples (as the paper)':<28}{'hits only':<24}"
          f"{'hit rate':>9}  {'paper (MNIST)':<22}{'s':>6}")
    for row, what, target, reported, paper in ROWS:
        if wanted is not None and row not in wanted:
            continue
        started = time.perf_counter()
        if isinstance(target, str):
            request = SampleRequest.build(registry, dataset=args.dataset, target=target, **models, **settings)
            result = recipes.probe_target(recipes.prepare_sample(registry, request, suggest_generator=False))
        else:
            name, options = target
            plan = recipes.plan_use_case(registry, args.dataset, name, **options)
            result = recipes.run_use_case(registry, plan, args.dataset, **settings)
        # the novel-class run samples every classifier class; the paper's row is one of them
        entry = next(t for t in result.targets if reported in (t["spec"], t["description"]))
        achieved = entry["summary"]["achieved"]
        print(f"{row:<4}{what:<19}{entry['description']:<27}{_figures(achieved, 'mean', 'sd'):<28}"
              f"{_figures(achieved, 'hits_mean', 'hits_sd'):<24}{entry['hit_rate'] * 100:8.0f}%  {paper:<22}"
              f"{time.perf_counter() - started:6.1f}", flush=True)


if __name__ == "__main__":
    main()
