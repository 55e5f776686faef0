"""A folder of RGB images and a .npz of grey arrays through the CLI: info, training, sampling, Defuse."""

import json

import numpy as np
import pytest
from PIL import Image

from probe_core.cli import main
from probe_core.data import files

pytestmark = pytest.mark.slow  # trains models or runs long steps: left out of make test-fast


def _rgb_folder(root):
    rng = np.random.default_rng(0)
    for index, name in enumerate(("red", "green", "blue")):
        (root / name).mkdir(parents=True)
        for i in range(24):
            pixels = (rng.random((8, 8, 3)) * 150).astype(np.uint8)
            pixels[2:6, 2:6, index] += np.uint8(rng.integers(20, 100))  # a coloured square, faint or clear
            Image.fromarray(pixels).save(root / name / f"{i}.png")
    return str(root)


def _grey_arrays(path):
    rng = np.random.default_rng(1)
    labels = np.arange(72) % 3
    images = rng.random((72, 8, 8)) * 0.6
    for c in range(3):
        images[labels == c, 2 * c:2 * c + 3, :] += rng.uniform(0.05, 0.4, ((labels == c).sum(), 1, 1))  # faint or clear
    np.savez(path, x=np.clip(images, 0, 1), y=labels, class_names=np.array(["top", "middle", "bottom"]))
    return str(path)


# The folder trains every default model (classifier, VAE, GAN); the arrays train, one by one, the two that sampling
# and Defuse use (the GAN's training on a user's data is the folder's to check: the suite pays for it once).
@pytest.mark.parametrize("make, flaw, kinds", [
    (_rgb_folder, "green->blue:0.6", None),
    (lambda root: _grey_arrays(root.with_suffix(".npz")), "middle->bottom:0.6", ("classifier", "vae")),
], ids=["rgb-folder", "grey-npz"])
def test_user_data_goes_through_info_training_sample_and_defuse(tmp_path, make, flaw, kinds, capsys, monkeypatch):
    monkeypatch.setenv(files.CACHE_ENV, str(tmp_path / "cache"))
    data = make(tmp_path / "data")
    base = ["--workspace", str(tmp_path / "ws"), "--device", "cpu"]
    assert main(base + ["data", "info", data]) == 0
    assert "classes (3)" in capsys.readouterr().out
    if kinds is None:
        assert main(base + ["models", "defaults", "--dataset", data]) == 0
    else:
        for kind in kinds:
            assert main(base + ["models", "train", "--dataset", data, "--kind", kind]) == 0
    trained = capsys.readouterr().out
    # the classifier, then one FD-clf per generator (the VAE, and with the defaults the GAN)
    assert trained.count("test acc") == 1 and trained.count("FD-clf") == (2 if kinds is None else 1), trained
    sampled = tmp_path / "sample.json"
    assert main(base + ["sample", "--dataset", data, "--target", "high:1", "--chains", "4", "--warmup", "20",
                        "--samples", "10", "--out", str(sampled)]) == 0
    assert "1/1 targets reached" in capsys.readouterr().out
    [target] = json.loads(sampled.read_text())["targets"]
    hits = [s for s in target["samples"] if s["hit"]]
    assert target["summary"]["chains_with_hits"] >= 1 and hits
    assert all(s["confidences"][1] == max(s["confidences"]) for s in hits)  # a hit is the class asked for
    # a classifier with a known flaw (a share of one class labelled as another), the clean default as the oracle
    oracle = next(line for line in trained.splitlines() if "test acc" in line).split(":")[0]
    assert main(base + ["models", "train", "--dataset", f"{data}[mislabel={flaw}]", "--kind", "classifier"]) == 0
    flawed = capsys.readouterr().out.split(":")[0]
    out = tmp_path / "run.json"
    code = main(base + ["defuse", "run", "--dataset", data, "--classifier", flawed, "--samples-per-image", "50",
                        "--noise-scale", "0.5", "--max-samples", "500",
                        "--auto-label", f"oracle:{oracle}", "--lambdas", "1", "--epochs", "1",
                        "--samples-per-region", "16", "--out", str(out)])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    summary = json.loads(out.read_text())
    # the flawed classifier learnt the rest of the data: well above the 1/3 of chance before any fix
    assert summary["failures"] > 0 and summary["results"]["before"]["test_accuracy"] > 0.5
    # finetuning on the labelled failure regions raises the classifier's accuracy on held-out samples of them
    before, after = summary["results"]["before"], summary["results"]["defuse"]
    assert after["failure_accuracy"] > before["failure_accuracy"], summary["results"]
