"""The generator check's figures: the default generators against a 1-epoch VAE (README, "Bring your own model").

    .venv/bin/python benchmarks/generator_check.py --workspace WS          # digits (defaults trained if missing)
    PROBE_DATA_DIR=DIR .venv/bin/python benchmarks/generator_check.py --dataset mnist --workspace WS
    .venv/bin/python benchmarks/generator_check.py --quick --workspace WS           # the same, digits; a smoke run

It prints each generator's verdict and the figures behind it, which are what
``probe_core.models.checks.GENERATOR_THRESHOLDS`` was calibrated on: the defaults must be "ok", the 1-epoch VAE "weak".
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from probe_core.catalog import load_dataset  # noqa: E402
from probe_core.models import ModelSpec  # noqa: E402
from probe_core.models.checks import GENERATOR_THRESHOLDS, check_generator  # noqa: E402
from probe_core.progress import SILENT  # noqa: E402
from probe_core.runs.workspace import Workspace  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="digits")
    parser.add_argument("--workspace", required=True)
    parser.add_argument("--quick", action="store_true", help="a smoke run (the same models: they are cheap on digits)")
    args = parser.parse_args()
    torch.set_num_threads(2)
    workspace = Workspace(args.workspace)
    registry = workspace.registry
    data = load_dataset(args.dataset, registry.data_dir)
    quiet = {"reporter": SILENT}
    for spec in registry.default_specs(args.dataset):
        registry.get_or_train(spec, **quiet)
    classifier = registry.resolve("default", "classifier", args.dataset)
    rows = [(f"default {kind}", registry.get_or_train(ModelSpec(dataset=args.dataset, kind=kind), **quiet))
            for kind in ("vae", "gan")]
    rows.append(("1-epoch VAE", registry.get_or_train(ModelSpec(dataset=args.dataset, kind="vae", epochs=1), **quiet)))
    print(f"thresholds: {GENERATOR_THRESHOLDS}")
    print("| generator | verdict | FD-clf / train-vs-test | confidence ratio | reconstruction ratio | class kept by "
          "reconstructions | sharpness |")
    print("|---|---|---|---|---|---|---|")
    failed = False
    for name, generator in rows:
        check = check_generator(generator, classifier, data)
        figures = check.figures
        reconstruction = figures.get("reconstruction_ratio", "n/a")
        kept = figures.get("reconstruction_class_ratio", "n/a")
        print(f"| {name} | {check.verdict} | {figures['fd_clf']:.1f} / {figures['fd_train_test']:.1f} = "
              f"{figures['fd_ratio']:.1f}x | {figures['confidence_ratio']:.2f} | {reconstruction} | {kept} | "
              f"{figures['sharpness_ratio']:.2f}x |")
        failed |= (check.verdict == "weak") != (name == "1-epoch VAE")
    if failed:
        print("the calibration does not hold: a default generator is weak or the 1-epoch VAE is ok", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
