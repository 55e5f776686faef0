"""The ambiguity matrix with its own defaults, as a user types it: ``probe sample --target ambiguous-matrix``.

Run: ``.venv/bin/python benchmarks/matrix_defaults.py [--workspace DIR] [--dataset digits] [--quick]``

Times the command in its own process (model loading included; the default models are trained first
if the workspace lacks them, not timed) and prints how many of the K(K-1)/2 pairs it reached (at
least one hit) and how many at least two chains reached. The Ambiguity matrix page starts from the
same settings (``probe_core.bayestrex.matrix_sampler_defaults``: they depend on the image size).
Goals (issue 14), on 2 cores: at least 40 of 45 pairs on digits in at most 120 s; at least 38 of 45
on MNIST (``--dataset mnist``, IDX files in ``$PROBE_DATA_DIR``; the paper reached 38) in at most
15 minutes. ``--quick`` adds ``--chains 2 --warmup 3 --samples 3`` (a smoke run, not the figure).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from probe_core.bayestrex import matrix_sampler_defaults
from probe_core.catalog import load_dataset

GOALS = {"digits": (40, 120), "mnist": (38, 900)}  # (pairs reached, seconds) on 2 cores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workspace", default="workspace")
    parser.add_argument("--dataset", default="digits")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    probe = [sys.executable, "-m", "probe_core.cli", "--workspace", args.workspace]
    subprocess.run([*probe, "models", "defaults", "--dataset", args.dataset], check=True, stdout=subprocess.DEVNULL)
    typed = ["sample", "--target", "ambiguous-matrix", "--dataset", args.dataset]
    extra = ["--chains", "2", "--warmup", "3", "--samples", "3"] if args.quick else []
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "matrix.json"
        started = time.perf_counter()
        subprocess.run([*probe, *typed, *extra, "--out", str(out)], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        wall = time.perf_counter() - started
        result = json.loads(out.read_text())
    targets = result["targets"]
    reached = sum(not t["failed"] for t in targets)
    two_chains = sum(t["summary"]["chains_with_hits"] >= 2 for t in targets)
    settings = (f"{result['chains_per_target']} chains per pair, {result['warmup']} warm-up + "
                f"{result['samples_per_chain']} samples")
    defaults = matrix_sampler_defaults(load_dataset(args.dataset).image_shape)
    print(f"probe sample {' '.join(typed[1:] + extra)}  ({settings}"
          + ("" if args.quick else f"; the defaults: {defaults}") + ")")
    goal = GOALS.get(args.dataset)
    print(f"{reached}/{len(targets)} pairs reached ({two_chains} by at least 2 chains) in {wall:.0f} s wall "
          f"({result['wall_seconds']:.0f} s sampling)"
          + (f"; goal: at least {goal[0]} of 45 in at most {goal[1]} s" if goal else ""))


if __name__ == "__main__":
    main()
