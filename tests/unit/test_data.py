import gzip

import numpy as np
import pytest
import torch
from helpers import require_shared_mnist

from probe_core.catalog import load_dataset
from probe_core.data import FASHION_MNIST_CLASSES, read_idx, write_idx
from probe_core.errors import DataError


def make_idx_pair(folder, prefix, count, seed=0, size=8, gz=True):
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    labels = np.arange(count, dtype=np.uint8) % 10
    images = rng.integers(0, 256, size=(count, size, size), dtype=np.uint8)
    suffix = ".gz" if gz else ""
    write_idx(folder / f"{prefix}-images-idx3-ubyte{suffix}", images)
    write_idx(folder / f"{prefix}-labels-idx1-ubyte{suffix}", labels)
    return images, labels


@pytest.mark.parametrize("name", ["a-idx3-ubyte", "a-idx3-ubyte.gz"])
def test_idx_round_trip_raw_and_gzip(tmp_path, name):
    array = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    path = write_idx(tmp_path / name, array)
    assert (path.read_bytes()[:2] == b"\x1f\x8b") == name.endswith(".gz")
    np.testing.assert_array_equal(read_idx(path), array)


def test_idx_reads_big_endian_int32(tmp_path):
    array = np.array([1, -2, 70000], dtype=np.int32)
    np.testing.assert_array_equal(read_idx(write_idx(tmp_path / "x", array)), array)


@pytest.mark.parametrize(
    "payload, message",
    [
        (b"", "not an IDX file"),
        (b"\x08\x03\x00\x00", "not an IDX file"),
        (b"\x00\x00\x08\x01\x00\x00\x00\x05\x01\x02", r"header says shape \(5,\)"),
        (b"\x00\x00\x08\x01\x00", "truncated header"),
    ],
)
def test_idx_broken_files_name_the_file(tmp_path, payload, message):
    path = tmp_path / "broken-idx1-ubyte"
    path.write_bytes(payload)
    with pytest.raises(DataError, match=message) as info:
        read_idx(path)
    assert str(path) in str(info.value)


def test_idx_corrupt_gzip_and_wrong_dimensions(tmp_path):
    path = tmp_path / "bad.gz"
    path.write_bytes(gzip.compress(b"\x00\x00\x08\x01\x00\x00\x00\x02\x01\x02")[:-6])
    with pytest.raises(DataError, match="corrupt gzip"):
        read_idx(path)
    labels = write_idx(tmp_path / "labels", np.zeros(3, dtype=np.uint8))
    with pytest.raises(DataError, match="expected images"):
        read_idx(labels, expected_ndim=3)


def test_folder_with_both_pairs_is_used_as_given(tmp_path):
    make_idx_pair(tmp_path, "train", 50)
    make_idx_pair(tmp_path, "t10k", 20, seed=1, gz=False)
    dataset = load_dataset("idx", tmp_path)
    assert dataset.train_images.shape == (50, 1, 8, 8)
    assert dataset.test_images.shape == (20, 1, 8, 8)
    assert dataset.train_images.dtype == torch.float32
    assert 0.0 <= float(dataset.train_images.min()) and float(dataset.train_images.max()) <= 1.0
    assert "as given" in dataset.source


def test_single_pair_is_split_stratified_and_says_so(tmp_path):
    make_idx_pair(tmp_path, "t10k", 200)
    dataset = load_dataset("idx", tmp_path)
    assert len(dataset.train_labels) == 160 and len(dataset.test_labels) == 40
    assert torch.bincount(dataset.test_labels, minlength=10).tolist() == [4] * 10
    assert "only the t10k pair" in dataset.source and "stratified" in dataset.source
    again = load_dataset("idx", str(tmp_path))
    assert torch.equal(again.test_images, dataset.test_images)


def test_fashion_mnist_uses_real_class_names_and_subfolder(tmp_path, monkeypatch):
    make_idx_pair(tmp_path / "fashion-mnist", "train", 30)
    monkeypatch.setenv("PROBE_DATA_DIR", str(tmp_path))
    dataset = load_dataset("fashion-mnist")
    assert dataset.class_names == FASHION_MNIST_CLASSES
    assert dataset.class_index("bag") == 8
    assert "not stratified: too few images per class" in dataset.source


