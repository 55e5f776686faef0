"""Colour, proven: Bayes-TrEx and Defuse on the embedded RGB 32×32 ``colours`` data set, as a user types them.

Run: ``.venv/bin/python benchmarks/colour.py [--workspace DIR] [--figure PNG] [--quick]``

Every step is a ``probe`` command in its own process: the default models (classifier and VAE,
timed), Bayes-TrEx high-confidence and ambiguous targets (batched HMC through the VAE; hit rate and
mean confidence over all kept samples), then Defuse end to end on a classifier with a planted flaw
(``colours[mislabel=red->green:0.4]``: 40 % of the training reds nearest green labelled green), the
clean default classifier as the oracle that labels the clusters: failures, clusters, failure
regions, and test and failure-region accuracy before and after the correction and for the paper's
baseline. The figure has one row of
hits per target. ``--quick``: one high-confidence and one ambiguous target, 4 chains, 10 + 10 iterations, a small Defuse (a smoke
run, not the figures).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from probe_core.reporting.render import image_grid, png_bytes

TARGETS = ("high:red", "high:green", "high:blue", "ambiguous:red,green", "ambiguous:green,blue", "ambiguous:red,blue")
QUICK_TARGETS = ("high:red", "ambiguous:green,blue")
HITS_PER_ROW = 10
FLAWED = "colours[mislabel=red->green:0.4]"


def _probe(workspace: str, *arguments: str) -> tuple[str, float]:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "probe_core.cli", "--workspace", workspace, *arguments],
                          check=True, capture_output=True, text=True)
    return done.stdout, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workspace", default="workspace")
    parser.add_argument("--figure", help="write the hits, one row per target, to this PNG (default: "
                        "assets/colour.png, none with --quick)")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.figure is None and not args.quick:
        args.figure = str(Path(__file__).resolve().parents[1] / "assets" / "colour.png")
    trained, seconds = _probe(args.workspace, "models", "defaults", "--dataset", "colours")
    print(f"colours (RGB 3x32x32, 3 classes): default models in {seconds:.0f} s (0 s when already trained)")
    for line in trained.splitlines():
        print("  " + line)
    chains, warmup, samples = ("4", "10", "10") if args.quick else ("16", "100", "100")
    rows = []
    print(f"\nBayes-TrEx, batched HMC through the VAE, {chains} chains, {warmup} warm-up + {samples} samples per target")
    print(f"{'target':<27}{'hit rate':>9}  {'confidence, all samples (mean ± sd)':<40}{'s':>5}")
    with tempfile.TemporaryDirectory() as folder:
        for target in QUICK_TARGETS if args.quick else TARGETS:
            out, arrays = Path(folder) / "run.json", Path(folder) / "run.npz"
            _, seconds = _probe(args.workspace, "sample", "--dataset", "colours", "--target", target, "--chains", chains,
                                "--warmup", warmup, "--samples", samples, "--out", str(out), "--npz", str(arrays))
            [result] = json.loads(out.read_text())["targets"]
            achieved = ", ".join(f"{name} {value['mean']:.2f} ± {value['sd']:.2f}"
                                 for name, value in result["summary"]["achieved"].items())
            print(f"{target:<27}{result['hit_rate']:>8.0%}  {achieved:<40}{seconds:>5.0f}", flush=True)
            stored = np.load(arrays)
            hits = stored["images"][stored["hit"]]
            chosen = hits[np.linspace(0, len(hits) - 1, min(HITS_PER_ROW, len(hits))).astype(int)] if len(hits) else hits
            row = np.ones((HITS_PER_ROW, *stored["images"].shape[1:]), dtype=np.float32)
            row[:len(chosen)] = chosen
            rows.append(row)
        if args.figure:
            Path(args.figure).write_bytes(png_bytes(image_grid(np.concatenate(rows), columns=HITS_PER_ROW, scale=3)))
            print(f"figure: {args.figure} (rows: {', '.join(TARGETS)}; blank tiles: fewer hits)")

        flawed_out, _ = _probe(args.workspace, "models", "train", "--dataset", FLAWED, "--kind", "classifier")
        flawed = flawed_out.split(":")[0]
        summary_path = Path(folder) / "defuse.json"
        small = ["--max-images", "300", "--samples-per-image", "10", "--lambdas", "1", "--epochs", "1",
                 "--samples-per-region", "16"]
        full = ["--samples-per-image", "50"]  # the paper's 17 λ, 3 epochs
        _, seconds = _probe(args.workspace, "defuse", "run", "--dataset", FLAWED, "--classifier", flawed,
                            "--noise-scale", "0.5", "--auto-label", "oracle:default",
                            *(small if args.quick else full), "--out", str(summary_path))
        summary = json.loads(summary_path.read_text())
    regions = [c for c in summary["clusters"] if c["is_failure"]]
    print(f"\nDefuse end to end on {flawed} ({seconds:.0f} s; the clean default classifier as oracle): "
          f"{summary['failures']} failures, "
          f"{len(summary['clusters'])} clusters, {len(regions)} failure regions")
    for region in regions:
        print(f"  cluster {region['cluster_index']}: {region['size']} failures, labelled {region['label']} by the oracle")
    results = summary["results"]
    print("test accuracy: " + ", ".join(f"{name} {results[name]['test_accuracy']:.1%}"
                                         for name in ("before", "defuse", "baseline") if name in results))
    print("failure-region accuracy: " + ", ".join(
        f"{name} {results[name]['failure_accuracy']:.1%}" for name in ("before", "defuse", "baseline")
        if name in results and results[name].get("failure_accuracy") is not None))


if __name__ == "__main__":
    main()
