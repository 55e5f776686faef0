"""Default digits models: train the classifier, VAE and GAN in a fresh workspace and print the README's table.

    .venv/bin/python benchmarks/default_models.py           # the README figures (about 85 s on 2 cores)
    .venv/bin/python benchmarks/default_models.py --quick   # 2 epochs each: a smoke run, not the figures
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from probe_core.models import FD_METRIC  # noqa: E402
from probe_core.runs.workspace import Workspace  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 epochs per model (a smoke run, not the figures)")
    args = parser.parse_args()
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as folder:
        registry = Workspace(folder).registry
        print("| model | metric | time |\n|---|---|---|")
        for spec in registry.default_specs("digits", seed=0):
            if args.quick:
                spec = replace(spec, epochs=2)
            model = registry.get_or_train(spec)
            metrics, resolved = model.metrics, model.record["spec"]
            # FD-clf is scored with the default classifier; --quick trains a 2-epoch one instead, so it has none
            fd = f"{metrics[FD_METRIC]:.1f}" if FD_METRIC in metrics else "n/a (no default classifier)"
            if model.kind == "classifier":
                metric = f"test accuracy {metrics['test_accuracy'] * 100:.1f} %"
            elif model.kind == "vae":
                metric = f"test ELBO {metrics['test_elbo']:.1f} nats, FD-clf {fd}"
            else:
                metric = f"FD-clf {fd}"
            print(f"| {resolved['architecture']['class']} {model.kind} (`{model.id}`, {resolved['epochs']} epochs) "
                  f"| {metric} | {metrics['train_seconds']:.0f} s |", flush=True)


if __name__ == "__main__":
    main()
