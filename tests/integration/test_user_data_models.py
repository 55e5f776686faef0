"""A folder of RGB images and a .npz of grey arrays through the CLI: info, default models, sampling, Defuse."""

import json

import numpy as np
import pytest
from PIL import Image

from probe_core.cli import main
from probe_core.data import files


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


@pytest.mark.parametrize("make", [_rgb_folder, lambda root: _grey_arrays(root.with_suffix(".npz"))],
                         ids=["rgb-folder", "grey-npz"])
def test_user_data_goes_through_info_defaults_sample_and_defuse(tmp_path, make, capsys, monkeypatch):
    monkeypatch.setenv(files.CACHE_ENV, str(tmp_path / "cache"))
    data = make(tmp_path / "data")
    base = ["--workspace", str(tmp_path / "ws"), "--device", "cpu"]
    assert main(base + ["data", "info", data]) == 0
    assert "classes (3)" in capsys.readouterr().out
    assert main(base + ["models", "defaults", "--dataset", data]) == 0
    trained = capsys.readouterr().out
    assert trained.count("test acc") == 1 and trained.count("FD-clf") == 2  # classifier, VAE, GAN
    assert main(base + ["sample", "--dataset", data, "--target", "high:1", "--chains", "4", "--warmup", "20",
                        "--samples", "10"]) == 0
    assert "targets reached" in capsys.readouterr().out
    assert main(base + ["models", "train", "--dataset", data, "--kind", "classifier", "--seed", "1"]) == 0
    oracle = capsys.readouterr().out.split(":")[0]
    out = tmp_path / "run.json"
    code = main(base + ["defuse", "run", "--dataset", data, "--samples-per-image", "50", "--noise-scale", "0.5",
                        "--max-samples", "500",
                        "--auto-label", f"oracle:{oracle}", "--lambdas", "1", "--epochs", "1",
                        "--samples-per-region", "16", "--out", str(out)])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    summary = json.loads(out.read_text())
    assert summary["failures"] > 0 and 0 <= summary["results"]["before"]["test_accuracy"] <= 1
