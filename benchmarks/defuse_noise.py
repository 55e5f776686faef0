"""Which Defuse noise mode finds more distinct, labelable failure clusters on digits?

Run: ``.venv/bin/python benchmarks/defuse_noise.py [--workspace DIR]``

The classifier under test is trained on ``digits[mislabel=9->8:0.4]`` (40 % of the
training 9s nearest the mean 8 labelled 8: a planted, systematic flaw); the
default clean digits classifier stands in for the annotators (an oracle). For each
noise mode, identification (Q = 500, M = 100) and distillation (K = 100, ε = 0.01)
run as the product runs them, then the oracle labels each kept cluster's 10 review
images (τ = 0.5), aggregated per image as the paper does. Printed per mode: failures,
clusters kept, clusters whose images have a majority class ("labelable"), failure
regions (more than half of the images' labels differ from the classifier's
prediction), and how many distinct (classifier prediction, true class) kinds of
failure those regions cover.
"""

from __future__ import annotations

import argparse
import time

from probe_core.defuse import review as defuse_review
from probe_core.defuse import steps
from probe_core.models import ModelSpec
from probe_core.runs.workspace import Workspace

MODES = (("paper", 0.15), ("centered", 0.1), ("centered", 0.15), ("centered", 0.25), ("centered", 0.5))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workspace", default="workspace")
    parser.add_argument("--max-samples", type=int, default=10_000)
    parser.add_argument("--quick", action="store_true", help="one mode on 100 images (a smoke run, not the figures)")
    args = parser.parse_args()
    workspace = Workspace(args.workspace)
    registry, store = workspace.registry, workspace.store
    flawed = registry.get_or_train(ModelSpec(dataset="digits[mislabel=9->8:0.4]", kind="classifier"))
    print(f"classifier {flawed.id} (test accuracy {flawed.metrics['test_accuracy'] * 100:.1f} %), "
          f"oracle: the default digits classifier")
    print("mode      scale  failures  kept  labelable  failure regions  distinct kinds  seconds")
    quick = {"max_images": 100, "samples_per_image": 50} if args.quick else {}
    for noise, scale in MODES[2:3] if args.quick else MODES:
        started = time.perf_counter()
        identify_run, identified = steps.run_step(registry, store, steps.IdentifyRequest(
            dataset="digits[mislabel=9->8:0.4]", classifier=flawed.id, noise=noise, noise_scale=scale, **quick))
        distill_run, distilled = steps.run_step(registry, store, steps.DistillRequest(
            identify_run=identify_run, max_samples=args.max_samples))
        _, verdicts = defuse_review.auto_label(registry, store, distill_run, "default")
        clusters = {c["id"]: c for c in store.get_clusters(distill_run)}
        labelable = [v for v in verdicts if v["label"] is not None]
        regions = [v for v in labelable if v["usable"]]
        kinds = {(clusters[v["cluster_id"]]["info"]["majority_prediction"], v["label"]) for v in regions}
        shown_scale = "-" if noise == "paper" else f"{scale:g}"
        print(f"{noise:9s} {shown_scale:5s}  {identified.failures:8d}  {distilled.clusters:4d}  "
              f"{len(labelable):9d}  {len(regions):15d}  {len(kinds):14d}  {time.perf_counter() - started:7.1f}",
              flush=True)


if __name__ == "__main__":
    main()