def test_missing_files_and_folders_give_clear_errors(tmp_path, monkeypatch):
    monkeypatch.delenv("PROBE_DATA_DIR", raising=False)
    with pytest.raises(DataError, match="PROBE_DATA_DIR"):
        load_dataset("mnist")
    with pytest.raises(DataError, match="does not exist"):
        load_dataset("mnist", tmp_path / "nowhere")
    with pytest.raises(DataError, match="no IDX files"):
        load_dataset("mnist", tmp_path)
    write_idx(tmp_path / "train-images-idx3-ubyte.gz", np.zeros((3, 8, 8), dtype=np.uint8))
    with pytest.raises(DataError, match="no train-labels-idx1-ubyte"):
        load_dataset("mnist", tmp_path)
    write_idx(tmp_path / "train-labels-idx1-ubyte.gz", np.zeros(4, dtype=np.uint8))
    with pytest.raises(DataError, match="3 images but train-labels-idx1-ubyte.gz has 4 labels"):
        load_dataset("mnist", tmp_path)
    with pytest.raises(DataError, match="unknown data set"):
        load_dataset("cifar")


def test_digits_default_split():
    dataset = load_dataset("digits")
    assert dataset.train_images.shape == (1437, 1, 8, 8)
    assert dataset.test_images.shape == (360, 1, 8, 8)
    assert float(dataset.train_images.max()) == 1.0 and float(dataset.train_images.min()) == 0.0
    counts = torch.bincount(dataset.test_labels, minlength=10)
    assert counts.min() >= 35 and counts.max() <= 37


def test_class_subset_views():
    digits = load_dataset("digits")
    kept = digits.subset(keep=[0, 1, 3, 6, 9])
    assert kept.class_names == ("0", "1", "3", "6", "9")
    assert kept.original_classes == (0, 1, 3, 6, 9)
    assert set(kept.train_labels.tolist()) == {0, 1, 2, 3, 4}
    assert len(kept.train_labels) == int(sum((digits.train_labels == c).sum() for c in (0, 1, 3, 6, 9)))
    # The relabelled images are the parent's images of the mapped class.
    parent_threes = digits.train_images[digits.train_labels == 3]
    assert torch.equal(kept.train_images[kept.train_labels == 2], parent_threes)
    dropped = load_dataset("digits[drop=5]")
    assert "5" not in dropped.class_names and dropped.num_classes == 9
    assert dropped.original_classes == (0, 1, 2, 3, 4, 6, 7, 8, 9)
    with pytest.raises(DataError):
        digits.subset(keep=[1], drop=[2])
    with pytest.raises(DataError, match="do not exist"):
        digits.subset(keep=[12])
    with pytest.raises(DataError, match="bad view"):
        load_dataset("digits[take=1]")
    with pytest.raises(DataError, match="unknown class"):
        digits.class_index("eleven")


def test_real_mnist_t10k_is_split():
    dataset = load_dataset("mnist", require_shared_mnist())
    assert dataset.train_images.shape == (8000, 1, 28, 28)
    assert dataset.test_images.shape == (2000, 1, 28, 28)
    assert "only the t10k pair" in dataset.source
    assert abs(float(dataset.train_images.mean()) - 0.133) < 0.01  # MNIST's well-known mean intensity


def test_mislabel_view_relabels_the_training_images_nearest_the_other_class_only():
    from probe_core.data import clean_dataset_name

    clean = load_dataset("digits")
    flawed = load_dataset("digits[mislabel=9->8:0.4]")
    nines = int((clean.train_labels == 9).sum())
    changed = flawed.train_labels != clean.train_labels
    assert int(changed.sum()) == round(0.4 * nines)
    assert (clean.train_labels[changed] == 9).all() and (flawed.train_labels[changed] == 8).all()
    assert torch.equal(flawed.test_labels, clean.test_labels)
    # the relabelled 9s are the ones closest to the mean 8
    mean_eight = clean.train_images[clean.train_labels == 8].flatten(1).mean(0)
    distance = (clean.train_images.flatten(1) - mean_eight).norm(dim=1)
    kept_nines = (clean.train_labels == 9) & ~changed
    assert distance[changed].max() <= distance[kept_nines].min()
    assert flawed.name == "digits[mislabel=9->8:0.4]" and "labelled 8" in flawed.source
    assert clean_dataset_name(flawed.name) == "digits" and clean_dataset_name("digits[drop=5]") == "digits[drop=5]"
    with pytest.raises(DataError, match="mislabel"):
        load_dataset("digits[mislabel=9:0.4]")
    with pytest.raises(DataError, match="different classes"):
        load_dataset("digits[mislabel=9->9:0.4]")


