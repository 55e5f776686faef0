"""Data a user brings: image folders and .npz arrays, grey and RGB, with one clear message for bad files."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from probe_core.catalog import canonical_dataset_name, dataset_entry, load_dataset
from probe_core.cli import main
from probe_core.data import files
from probe_core.data.datasets import file_dataset
from probe_core.errors import DataError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _cache_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv(files.CACHE_ENV, str(tmp_path / "cache"))
    files.load_file_arrays.cache_clear()
    file_dataset.cache_clear()


def _write_images(folder: Path, classes=("cat", "dog"), count=10, size=(12, 12), rgb=True, seed=0) -> Path:
    rng = np.random.default_rng(seed)
    for index, name in enumerate(classes):
        (folder / name).mkdir(parents=True, exist_ok=True)
        for i in range(count):
            pixels = (rng.random((*size, 3 if rgb else 1)) * 200).astype(np.uint8)
            pixels[..., 0] += 40 * index
            image = Image.fromarray(pixels if rgb else pixels[..., 0], "RGB" if rgb else "L")
            image.save(folder / name / f"{i}.png")
    return folder


def test_a_folder_without_splits_is_split_stratified_and_says_so(tmp_path):
    reference = canonical_dataset_name(str(_write_images(tmp_path / "pets")))
    assert reference == f"images:{tmp_path / 'pets'}"
    dataset = load_dataset(reference)
    assert dataset.class_names == ("cat", "dog") and dataset.image_shape == (3, 12, 12)
    assert len(dataset.train_labels) + len(dataset.test_labels) == 20
    assert "split" in dataset.source and "stratified" in dataset.source and "RGB" in dataset.source
    assert sorted(np.bincount(dataset.test_labels.numpy())) == [2, 2]


def test_train_and_test_folders_are_used_as_given_and_grey_stays_one_channel(tmp_path):
    _write_images(tmp_path / "digits" / "train", ("a", "b", "c"), count=6, rgb=False)
    _write_images(tmp_path / "digits" / "test", ("a", "b", "c"), count=2, rgb=False, seed=1)
    dataset = load_dataset(canonical_dataset_name(str(tmp_path / "digits")))
    assert dataset.image_shape == (1, 12, 12) and len(dataset.train_labels) == 18 and len(dataset.test_labels) == 6
    assert "as given" in dataset.source and "grey" in dataset.source


def test_mixed_sizes_are_resized_to_the_most_common_or_the_chosen_size(tmp_path):
    folder = _write_images(tmp_path / "mixed", count=5)
    Image.fromarray(np.zeros((30, 20, 3), np.uint8)).save(folder / "cat" / "big.jpg")
    default = load_dataset(canonical_dataset_name(str(folder)))
    assert default.image_shape == (3, 12, 12) and "1 images resized to 12x12" in default.source
    chosen = load_dataset(canonical_dataset_name(str(folder), image_size=16))
    assert chosen.image_shape == (3, 16, 16) and chosen.name.endswith("?size=16")


def test_a_corrupt_image_is_named_and_can_be_skipped(tmp_path):
    folder = _write_images(tmp_path / "broken", count=5)
    (folder / "dog" / "bad.png").write_bytes(b"not an image")
    with pytest.raises(DataError, match=r"cannot read image .*dog/bad\.png"):
        load_dataset(canonical_dataset_name(str(folder)))
    skipped = load_dataset(canonical_dataset_name(str(folder), skip_bad=True))
    assert "1 unreadable files skipped" in skipped.source and len(skipped.train_labels) + len(skipped.test_labels) == 10


@pytest.mark.parametrize("make, message", [
    (lambda d: (_write_images(d, count=3), (d / "bird").mkdir()), "without images in .*: bird"),
    (lambda d: _write_images(d, ("only",), count=3), "at least two classes"),
])
def test_an_empty_class_or_a_single_class_gives_one_message(tmp_path, make, message):
    make(tmp_path / "data")
    with pytest.raises(DataError, match=message):
        load_dataset(canonical_dataset_name(str(tmp_path / "data")))


def test_arrays_grey_float_and_rgb_uint8_with_their_own_test_split(tmp_path):
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "grey.npz", x=rng.random((30, 8, 8)), y=np.arange(30) % 3,
             class_names=np.array(["a", "b", "c"]))
    grey = load_dataset(canonical_dataset_name(str(tmp_path / "grey.npz")))
    assert grey.image_shape == (1, 8, 8) and grey.class_names == ("a", "b", "c")
    assert float(grey.train_images.max()) <= 1.0
    np.savez(tmp_path / "rgb.npz", x=(rng.random((20, 6, 6, 3)) * 255).astype(np.uint8), y=np.arange(20) % 2,
             x_test=np.zeros((4, 6, 6, 3), np.uint8), y_test=np.array([0, 1, 0, 1]))
    rgb = load_dataset(canonical_dataset_name(str(tmp_path / "rgb.npz")))
    assert rgb.image_shape == (3, 6, 6) and len(rgb.test_labels) == 4 and rgb.class_names == ("0", "1")


@pytest.mark.parametrize("arrays, message", [
    ({"x": np.zeros((5, 4, 4)), "y": np.arange(4) % 2}, "has 4 labels but there are 5 images"),
    ({"x": np.zeros((5, 4, 4)), "y": np.zeros(5, int)}, "at least two classes"),
    ({"x": np.full((4, 4, 4), 2.0), "y": np.arange(4) % 2}, r"in \[0, 1\]"),
    ({"x": np.zeros((4, 4, 4, 2)), "y": np.arange(4) % 2}, "C = 1 or 3"),
    ({"y": np.arange(4) % 2}, "needs arrays x and y"),
])
def test_bad_arrays_give_one_clear_message(tmp_path, arrays, message):
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(DataError, match=message):
        load_dataset(canonical_dataset_name(str(tmp_path / "bad.npz")))


def test_the_second_open_reads_the_cache(tmp_path, monkeypatch):
    reference = canonical_dataset_name(str(_write_images(tmp_path / "cached", count=4)))
    first = load_dataset(reference)
    assert list((tmp_path / "cache").glob("cached-*.npz"))
    files.load_file_arrays.cache_clear()
    file_dataset.cache_clear()
    monkeypatch.setattr(files, "_decode", lambda path: pytest.fail("decoded again instead of reading the cache"))
    assert load_dataset(reference).train_images.shape == first.train_images.shape


def test_a_reference_resolves_in_another_process_and_folder_and_a_view_keeps_its_classes(tmp_path):
    reference = canonical_dataset_name(str(_write_images(tmp_path / "pets", ("cat", "dog", "fox"), count=4)))
    assert dataset_entry(reference).zoo_generators == ("vae", "gan")
    out = subprocess.run([sys.executable, "-m", "probe_core.cli", "data", "info", reference + "[keep=cat,fox]"],
                         cwd="/", capture_output=True, text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin",
                                                                       files.CACHE_ENV: str(tmp_path / "c2")})
    assert out.returncode == 0, out.stderr
    assert "classes (2): cat, fox" in out.stdout


def test_the_cli_takes_a_plain_path_and_says_what_is_wrong_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _write_images(tmp_path / "pets", count=3)
    assert main(["data", "info", "./pets"]) == 0
    assert "images:" + str(tmp_path / "pets") in capsys.readouterr().out
    assert main(["data", "info", "./nothing-here"]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("error:") and "does not exist" in error and "\n" not in error


def test_default_epochs_on_a_users_data_grow_as_the_data_shrinks():
    from probe_core.models.recipes import MIN_TRAINING_STEPS, default_epochs, epochs_for_size

    shape = (3, 32, 32)
    for kind in ("classifier", "vae", "gan"):
        small, large = epochs_for_size(kind, shape, 100), epochs_for_size(kind, shape, 100_000)
        assert large == default_epochs(kind, shape) and small > large
        assert small * 2 >= MIN_TRAINING_STEPS[kind]  # 100 images are 2 batches of 64 per epoch
        # small images too: 100 8x8 images at the digits defaults were a few dozen steps
        assert epochs_for_size(kind, (1, 8, 8), 100) * 2 >= MIN_TRAINING_STEPS[kind]
        assert epochs_for_size(kind, (1, 8, 8), 100_000) == default_epochs(kind, (1, 8, 8))
