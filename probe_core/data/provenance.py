"""Where a generated image comes from: its nearest training image, measured against real test images.

Bayes-TrEx and Defuse both promise images the data set does not already hold. A generator that returns
(blurred) copies of its training images hits every target and fools every figure measured through a
classifier, so each generated image is placed against the training set the same way a real held-out image is:

- :class:`NearestTrainingImages` is an index over a data set's training images (ℓ2 in pixel space, or in a
  feature network's space). Fitting it also measures each of up to :data:`REFERENCE_IMAGES` test images'
  distance to its nearest training image: the reference a generated image is compared with, per class.
- :meth:`NearestTrainingImages.provenance` gives, per image, the nearest training image, that distance, its
  percentile among the test images' nearest-training distances (of the image's class) and its ratio to their
  median. An image nearer than :data:`NEAR_COPY_RATIO` of that median is a **near copy**: real test images
  rarely are (the digits data: 2 % of them).
- :func:`summarise_provenance` turns a set of images (a target's hits, a generator's draws) into the figures a
  person reads, and :func:`memorisation_reasons` says in words why they look copied
  (:data:`MEMORISATION_LIMITS`).

The index is kept per data set in this process (:func:`training_index`), so a run, its page and its report fit
it once.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import torch

from probe_core.errors import ProbeError

# Test images whose nearest-training distances are the reference (a seeded subset of larger test sets).
REFERENCE_IMAGES = 2000
# A class needs this many reference test images for a reference of its own; fewer: all classes' reference.
MIN_CLASS_REFERENCE = 10
# A generated image nearer its nearest training image than this share of the test images' median distance is a
# near copy of that training image.
NEAR_COPY_RATIO = 0.5
# Below this percentile of the test images' nearest-training distances (nearer than 95 % of test images).
COPY_PERCENTILE = 5.0
MEMORISATION_LIMITS = {
    # The most near copies among a set of generated images before the set is said to copy its training images.
    "near_copy_share": 0.5,
    # The fewest distinct nearest training images per generated image (1 in 20): fewer, and many images share
    # a few training images (one per chain, when each chain is pinned to the training image it starts on).
    "distinct_share": 1 / 20,
}
# The index is built in chunks of this many images (a chunk's distances to all training images are in memory).
QUERY_CHUNK = 512


def _flat(images: torch.Tensor) -> torch.Tensor:
    return images.reshape(len(images), -1).float()


@dataclass(frozen=True)
class Provenance:
    """Per image: where it sits against the training set.

    Attributes
    ----------
    nearest : np.ndarray
        Shape (B,): the nearest training image's index in the data set's training split.
    distance : np.ndarray
        Shape (B,): the ℓ2 distance to it (pixel values in [0, 1], or feature units).
    percentile : np.ndarray
        Shape (B,): the share of the reference test images (of the image's class) whose nearest training image is
        nearer, in percent: 0 for a copy of a training image, about 50 for a typical held-out image.
    ratio : np.ndarray
        Shape (B,): ``distance`` over the reference test images' median distance (of the image's class).
    near_copy : np.ndarray
        Shape (B,), bool: ``ratio`` below :data:`NEAR_COPY_RATIO`.
    """

    nearest: np.ndarray
    distance: np.ndarray
    percentile: np.ndarray
    ratio: np.ndarray
    near_copy: np.ndarray

    def __len__(self) -> int:
        return len(self.nearest)

    def rows(self) -> list[dict]:
        """One JSON-ready record per image."""
        return [{"nearest_train": int(n), "train_distance": round(float(d), 5), "train_percentile": round(float(p), 1),
                 "train_ratio": round(float(r), 3), "near_copy": bool(c)}
                for n, d, p, r, c in zip(self.nearest, self.distance, self.percentile, self.ratio, self.near_copy)]


class NearestTrainingImages:
    """An index over a data set's training images, with the test images' nearest-training distances as reference.

    Follows scikit-learn: ``__init__`` stores the settings, :meth:`fit` measures, the fitted attributes end in
    ``_``.

    Parameters
    ----------
    features : callable, optional
        Images (B, C, H, W) -> features (B, F) in which distances are measured (a feature network's penultimate
        layer); default: the pixels themselves.
    reference_images : int
        Test images measured for the reference, at most (a seeded subset of larger test sets).
    seed : int
        Chooses that subset.

    Attributes
    ----------
    train_ : torch.Tensor
        Shape (N, F): the training images, flattened (or their features).
    train_labels_ : np.ndarray
        Shape (N,).
    reference_distance_ : np.ndarray
        Shape (M,): each reference test image's distance to its nearest training image.
    reference_labels_ : np.ndarray
        Shape (M,): their class indices.
    class_reference_ : list of np.ndarray
        Per class (K,), the sorted reference distances that class's images are compared with (its own, or all
        classes' where it has fewer than :data:`MIN_CLASS_REFERENCE`).
    class_names_ : tuple of str
    """

    def __init__(self, features=None, reference_images: int = REFERENCE_IMAGES, seed: int = 0) -> None:
        self.features = features
        self.reference_images = reference_images
        self.seed = seed

    def _embed(self, images: torch.Tensor) -> torch.Tensor:
        if self.features is None:
            return _flat(images)
        with torch.no_grad():
            return torch.cat([_flat(self.features(images[s:s + QUERY_CHUNK]).cpu())
                              for s in range(0, len(images), QUERY_CHUNK)])

    def fit(self, dataset) -> "NearestTrainingImages":
        """Index ``dataset``'s training images and measure its test images against them.

        Parameters
        ----------
        dataset : ImageDataset
            Training images (N, C, H, W) with labels (N,); test images (M, C, H, W) with labels (M,).

        Returns
        -------
        NearestTrainingImages
            self.
        """
        if len(dataset.train_images) == 0 or len(dataset.test_images) == 0:
            raise ProbeError(f"{dataset.name} needs training and test images to place generated images against")
        self.train_ = self._embed(dataset.train_images)
        self._train_sq = (self.train_ ** 2).sum(1)
        self.train_labels_ = dataset.train_labels.numpy()
        self.class_names_ = tuple(dataset.class_names)
        test_count = len(dataset.test_images)
        chosen = (np.arange(test_count) if test_count <= self.reference_images else
                  np.sort(np.random.default_rng(self.seed).choice(test_count, self.reference_images, replace=False)))
        distance, _ = self._nearest(self._embed(dataset.test_images[chosen]))
        self.reference_distance_ = distance
        self.reference_labels_ = dataset.test_labels.numpy()[chosen]
        everything = np.sort(distance)
        self.class_reference_ = []
        for cls in range(len(self.class_names_)):
            own = np.sort(distance[self.reference_labels_ == cls])
            self.class_reference_.append(own if len(own) >= MIN_CLASS_REFERENCE else everything)
        self._all_reference = everything
        return self

    def _require_fitted(self) -> None:
        if not hasattr(self, "train_"):
            raise ProbeError("the training-image index is not fitted: call fit(dataset) first")

    def _nearest(self, embedded: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        distances, indices = [], []
        for start in range(0, len(embedded), QUERY_CHUNK):
            chunk = embedded[start:start + QUERY_CHUNK]
            squared = (chunk ** 2).sum(1, keepdim=True) + self._train_sq[None] - 2 * chunk @ self.train_.T
            best = squared.min(1)
            distances.append(best.values.clamp_min(0).sqrt())
            indices.append(best.indices)
        return torch.cat(distances).numpy(), torch.cat(indices).numpy()

    def kneighbors(self, images: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        """The nearest training image of each image.

        Parameters
        ----------
        images : torch.Tensor
            Shape (B, C, H, W), the data set's image shape.

        Returns
        -------
        distance, index : np.ndarray
            Shape (B,) each.
        """
        self._require_fitted()
        if len(images) == 0:
            return np.zeros(0, dtype=np.float32), np.zeros(0, dtype=np.int64)
        embedded = self._embed(torch.as_tensor(images))
        if embedded.shape[1] != self.train_.shape[1]:
            raise ProbeError(f"images of shape {tuple(images.shape[1:])} cannot be placed against training images of "
                             f"another shape")
        return self._nearest(embedded)

    def provenance(self, images: torch.Tensor, classes=None) -> Provenance:
        """Each image's nearest training image, and that distance against the test images' of its class.

        Parameters
        ----------
        images : torch.Tensor
            Shape (B, C, H, W).
        classes : array-like of int, optional
            Shape (B,): the data set's class each image is compared as (a hit's target class; -1 or None: all
            classes' reference).

        Returns
        -------
        Provenance
        """
        distance, nearest = self.kneighbors(images)
        classes = np.full(len(distance), -1) if classes is None else np.asarray(classes, dtype=np.int64)
        percentile = np.zeros(len(distance))
        median = np.zeros(len(distance))
        for cls in np.unique(classes):
            rows = classes == cls
            reference = self.class_reference_[cls] if 0 <= cls < len(self.class_reference_) else self._all_reference
            percentile[rows] = 100.0 * np.searchsorted(reference, distance[rows], side="left") / len(reference)
            median[rows] = np.median(reference)
        ratio = distance / np.maximum(median, 1e-12)
        return Provenance(nearest, distance, percentile, ratio, ratio < NEAR_COPY_RATIO)


_INDEXES: "OrderedDict[tuple, NearestTrainingImages]" = OrderedDict()
_KEPT_INDEXES = 4


def training_index(dataset, features=None, feature_key: str | None = None) -> NearestTrainingImages:
    """The fitted :class:`NearestTrainingImages` of ``dataset``, fitted once per data set in this process.

    ``features`` with ``feature_key`` (the feature network's id) index in that network's feature space.
    """
    key = (dataset.name, tuple(dataset.train_images.shape), dataset.train_images.data_ptr(),
           tuple(dataset.test_images.shape), feature_key)
    if key not in _INDEXES:
        _INDEXES[key] = NearestTrainingImages(features).fit(dataset)
        while len(_INDEXES) > _KEPT_INDEXES:
            _INDEXES.popitem(last=False)
    _INDEXES.move_to_end(key)
    return _INDEXES[key]


def summarise_provenance(provenance: Provenance, chains=None) -> dict:
    """The figures a person reads about a set of generated images (a target's hits, a generator's draws).

    Parameters
    ----------
    provenance : Provenance
        Of B images.
    chains : array-like of int, optional
        Shape (B,): the chain each image came from, for ``distinct_per_chain``.

    Returns
    -------
    dict
        ``measured`` (B), ``median_ratio`` (the images' median distance to their nearest training image over the
        test images'), ``near_copy_share`` (nearer than :data:`NEAR_COPY_RATIO` of that median),
        ``copy_percentile_share`` (nearer than 95 % of test images), ``median_percentile``, ``distinct_nearest``
        (distinct nearest training images), with ``chains`` also ``chains_measured`` and ``distinct_per_chain``
        (the mean over chains of their distinct nearest training images), and ``copying`` (the set looks copied:
        :func:`memorisation_reasons`). Empty figures (None) without images.
    """
    count = len(provenance)
    summary = {"measured": count, "median_ratio": None, "near_copy_share": None, "copy_percentile_share": None,
               "median_percentile": None, "distinct_nearest": 0, "copying": False}
    if not count:
        return summary
    summary.update(median_ratio=round(float(np.median(provenance.ratio)), 3),
                   near_copy_share=round(float(provenance.near_copy.mean()), 3),
                   copy_percentile_share=round(float((provenance.percentile < COPY_PERCENTILE).mean()), 3),
                   median_percentile=round(float(np.median(provenance.percentile)), 1),
                   distinct_nearest=int(len(np.unique(provenance.nearest))))
    if chains is not None:
        chains = np.asarray(chains)
        per_chain = [len(np.unique(provenance.nearest[chains == chain])) for chain in np.unique(chains)]
        summary.update(chains_measured=len(per_chain), distinct_per_chain=round(float(np.mean(per_chain)), 2))
    summary["copying"] = bool(memorisation_reasons(summary))
    return summary


def memorisation_reasons(summary: dict) -> list[str]:
    """Why a set of generated images looks copied from the training set, in words; empty when it does not.

    ``summary``: :func:`summarise_provenance`'s figures. A majority of near copies, or fewer distinct nearest
    training images than :data:`MEMORISATION_LIMITS` ``distinct_share`` of the images (with at least 20 images).
    """
    count = summary.get("measured") or 0
    if not count:
        return []
    reasons = []
    if summary["near_copy_share"] > MEMORISATION_LIMITS["near_copy_share"]:
        reasons.append(f"{summary['near_copy_share']:.0%} are near copies of a training image (nearer it than "
                       f"half a real test image's distance to its nearest training image; median distance "
                       f"{summary['median_ratio']:.2f}x a test image's)")
    few = count * MEMORISATION_LIMITS["distinct_share"]
    if count >= 20 and summary["distinct_nearest"] < few:
        reasons.append(f"they have only {summary['distinct_nearest']} distinct nearest training images among them "
                       f"(fewer than 1 in {round(1 / MEMORISATION_LIMITS['distinct_share'])})")
    return reasons


@dataclass(frozen=True)
class ProvenanceMeter:
    """Measures a target's hits against a data set's training images, in the classifier's class order.

    Attributes
    ----------
    index : NearestTrainingImages
        Fitted on the data set.
    data_class_of_output : tuple of int
        Per classifier output (K,), the data set's class index of that name (-1 where the data set has none).
    """

    index: NearestTrainingImages
    data_class_of_output: tuple

    @classmethod
    def for_classes(cls, index: NearestTrainingImages, class_names) -> "ProvenanceMeter":
        """A meter for a classifier with these output names, matched to the data set's by name."""
        own = {name: position for position, name in enumerate(index.class_names_)}
        return cls(index, tuple(own.get(name, -1) for name in class_names))

    def place(self, images, probabilities) -> Provenance:
        """:meth:`NearestTrainingImages.provenance` of images (B, C, H, W), each compared as the class the classifier
        gives it most probability (``probabilities`` (B, K))."""
        images = torch.as_tensor(images)
        if len(images) == 0:
            return self.index.provenance(images[:0])
        predicted = torch.as_tensor(probabilities).argmax(1).numpy()
        return self.index.provenance(images, np.asarray(self.data_class_of_output)[predicted])

    def measure(self, images, probabilities, chains=None) -> dict:
        """:func:`summarise_provenance` of :meth:`place`; ``chains`` (B,) the chain of each image."""
        return summarise_provenance(self.place(images, probabilities), chains)