def test_a_view_is_shown_in_the_class_names_it_was_written_in_and_stored_by_index(tmp_path, capsys):
    """``probe data info "DATA[mislabel=middle->bottom:0.5]"`` shows the view as typed; the name runs and models are
    stored under keeps the indices, however the classes were written."""
    from probe_core.catalog import canonical_dataset_name
    from probe_core.cli import main

    rng = np.random.default_rng(0)
    path = tmp_path / "bands.npz"
    labels = np.repeat(np.arange(3), 20)
    np.savez(path, x=rng.uniform(0, 1, (60, 8, 8)).astype(np.float32), y=labels,
             class_names=np.array(["top", "middle", "bottom"]))
    for typed, stored in ((f"{path}[mislabel=middle->bottom:0.5]", "mislabel=1->2:0.5"),
                          (f"{path}[dropdark=top:0.5]", "dropdark=0:0.5"),
                          (f"{path}[drop=middle]", "drop=1"), (f"{path}[keep=bottom,top]", "keep=0,2")):
        same_by_index = load_dataset(canonical_dataset_name(typed.replace(typed.split("[")[1], stored + "]")))
        dataset = load_dataset(canonical_dataset_name(typed))
        assert dataset.name.endswith(f"[{stored}]") and dataset.name == same_by_index.name
        assert dataset.display_name == same_by_index.display_name
        assert main(["data", "info", typed]) == 0
        shown = capsys.readouterr().out.splitlines()[0]
        in_names = typed.split("[")[1].rstrip("]")
        if stored.startswith("keep"):
            in_names = "keep=top,bottom"  # a subset lists its classes in the data's order
        assert f"[{in_names}] (stored as " in shown and f"[{stored}]):" in shown
    digits_view = load_dataset("digits[mislabel=9->8:0.4]")
    assert digits_view.display_name == digits_view.name  # classes named by their indices: one name
    assert load_dataset("digits").display_name == "digits"


def test_declared_ranges_refuse_out_of_range_settings_with_one_message(tmp_path):
    from probe_core.data.files import IMAGE_SIZE_RANGE, reference_for
    from probe_core.errors import ProbeError
    from probe_core.models.spec import MODEL_RANGES, ModelSpec
    from probe_core.runs.scaleout import SHARDS_RANGE, check_shards

    low, high = IMAGE_SIZE_RANGE
    assert reference_for(str(tmp_path), high).endswith(f"?size={high}")
    for size in (low - 1, high + 1):
        with pytest.raises(DataError, match=f"image size must be a whole number from {low} to {high}, got {size}"):
            reference_for(str(tmp_path), size)
        with pytest.raises(DataError, match=f"image size must be a whole number from {low} to {high}, got {size}"):
            load_dataset(f"images:{tmp_path}?size={size}")  # a stored reference is checked as it is read
    with pytest.raises(DataError, match=f"image size must be a whole number from {low} to {high}, got 'abc'"):
        load_dataset(f"images:{tmp_path}?size=abc")
    for settings in ({"seed": -1}, {"seed": MODEL_RANGES["seed"][1] + 1}, {"epochs": 0}, {"epochs": 2.5}):
        with pytest.raises(ProbeError, match="must be a whole number from"):
            ModelSpec(dataset="digits", kind="classifier", **settings)
    with pytest.raises(ProbeError, match="the latent size must be"):
        ModelSpec(dataset="digits", kind="vae", latent_dim=0)
    largest_seed = MODEL_RANGES["seed"][1]
    assert ModelSpec(dataset="digits", kind="vae", seed=largest_seed, latent_dim=1).seed == largest_seed
    check_shards(None)
    check_shards(SHARDS_RANGE[1])
    for shards in (0, SHARDS_RANGE[1] + 1, True):
        with pytest.raises(ProbeError, match="shards must be a whole number"):
            check_shards(shards)
