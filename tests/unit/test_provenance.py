"""Every hit placed against the training images, and a generator check that calls memorisation weak (issue 98)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from probe_core.catalog import load_dataset
from probe_core.data.provenance import (
    NEAR_COPY_RATIO,
    NearestTrainingImages,
    ProvenanceMeter,
    memorisation_reasons,
    summarise_provenance,
    training_index,
)
from probe_core.errors import ProbeError
from probe_core.models.checks import check_generator
from probe_core.models.loaded import LoadedModel


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits")


def test_a_training_image_is_a_near_copy_at_percentile_zero_and_a_held_out_image_is_not(digits):
    index = NearestTrainingImages().fit(digits)
    copies = index.provenance(digits.train_images[:40], digits.train_labels[:40].numpy())
    assert (copies.percentile == 0).all() and copies.near_copy.all()
    assert (copies.nearest == np.arange(40)).all()  # digits has no exact duplicates among these
    assert np.allclose(copies.distance, 0, atol=1e-3)
    held_out = index.provenance(digits.test_images, digits.test_labels.numpy())
    # the reference is the test images themselves: their median sits at about the 50th percentile, ratio 1
    assert 40 <= np.median(held_out.percentile) <= 60
    assert 0.9 <= np.median(held_out.ratio) <= 1.1
    assert held_out.near_copy.mean() < 0.1
    summary = summarise_provenance(held_out)
    assert not summary["copying"] and summary["distinct_nearest"] > 200


def test_the_nearest_image_and_distance_match_a_plain_scan(digits):
    index = NearestTrainingImages().fit(digits)
    queries = digits.test_images[:25] + 0.05 * torch.rand(25, 1, 8, 8)
    distance, nearest = index.kneighbors(queries)
    scan = torch.cdist(queries.flatten(1), digits.train_images.flatten(1))
    assert (nearest == scan.argmin(1).numpy()).all()
    assert np.allclose(distance, scan.min(1).values.numpy(), rtol=1e-3, atol=1e-3)


def test_a_target_pinned_to_few_training_images_reads_as_copying(digits):
    index = training_index(digits)
    chains = np.repeat(np.arange(8), 30)  # 240 hits, each chain on one training image, slightly blurred
    images = digits.train_images[chains] * 0.97 + 0.01
    meter = ProvenanceMeter.for_classes(index, digits.class_names)
    probs = torch.nn.functional.one_hot(digits.train_labels[chains], 10).float()
    summary = meter.measure(images, probs, chains)
    assert summary["copying"] and summary["near_copy_share"] == 1.0
    assert summary["distinct_nearest"] == 8 and summary["distinct_per_chain"] == 1.0
    reasons = memorisation_reasons(summary)
    assert any("near copies" in line for line in reasons) and any("distinct" in line for line in reasons)


def test_an_index_refuses_images_of_another_shape_and_use_before_fit(digits):
    with pytest.raises(ProbeError, match="not fitted"):
        NearestTrainingImages().kneighbors(digits.test_images[:2])
    with pytest.raises(ProbeError, match="shape"):
        training_index(digits).kneighbors(torch.zeros(2, 1, 4, 4))


class _LookupTable(nn.Module):
    """Decodes every latent to a soft choice among a table of images (no encoder): with a table of training images,
    a generator that can only return what the data set already holds."""

    def __init__(self, table: torch.Tensor, latent_dim: int = 16, sharpness: float = 8.0) -> None:
        super().__init__()
        self.latent_dim = latent_dim
        self.register_buffer("table", table.flatten(1))
        self.register_buffer("keys", torch.randn(latent_dim, len(table), generator=torch.Generator().manual_seed(0)))
        self.sharpness = sharpness
        self.shape = table.shape[1:]

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        weights = torch.softmax(self.sharpness * z @ self.keys, dim=1)
        return (weights @ self.table).reshape(len(z), *self.shape)


@pytest.fixture(scope="module")
def classifier(trained_workspace):
    return trained_workspace.registry.resolve("default", "classifier", "digits")


def test_a_lookup_table_of_training_images_is_a_weak_generator(digits, classifier):
    copier = LoadedModel("training-lookup", "built-generator", _LookupTable(digits.train_images), ())
    check = check_generator(copier, classifier, digits)
    assert check.weak
    assert check.figures["draws_near_copy_share"] > 0.5
    [reason] = [line for line in check.failed if line.startswith("it copies its training images")]
    assert "near copies" in reason
    assert check.remedy is None  # training longer does not make it generate


def test_a_lookup_table_of_held_out_images_is_not_called_a_copier(digits, classifier):
    held_out = LoadedModel("held-out-lookup", "built-generator", _LookupTable(digits.test_images), ())
    check = check_generator(held_out, classifier, digits)
    assert check.figures["draws_near_copy_share"] < NEAR_COPY_RATIO / 2
    assert 0.7 <= check.figures["draws_median_ratio"] <= 1.3
    assert not any(line.startswith("it copies") for line in check.failed), check.failed


def test_the_default_digits_generators_are_not_called_copiers(trained_workspace, digits, classifier):
    registry = trained_workspace.registry
    for kind in ("vae", "gan"):
        generator = registry.resolve(registry.default_id("digits", kind), "generator", "digits")
        check = check_generator(generator, classifier, digits)
        assert not any(line.startswith("it copies") for line in check.failed), (kind, check.failed)
        assert check.figures["draws_near_copy_share"] < 0.2
