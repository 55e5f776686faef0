"""Reading Bayes-TrEx runs back: their kept samples, the labels people gave them and verdicts on test images
(the pages, the CLI and the API)."""

from __future__ import annotations

import numpy as np
import torch

from probe_core.data.provenance import ProvenanceMeter, training_index
from probe_core.store import SampleRecord, TestImageLabelRecord
from probe_core.store.labels import HUMAN
from probe_core.team.accounts import Actor, Permission, local_owner, require


def samples(store, run_id: int, limit: int | None = None) -> list[SampleRecord]:
    """A run's kept samples in the order they were stored (``limit``: the first that many)."""
    return store.get_samples(run_id, limit=limit)


def label_sample(store, annotator: str, sample_id: int, label: str, *, actor: Actor | None = None) -> int:
    """Write ``annotator``'s label of a sample now (replacing their earlier one); returns the label's row id.
    ``actor`` (default the local owner) must be allowed to label (PermissionDenied otherwise)."""
    require(actor or local_owner(), Permission.LABEL)
    return store.set_label(annotator, sample_id=sample_id, label=label, source=HUMAN)


def sample_label(store, sample_id: int, annotator: str | None) -> str | None:
    """``annotator``'s current label of a sample; None when they have not labelled it."""
    mine = [entry["label"] for entry in store.get_labels(sample_id=sample_id, source=HUMAN)
            if entry["annotator"] == annotator]
    return mine[-1] if mine else None


def test_image_verdicts(store, dataset: str) -> dict[int, list[TestImageLabelRecord]]:
    """Verdicts on a data set's test images (mislabel or misclassification): test index -> verdicts, oldest first."""
    verdicts: dict[int, list[TestImageLabelRecord]] = {}
    for verdict in store.get_test_image_labels(dataset):
        verdicts.setdefault(verdict["test_index"], []).append(verdict)
    return verdicts


def nearest_training_images(dataset, stored: list[SampleRecord], class_names) -> dict:
    """Each stored sample beside its nearest training image, as generative models' memorisation checks show them.

    Parameters
    ----------
    dataset : ImageDataset
        The run's data set (its training images are the index, :func:`~probe_core.data.provenance.training_index`).
    stored : list of SampleRecord
        Samples with ``image`` (C, H, W) and ``confidences`` (K,).
    class_names : sequence of str
        The classifier's K names (each sample is compared as the class it gives most probability).

    Returns
    -------
    dict
        ``images`` (S, C, H, W) the nearest training images, ``labels`` (S,) their class names and ``provenance``
        (:class:`~probe_core.data.provenance.Provenance`: index, distance, percentile, near copy).
    """
    images = torch.from_numpy(np.stack([sample["image"] for sample in stored]))
    probs = torch.from_numpy(np.stack([sample["confidences"] for sample in stored]))
    placed = ProvenanceMeter.for_classes(training_index(dataset), class_names).place(images, probs)
    return {"images": dataset.train_images[placed.nearest],
            "labels": [dataset.class_names[int(label)] for label in dataset.train_labels[placed.nearest]],
            "provenance": placed}
