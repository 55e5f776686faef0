"""Image data sets: the embedded default, MNIST-family IDX folders, class-subset views.

Every data set is an :class:`ImageDataset` with train and test tensors of shape
(N, C, H, W), float32 in [0, 1], int64 labels 0..K-1 and class names.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from probe_core.data.classes import class_index
from probe_core.data.files import load_file_arrays, parse_reference
from probe_core.data.idx import read_idx
from probe_core.errors import DataError, excerpt

DATA_DIR_ENV = "PROBE_DATA_DIR"
SPLIT_SEED = 0
SPLIT_TEST_FRACTION = 0.2

FASHION_MNIST_CLASSES = (
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
)


# Images of this side and up are "real size" (SVHN's 32x32, the German signs' 64x64 and larger). A user's data of
# that size (an entry with ``sized_defaults``) gets the real-size model recipe, generators and sampler settings;
# Defuse's identification budget is capped for any data of that size, since its cost follows the image size.
REAL_SIZE = 32
# How help and pages name that size.
REAL_SIZE_LABEL = f"{REAL_SIZE}x{REAL_SIZE}"


def is_real_size(image_shape: tuple[int, int, int]) -> bool:
    """Whether images of (C, H, W) are real size (both sides at least :data:`REAL_SIZE`)."""
    return min(image_shape[1], image_shape[2]) >= REAL_SIZE


@dataclass(frozen=True)
class ImageDataset:
    """A labelled image data set split into train and test.

    Attributes
    ----------
    name : str
        Registry name, with the subset in brackets for views (``digits[drop=5]``).
    train_images, test_images : torch.Tensor
        Shape (N, C, H, W), float32 in [0, 1].
    train_labels, test_labels : torch.Tensor
        Shape (N,), int64 in 0..K-1.
    class_names : tuple of str
        K names, index i naming label i.
    source : str
        Where the data came from and how it was split, for display.
    default_latent_dim : int
        Generator latent size suited to this data.
    original_classes : tuple of int
        For a class-subset view, the parent's class index of each label;
        for a full data set, ``range(K)``.
    shown_name : str
        The name as people read it, a view's classes by their names (``signs[mislabel=sign-17->sign-11:0.4]``
        where ``name`` is ``signs[mislabel=17->11:0.4]``); empty: ``name``. See :attr:`display_name`.
    """

    name: str
    train_images: torch.Tensor
    train_labels: torch.Tensor
    test_images: torch.Tensor
    test_labels: torch.Tensor
    class_names: tuple[str, ...]
    source: str
    default_latent_dim: int = 8
    original_classes: tuple[int, ...] = field(default=())
    shown_name: str = ""

    def __post_init__(self) -> None:
        if not self.original_classes:
            object.__setattr__(self, "original_classes", tuple(range(len(self.class_names))))

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """(C, H, W) of one image."""
        return tuple(self.train_images.shape[1:])  # type: ignore[return-value]

    @property
    def display_name(self) -> str:
        """The name with a view's classes by their names, as the user typed them; :attr:`name` keeps their
        indices, so what is stored under it does not depend on how the classes were written."""
        return self.shown_name or self.name

    def _view_named(self, suffix: str, in_names: str) -> dict:
        """The fields of a view of this data set: its ``name`` (suffix in class indices) and ``shown_name``."""
        return {"name": f"{self.name}[{suffix}]", "shown_name": f"{self.display_name}[{in_names}]"}

    @property
    def base_name(self) -> str:
        """The registry name without any subset suffix."""
        return self.name.split("[", 1)[0]

    def class_index(self, name_or_index: str | int) -> int:
        """Resolve a class given by index (``"3"``, ``3``) or by name (``"Bag"``).

        Raises
        ------
        DataError
            If no such class exists; the message lists the valid ones.
        """
        return class_index(name_or_index, self.class_names, where=f"for {self.name}")

    def subset(self, keep: Iterable[int] | None = None, drop: Iterable[int] | None = None) -> "ImageDataset":
        """A view with only some classes, relabelled 0..k-1.

        Parameters
        ----------
        keep : iterable of int, optional
            Classes to keep (indices into this data set's classes).
        drop : iterable of int, optional
            Classes to remove. Give ``keep`` or ``drop``, not both.

        Returns
        -------
        ImageDataset
            The view; ``original_classes`` maps its labels to this data set's.
        """
        if (keep is None) == (drop is None):
            raise DataError("give exactly one of keep= or drop= for a class subset")
        requested = sorted({int(c) for c in (keep if keep is not None else drop)})
        unknown = [c for c in requested if not 0 <= c < self.num_classes]
        if unknown:
            raise DataError(f"classes {unknown} do not exist in {self.name} (0..{self.num_classes - 1})")
        kept = requested if keep is not None else [c for c in range(self.num_classes) if c not in requested]
        if not kept:
            raise DataError(f"a subset of {self.name} must keep at least one class")
        lookup = torch.full((self.num_classes,), -1, dtype=torch.int64)
        lookup[torch.tensor(kept)] = torch.arange(len(kept))

        def select(images: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            mask = lookup[labels] >= 0
            return images[mask], lookup[labels[mask]]

        train_images, train_labels = select(self.train_images, self.train_labels)
        test_images, test_labels = select(self.test_images, self.test_labels)
        listed = kept if keep is not None else requested
        key = "keep" if keep is not None else "drop"
        suffix = f"{key}={','.join(map(str, listed))}"
        in_names = f"{key}={','.join(self.class_names[c] for c in listed)}"
        return replace(
            self,
            **self._view_named(suffix, in_names),
            train_images=train_images,
            train_labels=train_labels,
            test_images=test_images,
            test_labels=test_labels,
            class_names=tuple(self.class_names[c] for c in kept),
            original_classes=tuple(self.original_classes[c] for c in kept),
            source=f"{self.source}; classes {in_names}",
        )


    def resized(self, size: int) -> "ImageDataset":
        """This data set's images resized to ``size`` x ``size`` (bilinear, antialiased), labels unchanged: what a
        generator smaller than the data trains on (the Defuse authors' 64x64 generator of 128x128 signs)."""
        if size == self.image_shape[1] == self.image_shape[2]:
            return self
        return replace(self, name=f"{self.name}@{size}px", shown_name=f"{self.display_name}@{size}px",
                       train_images=resize_images(self.train_images, size, size),
                       test_images=resize_images(self.test_images, size, size),
                       source=f"{self.source}; resized to {size}x{size}")

    def mislabel(self, source: int, target: int, fraction: float) -> "ImageDataset":
        """A view with systematic annotation errors in the training split (the test split stays clean).

        The ``fraction`` of class ``source`` training images closest in pixel space to
        the mean ``target`` image are labelled ``target``: a sub-style of one class
        consistently mislabelled, the kind of flaw Defuse is meant to find and fix.
        """
        for c in (source, target):
            if not 0 <= c < self.num_classes:
                raise DataError(f"class {c} does not exist in {self.name} (0..{self.num_classes - 1})")
        if source == target or not 0 < fraction <= 1:
            raise DataError("mislabel needs two different classes and a fraction in (0, 1]")
        labels = self.train_labels.clone()
        members = (labels == source).nonzero().squeeze(1)
        flat = self.train_images.flatten(1)
        distance = (flat[members] - flat[labels == target].mean(0)).norm(dim=1)
        flipped = members[distance.argsort()[:int(round(fraction * len(members)))]]
        labels[flipped] = target
        suffix = f"mislabel={source}->{target}:{fraction:g}"
        in_names = f"mislabel={self.class_names[source]}->{self.class_names[target]}:{fraction:g}"
        return replace(self, **self._view_named(suffix, in_names), train_labels=labels,
                       source=f"{self.source}; {len(flipped)} training images of class {self.class_names[source]} "
                              f"labelled {self.class_names[target]}")


    def without_dark(self, source: int, fraction: float) -> "ImageDataset":
        """A view whose training split lacks a sub-style: the darkest ``fraction`` of class ``source``'s training
        images (by mean brightness) are left out; the test split keeps them. A classifier trained on it has
        never seen a dark ``source``, the other planted flaw Defuse is meant to find."""
        if not 0 <= source < self.num_classes:
            raise DataError(f"class {source} does not exist in {self.name} (0..{self.num_classes - 1})")
        if not 0 < fraction < 1:
            raise DataError("dropdark needs a fraction in (0, 1)")
        members = (self.train_labels == source).nonzero().squeeze(1)
        brightness = self.train_images[members].flatten(1).mean(1)
        dropped = members[brightness.argsort()[:int(round(fraction * len(members)))]]
        keep = torch.ones(len(self.train_labels), dtype=torch.bool)
        keep[dropped] = False
        suffix = f"dropdark={source}:{fraction:g}"
        return replace(self, **self._view_named(suffix, f"dropdark={self.class_names[source]}:{fraction:g}"),
                       train_images=self.train_images[keep],
                       train_labels=self.train_labels[keep],
                       source=f"{self.source}; the {len(dropped)} darkest training images of class "
                              f"{self.class_names[source]} left out")


def resize_images(images: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Images (B, C, H, W) resized to (B, C, height, width): bilinear, antialiased when shrinking."""
    if tuple(images.shape[-2:]) == (height, width):
        return images
    shrinking = height < images.shape[-2] or width < images.shape[-1]
    return F.interpolate(images, size=(height, width), mode="bilinear", align_corners=False,
                         antialias=shrinking).clamp(0.0, 1.0)



def clean_dataset_name(name: str) -> str:
    """The data set name without a label-flaw view (``mislabel``, ``dropdark``): they change what a classifier
    learns, not the images a generator models."""
    base, _, view = name.partition("[")
    return base if view.startswith(("mislabel=", "dropdark=")) else name


def _parse_mislabel(dataset: "ImageDataset", values: str) -> "ImageDataset":
    pair, _, fraction_text = values.partition(":")
    source, arrow, target = pair.partition("->")
    try:
        fraction = float(fraction_text)
    except ValueError:
        fraction = None
    if not (arrow and source and target and fraction is not None):
        raise DataError(f"bad mislabel view {values!r}: write NAME[mislabel=9->8:0.4]")
    return dataset.mislabel(dataset.class_index(source), dataset.class_index(target), fraction)


def stratified_split(
    images: np.ndarray, labels: np.ndarray, test_fraction: float = SPLIT_TEST_FRACTION, seed: int = SPLIT_SEED
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Split arrays into train and test keeping class proportions, deterministically.

    Falls back to a plain seeded split when some class is too small to stratify
    (see :func:`split_is_stratified`).
    """
    from sklearn.model_selection import train_test_split

    stratify = labels if split_is_stratified(labels, test_fraction) else None
    train_x, test_x, train_y, test_y = train_test_split(
        images, labels, test_size=test_fraction, stratify=stratify, random_state=seed
    )
    return train_x, train_y, test_x, test_y


def split_is_stratified(labels: np.ndarray, test_fraction: float = SPLIT_TEST_FRACTION) -> bool:
    """Whether :func:`stratified_split` can stratify: every class twice, a test slot per class."""
    counts = np.bincount(np.asarray(labels))
    counts = counts[counts > 0]
    return bool(counts.min() >= 2 and int(np.ceil(len(labels) * test_fraction)) >= len(counts))


def _to_tensors(images: np.ndarray, labels: np.ndarray, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.from_numpy(np.ascontiguousarray(images, dtype=np.float32) / scale)
    if x.ndim == 3:
        x = x.unsqueeze(1)
    return x.clamp_(0.0, 1.0), torch.from_numpy(np.asarray(labels, dtype=np.int64))


@functools.lru_cache(maxsize=4)
def load_digits_dataset() -> ImageDataset:
    """scikit-learn's bundled 8x8 digits (1,797 images), fixed stratified 80/20 split."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    train_x, train_y, test_x, test_y = stratified_split(bunch.images, bunch.target)
    train_images, train_labels = _to_tensors(train_x, train_y, 16.0)
    test_images, test_labels = _to_tensors(test_x, test_y, 16.0)
    return ImageDataset(
        name="digits",
        train_images=train_images,
        train_labels=train_labels,
        test_images=test_images,
        test_labels=test_labels,
        class_names=tuple(str(i) for i in range(10)),
        source=(
            f"scikit-learn load_digits (embedded), 8x8 grey, stratified split seed {SPLIT_SEED}: "
            f"{len(train_y)} train / {len(test_y)} test"
        ),
        default_latent_dim=8,
    )


# --- IDX folders -------------------------------------------------------------

def _find_file(folder: Path, prefix: str, kind: str, ndim_tag: str) -> Path | None:
    for stem in (f"{prefix}-{kind}-{ndim_tag}-ubyte", f"{prefix}-{kind}.{ndim_tag}-ubyte", f"{prefix}-{kind}-{ndim_tag}"):
        for suffix in ("", ".gz"):
            candidate = folder / f"{stem}{suffix}"
            if candidate.is_file():
                return candidate
    return None


def _read_pair(folder: Path, prefix: str) -> tuple[np.ndarray, np.ndarray] | None:
    images_path = _find_file(folder, prefix, "images", "idx3")
    labels_path = _find_file(folder, prefix, "labels", "idx1")
    if images_path is None and labels_path is None:
        return None
    if images_path is None:
        raise DataError(
            f"{folder}: found {labels_path.name} but no {prefix}-images-idx3-ubyte[.gz] "
            "(expected the matching IDX image file, 3 dimensions N x rows x cols, uint8)"
        )
    if labels_path is None:
        raise DataError(
            f"{folder}: found {images_path.name} but no {prefix}-labels-idx1-ubyte[.gz] "
            "(expected the matching IDX label file, 1 dimension, uint8)"
        )
    images = read_idx(images_path, expected_ndim=3)
    labels = read_idx(labels_path, expected_ndim=1)
    if images.dtype != np.uint8:
        raise DataError(f"{images_path}: expected uint8 pixels, file has {images.dtype}")
    if len(images) != len(labels):
        raise DataError(
            f"{images_path} has {len(images)} images but {labels_path.name} has {len(labels)} labels"
        )
    return images, labels.astype(np.int64)


def resolve_data_folder(name: str, data_dir: str | Path | None) -> Path:
    """Find the folder holding a named IDX data set.

    Looks in ``data_dir`` (or ``$PROBE_DATA_DIR``): first a sub-folder named like
    the data set, then the folder itself.

    Raises
    ------
    DataError
        If no folder was given or no IDX files are found; says where it looked.
    """
    root = data_dir if data_dir is not None else os.environ.get(DATA_DIR_ENV)
    if not root:
        raise DataError(
            f"data set {name!r} is read from IDX files in a folder: pass --data-dir FOLDER "
            f"or set {DATA_DIR_ENV} (no data is downloaded)"
        )
    root = Path(root).expanduser()
    if not root.is_dir():
        raise DataError(f"data folder {root} does not exist")
    variants = {name, name.replace("-", "_"), name.replace("-", ""), name.upper(), name.title().replace("-", "")}
    for folder in [root / v for v in sorted(variants)] + [root]:
        if folder.is_dir() and any(p.name.endswith(("ubyte", "ubyte.gz")) for p in folder.iterdir()):
            return folder
    raise DataError(
        f"no IDX files for {name!r} in {root} or {root / name}: expected "
        "train-images-idx3-ubyte[.gz] and train-labels-idx1-ubyte[.gz] and/or the t10k-* pair"
    )


@functools.lru_cache(maxsize=8)
def _load_idx_folder(folder: str, name: str, class_names: tuple[str, ...] | None, latent_dim: int) -> ImageDataset:
    path = Path(folder)
    train = _read_pair(path, "train")
    test = _read_pair(path, "t10k")
    if train is not None and test is not None:
        (train_x, train_y), (test_x, test_y) = train, test
        source = f"IDX files in {path}: train pair ({len(train_y)}) and t10k pair ({len(test_y)}) as given"
    elif train is not None or test is not None:
        which = "train" if train is not None else "t10k"
        images, labels = train if train is not None else test
        train_x, train_y, test_x, test_y = stratified_split(images, labels)
        how = "stratified" if split_is_stratified(labels) else "not stratified: too few images per class"
        source = (
            f"IDX files in {path}: only the {which} pair, split into {len(train_y)} train / {len(test_y)} test "
            f"({how}, seed {SPLIT_SEED})"
        )
    else:
        raise DataError(f"{path}: no train-* or t10k-* IDX image/label pair found")
    num_classes = int(max(train_y.max(), test_y.max())) + 1
    if class_names is None:
        names_file = path / "classes.txt"
        if names_file.is_file():
            class_names = tuple(line.strip() for line in names_file.read_text().splitlines() if line.strip())
        else:
            class_names = tuple(str(i) for i in range(num_classes))
    if len(class_names) < num_classes:
        raise DataError(f"{path}: labels go up to {num_classes - 1} but only {len(class_names)} class names are known")
    train_images, train_labels = _to_tensors(train_x, train_y, 255.0)
    test_images, test_labels = _to_tensors(test_x, test_y, 255.0)
    return ImageDataset(
        name=name,
        train_images=train_images,
        train_labels=train_labels,
        test_images=test_images,
        test_labels=test_labels,
        class_names=tuple(class_names),
        source=source,
        default_latent_dim=latent_dim,
    )


# --- folders and arrays a user brings ------------------------------------------------------

@functools.lru_cache(maxsize=4)
def file_dataset(reference: str) -> ImageDataset:
    """The data set behind an ``images:…`` or ``arrays:…`` reference (see :mod:`probe_core.data.files`).

    A given train/test split is used as is; otherwise a stratified split with seed
    :data:`SPLIT_SEED`, as the description says. Kept for the process, as its arrays are
    (:func:`~probe_core.data.files.load_file_arrays`) and as the built-in data sets are: a command or a page
    rerun resolves the same data many times. Raises :class:`DataError` for bad files.
    """
    arrays = load_file_arrays(reference)
    scheme, path, _ = parse_reference(reference)
    images = arrays["x"].transpose(0, 3, 1, 2)  # (N, C, H, W)
    labels, split = arrays["y"], arrays["split"]
    what = "image folder" if scheme == "images" else "arrays"
    if (split == 2).all():
        train_x, train_y, test_x, test_y = stratified_split(images, labels)
        how = "stratified" if split_is_stratified(labels) else "not stratified: too few images per class"
        source = f"{what} {path}: split {len(train_y)} train / {len(test_y)} test ({how}, seed {SPLIT_SEED})"
    else:
        train_x, train_y, test_x, test_y = images[split == 0], labels[split == 0], images[split == 1], labels[split == 1]
        source = f"{what} {path}: train ({len(train_y)}) and test ({len(test_y)}) as given"
    channels, height, width = images.shape[1:]
    source += f", {height}x{width} {'RGB' if channels == 3 else 'grey'}"
    if int(arrays["resized"]):
        source += f", {int(arrays['resized'])} images resized to {height}x{width}"
    if int(arrays["skipped"]):
        source += f", {int(arrays['skipped'])} unreadable files skipped"
    train_images, train_labels = _to_tensors(train_x, train_y, 255.0)
    test_images, test_labels = _to_tensors(test_x, test_y, 255.0)
    return ImageDataset(
        name=reference, train_images=train_images, train_labels=train_labels, test_images=test_images,
        test_labels=test_labels, class_names=tuple(str(n) for n in arrays["class_names"]), source=source,
        default_latent_dim=8 if height <= 16 else (16 if channels == 3 else 5))


# --- entries and views ----------------------------------------------------------

@dataclass(frozen=True)
class DatasetEntry:
    """A data set as the catalogue knows it before loading it, with its capabilities.

    Parameters
    ----------
    name : str
        Catalogue name (``digits``, ``mnist``, ``scenes-novel``, ...).
    description : str
    loader : callable
        ``loader(data_dir) -> ImageDataset``; ``data_dir`` is None for embedded data sets.
    needs_folder : bool
        Whether the data is read from a folder the user names.
    classifier_dataset : str, optional
        The data set whose default classifier probes this one (None: its own).
    default_generator : str, optional
        Generator reference used for ``default`` (None: the zoo VAE of this data set), e.g.
        ``scene:novel`` for a data set whose generator is a renderer.
    generator_choices : tuple of str
        Generator references offered besides the workspace's trained generators.
    zoo_generators : tuple of str
        Generator kinds (``vae``, ``gan``) trained by default for this data set.
    classifier_architecture : str, optional
        Zoo classifier class for this data (None: by image size).
    classifier_epochs : int, optional
        Training epochs for that classifier (None: by image size).
    vae_epochs : int, optional
        Training epochs of its zoo VAE (None: by image size).
    vae_beta : float
        The KL weight of its zoo VAE (1: the ELBO; another value: a β-VAE, chosen by measurement).
    sized_defaults : bool
        Whether its defaults are chosen from the data's size, channels and classes (a user's folder or
        ``.npz``): training epochs, the real-size model recipe and generators, and the sampler's iterations.
        The built-in sets carry their own, measured on them.
    """

    name: str
    description: str
    loader: Callable[[Path | None], ImageDataset]
    needs_folder: bool = False
    classifier_dataset: str | None = None
    default_generator: str | None = None
    generator_choices: tuple[str, ...] = ()
    zoo_generators: tuple[str, ...] = ("vae", "gan")
    classifier_architecture: str | None = None
    classifier_epochs: int | None = None
    vae_epochs: int | None = None
    vae_beta: float = 1.0
    sized_defaults: bool = False


def _idx_loader(name: str, class_names: Sequence[str] | None, latent_dim: int) -> Callable[[Path | None], ImageDataset]:
    def load(data_dir: Path | None) -> ImageDataset:
        folder = resolve_data_folder(name, data_dir)
        return _load_idx_folder(str(folder.resolve()), name, tuple(class_names) if class_names else None, latent_dim)

    return load


BUILTIN_DATASETS: tuple[DatasetEntry, ...] = (
    DatasetEntry("digits", "scikit-learn's embedded 8x8 handwritten digits (default, offline)",
                 lambda _dir: load_digits_dataset()),
    DatasetEntry("mnist", "MNIST 28x28 digits from IDX files in a folder you name",
                 _idx_loader("mnist", None, 5), needs_folder=True),
    DatasetEntry("fashion-mnist", "Fashion-MNIST 28x28 clothing from IDX files in a folder you name",
                 _idx_loader("fashion-mnist", FASHION_MNIST_CLASSES, 5), needs_folder=True),
    DatasetEntry("idx", "any IDX image/label set in a folder (class names from classes.txt if present)",
                 _idx_loader("idx", None, 8), needs_folder=True),
)

DEFAULT_DATASET = "digits"
# The data set the dashboard opens on (`probe ui --dataset`); unset: the one the workspace was used on last
OPEN_DATASET_ENV = "PROBE_DATASET"


def split_view(name: str) -> tuple[str, str]:
    """``"digits[drop=5]"`` -> ``("digits", "drop=5")``; a plain name gives an empty view."""
    base, _, view = name.partition("[")
    return base, view.removesuffix("]")


def apply_view(dataset: ImageDataset, view: str) -> ImageDataset:
    """A class-subset (``keep=0,1,3``, ``drop=5``), mislabel (``mislabel=9->8:0.4``) or missing-sub-style
    (``dropdark=7:0.5``) view of a data set.

    Raises
    ------
    DataError
        For a view that is not one of those forms.
    """
    if not view:
        return dataset
    key, _, values = view.partition("=")
    if key == "mislabel" and values:
        return _parse_mislabel(dataset, values)
    if key == "dropdark" and values:
        name, _, fraction_text = values.partition(":")
        try:
            fraction = float(fraction_text)
        except ValueError:
            raise DataError(f"bad dropdark view {excerpt(values)}: write NAME[dropdark=7:0.5]") from None
        return dataset.without_dark(dataset.class_index(name), fraction)
    if key not in ("keep", "drop") or not values:
        raise DataError(f"bad view {excerpt(view)}: write NAME[keep=0,1,3], NAME[drop=5], NAME[mislabel=9->8:0.4] "
                        f"or NAME[dropdark=7:0.5]")
    classes = [dataset.class_index(v) for v in values.split(",")]
    return dataset.subset(**{key: classes})
