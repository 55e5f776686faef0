"""Colour, proven: Bayes-TrEx and Defuse end to end on the embedded RGB 32×32 ``colours`` data set (no download)."""

import json

import numpy as np
import pytest

from make_default_models import COLOURS_FLAWED_DATASET

from probe_core.cli import main

pytestmark = pytest.mark.slow  # trains models or runs long steps: left out of make test-fast


def test_bayestrex_and_defuse_run_end_to_end_on_rgb_32x32(colours_workspace, tmp_path, capsys):
    base = ["--workspace", str(colours_workspace.root), "--device", "cpu"]
    assert main(base + ["data", "info", "colours"]) == 0
    assert "image shape (C, H, W): (3, 32, 32)" in capsys.readouterr().out
    assert main(base + ["models", "defaults", "--dataset", "colours"]) == 0
    trained = capsys.readouterr().out
    accuracy = float(trained.split("test acc ")[1].split("%")[0])
    assert accuracy > 80 and trained.count("FD-clf") == 1  # classifier and VAE
    # Bayes-TrEx (HMC through the VAE) reaches a confident red.
    out = tmp_path / "sample.json"
    assert main(base + ["sample", "--dataset", "colours", "--target", "high:red", "--chains", "8", "--warmup",
                        "30", "--samples", "10", "--out", str(out)]) == 0
    capsys.readouterr()
    result = json.loads(out.read_text())
    [target] = result["targets"]
    assert target["hit_rate"] > 0.2
    samples = colours_workspace.store.get_samples(result["run_id"])
    images = np.stack([s["image"] for s in samples if s["hit"]])
    assert images.shape[1:] == (3, 32, 32)
    red, green, blue = images.reshape(len(images), 3, -1).max(2).T  # the brightest value of each channel
    assert np.mean(red > np.maximum(green, blue) + 0.1) > 0.8  # in colour, and red
    # Defuse on a classifier with a planted flaw (40 % of the reds nearest green labelled green), the clean
    # default classifier as the oracle: failure regions found, labelled and corrected.
    flawed_data = COLOURS_FLAWED_DATASET
    assert main(base + ["models", "train", "--dataset", flawed_data, "--kind", "classifier"]) == 0
    flawed = capsys.readouterr().out.split(":")[0]
    summary_path = tmp_path / "defuse.json"
    code = main(base + ["defuse", "run", "--dataset", flawed_data, "--classifier", flawed, "--samples-per-image", "20",
                        "--noise-scale", "0.5", "--max-images", "300", "--max-samples", "600",
                        "--auto-label", "oracle:default", "--lambdas", "1", "--epochs", "1", "--steps-per-epoch", "12",
                        "--samples-per-region", "16", "--out", str(summary_path)])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    summary = json.loads(summary_path.read_text())
    regions = [c for c in summary["clusters"] if c["is_failure"]]
    assert summary["failures"] > 0 and regions
    assert {region["label"] for region in regions} == {"red"}  # what the flaw took from the classifier
    before, corrected = summary["results"]["before"], summary["results"]["defuse"]
    assert corrected["failure_accuracy"] > before["failure_accuracy"] + 0.2
