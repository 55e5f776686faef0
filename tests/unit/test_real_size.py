"""Real-size data: the recipe chosen from the data's size, channels and classes; the stand-in data sets."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from helpers import recording

from probe_core.data import ImageDataset
from probe_core.data.synthetic import SIGN_CLASSES, SVHN_CLASSES, signs_like, svhn_like
from probe_core.errors import ModelNotFoundError, ProbeError
from probe_core.models.architectures import VAE, ResNetClassifier
from probe_core.models.recipes import (
    REAL_SIZE_EPOCHS,
    REAL_SIZE_FEATURE_STEPS,
    REAL_SIZE_MIN_VAE_STEPS,
    REAL_SIZE_PERCEPTUAL,
    REAL_SIZE_SPATIAL_LATENT,
    REAL_SIZE_SPATIAL_MIN_STEPS,
    REAL_SIZE_STEPS,
    REAL_SIZE_VAE_LATENT,
    real_size_recipe,
)
from probe_core.models.spec import ModelSpec
from probe_core.models.training import (
    PERCEPTUAL_NETWORKS,
    PERCEPTUAL_PIXEL_WEIGHT,
    augment_batch,
    perceptual_network,
    perceptual_pixel_weight,
    perceptual_vae_loss,
    train_vae,
)


@pytest.mark.parametrize("shape, classes, images, latent", [((3, 32, 32), 10, 8000, 10), ((3, 64, 64), 43, 3870, 15),
                                                            ((1, 32, 32), 10, 500, 10), ((3, 128, 128), 43, 100, 15)])
def test_real_size_images_get_a_resnet_with_augmentation_and_a_perceptual_vae(shape, classes, images, latent):
    classifier = real_size_recipe("classifier", shape, classes, images)
    assert classifier["architecture"] == "ResNetClassifier" and classifier["augment"]
    assert REAL_SIZE_EPOCHS[0] <= classifier["epochs"] <= REAL_SIZE_EPOCHS[1]
    vae = real_size_recipe("vae", shape, classes, images)
    assert vae["architecture"] == "VAE" and vae["kl_warmup"] == vae["epochs"] // 2
    assert vae["latent_dim"] == REAL_SIZE_VAE_LATENT and vae["perceptual"] == REAL_SIZE_PERCEPTUAL
    assert real_size_recipe("gan", shape, classes, images)["latent_dim"] == latent


@pytest.mark.parametrize("shape, images, spatial", [((3, 32, 32), 3870, True), ((1, 48, 48), 3870, False),
                                                    ((3, 64, 64), 3870, True), ((3, 128, 128), 3870, True),
                                                    ((3, 32, 64), 3870, True), ((1, 40, 40), 3870, False),
                                                    ((3, 32, 32), 2 * REAL_SIZE_SPATIAL_LATENT - 1, False),
                                                    ((3, 64, 64), 2 * REAL_SIZE_SPATIAL_LATENT - 1, False),
                                                    ((3, 32, 32), 2 * REAL_SIZE_SPATIAL_LATENT + 10, False)])
def test_the_autoencoder_keeps_a_spatial_code_from_32x32_and_builds_with_it(shape, images, spatial):
    """At 32x32 and up (larger images are resized to 64x64 for the generator) the regularized autoencoder's code is
    8x8 maps (a flat code underfit at 64x64, and the VAE was weak beside it at 32x32: docs/real-size.md) where the
    images halve to 8x8 maps (not 48x48 or 40x40) and there are twice as many images as code dimensions for its
    flow prior, a tenth held out; the recipe's latent builds the architecture."""
    from probe_core.models.autoencoder import AUTOENCODER_ARCHITECTURES

    recipe = real_size_recipe("rae", shape, 43, images)
    # a flow prior over the codes wherever there are codes enough for it (issue 99: the kernel density copied)
    assert recipe["architecture"] == ("SpatialFlowAutoencoder" if spatial else "FlowAutoencoder")
    assert recipe["latent_dim"] == (REAL_SIZE_SPATIAL_LATENT if spatial else REAL_SIZE_VAE_LATENT)
    assert recipe["perceptual"] == REAL_SIZE_PERCEPTUAL and recipe["augment"]
    steps = recipe["epochs"] * math.ceil(images / 64)  # the recipe's batches of 64
    if spatial and shape[1] > 32:  # above 32x32 the spatial code trains longer: at the floor it was weak at 64x64
        assert steps >= REAL_SIZE_SPATIAL_MIN_STEPS
    if spatial and shape[1:] == (32, 32):  # at 32x32 the recipe's steps stand, as measured beside the VAE
        assert REAL_SIZE_STEPS["rae"] <= steps < REAL_SIZE_STEPS["rae"] + math.ceil(images / 64)
    side = recipe.get("image_size", shape[1])
    model = AUTOENCODER_ARCHITECTURES[recipe["architecture"]]((shape[0], side, side), recipe["latent_dim"],
                                                                [str(c) for c in range(43)]).eval()
    codes, _ = model.generator.encode(torch.rand(2, shape[0], side, side))
    assert codes.shape == (2, recipe["latent_dim"])
    assert model.generator.decode(codes).shape == (2, shape[0], side, side)


def test_the_vae_takes_its_steps_at_32x32_and_fewer_on_bigger_images_down_to_a_floor():
    steps = lambda shape, images: real_size_recipe("vae", shape, 10, images)["epochs"] * math.ceil(images / 64)
    assert REAL_SIZE_STEPS["vae"] <= steps((3, 32, 32), 8000) < REAL_SIZE_STEPS["vae"] + 125
    # 64x64 has 4x the pixels: a quarter of the steps, but not below the floor
    assert REAL_SIZE_MIN_VAE_STEPS <= steps((3, 64, 64), 3870) < REAL_SIZE_MIN_VAE_STEPS + 61
    assert steps((3, 48, 48), 8000) < steps((3, 32, 32), 8000)


def test_the_vae_feature_network_keeps_its_steps_and_the_pixel_term_its_share_on_bigger_images():
    def feature_steps(shape, images):
        recipe = real_size_recipe("vae", shape, 10, images)
        return (recipe["feature_epochs"] or recipe["epochs"] // 3) * math.ceil(images / 64)

    # at 32x32 a third of the VAE's epochs already gives the steps: the field stays unset (the models' ids stay)
    assert real_size_recipe("vae", (3, 32, 32), 10, 8000)["feature_epochs"] is None
    assert REAL_SIZE_FEATURE_STEPS <= feature_steps((3, 32, 32), 8000) < REAL_SIZE_FEATURE_STEPS + 125
    assert REAL_SIZE_FEATURE_STEPS <= feature_steps((3, 64, 64), 3870) < REAL_SIZE_FEATURE_STEPS + 61
    assert perceptual_pixel_weight((3, 32, 32)) == perceptual_pixel_weight((1, 28, 28)) == PERCEPTUAL_PIXEL_WEIGHT
    assert perceptual_pixel_weight((3, 128, 128)) < perceptual_pixel_weight((3, 64, 64)) < PERCEPTUAL_PIXEL_WEIGHT
    spec = ModelSpec(kind="vae", perceptual="trained", feature_epochs=5)
    assert "trained ResNet's features (5 epochs)" in spec.describe_recipe()
    assert spec.model_id() != ModelSpec(kind="vae", perceptual="trained").model_id()
    for wrong in ({"kind": "classifier"}, {"kind": "vae", "perceptual": "random"}, {"kind": "vae"}):
        with pytest.raises(ProbeError, match="feature_epochs"):
            ModelSpec(feature_epochs=5, **wrong)
    with pytest.raises(ProbeError, match="perceptual network's training epochs"):
        ModelSpec(kind="vae", perceptual="trained", feature_epochs=0)


def test_the_recipe_sets_the_feature_network_epochs_only_when_it_chooses_the_vae_epochs(tmp_path):
    from probe_core.catalog import load_dataset

    path = tmp_path / "signs.npz"
    rng = np.random.default_rng(0)
    np.savez(path, x=rng.integers(0, 255, (600, 64, 64, 3), dtype=np.uint8), y=np.arange(600) % 43)
    dataset = load_dataset(f"arrays:{path}")
    default = ModelSpec(dataset=f"arrays:{path}", kind="vae").resolved(dataset)
    steps_per_epoch = math.ceil(len(dataset.train_labels) / 64)
    assert default.feature_epochs * steps_per_epoch >= REAL_SIZE_FEATURE_STEPS or default.feature_epochs == 200
    # a user who names the VAE's epochs (a quick run, a notebook) gets the default third, not 2,500 steps
    quick = ModelSpec(dataset=f"arrays:{path}", kind="vae", epochs=2).resolved(dataset)
    assert quick.epochs == 2 and quick.feature_epochs is None and quick.perceptual == "trained"
    named = ModelSpec(dataset=f"arrays:{path}", kind="vae", epochs=2, perceptual="trained", feature_epochs=3)
    assert named.resolved(dataset).feature_epochs == 3


def test_more_images_get_fewer_epochs_and_small_images_keep_their_old_defaults():
    few = real_size_recipe("classifier", (3, 32, 32), 10, 1000)["epochs"]
    many = real_size_recipe("classifier", (3, 32, 32), 10, 20000)["epochs"]
    assert few > many
    assert real_size_recipe("classifier", (1, 28, 28), 10, 8000) is None
    assert real_size_recipe("vae", (1, 8, 8), 10, 1000) is None


@pytest.mark.parametrize("shape", [(3, 32, 32), (3, 64, 64), (1, 32, 32), (3, 128, 128)])
def test_the_resnet_costs_about_the_same_per_image_at_every_size(shape):
    model = ResNetClassifier(shape, 43).eval()
    with torch.no_grad():
        assert model(torch.rand(2, *shape)).shape == (2, 43)
        assert model.features(torch.rand(2, *shape)).shape == (2, 64)
    # the stem's stride keeps the residual stages at 32x32 or below
    stem = model.body[0]
    assert shape[1] // stem.stride[0] <= 32


def test_augmentation_keeps_shape_range_and_content_roughly():
    generator = torch.Generator().manual_seed(0)
    images = torch.rand(16, 3, 32, 32)
    augmented = augment_batch(images, generator)
    assert augmented.shape == images.shape and augmented.min() >= 0 and augmented.max() <= 1
    assert not torch.equal(augmented, images)
    grey = augment_batch(torch.rand(4, 1, 32, 32), generator)
    assert grey.shape == (4, 1, 32, 32)


def _digits(count=200):
    rng = np.random.default_rng(0)
    images = np.zeros((count, 28, 28), np.uint8)
    images[:, 6:22, 10:18] = 255  # a bar: enough for rendering
    return images, rng.integers(0, 10, count)


def test_svhn_like_images_are_colour_32x32_with_the_centre_digits_label():
    digits, labels = _digits()
    images, targets = svhn_like(digits, labels, 30, 32, seed=0)
    assert images.shape == (30, 32, 32, 3) and images.dtype == np.uint8
    assert set(targets) <= set(range(10)) and len(SVHN_CLASSES) == 10
    assert images.reshape(30, -1, 3).std(1).mean() > 10  # cluttered, not a flat background
    again, _ = svhn_like(digits, labels, 30, 32, seed=0)
    assert np.array_equal(images, again)  # a seed gives the same set


def test_signs_like_has_43_balanced_classes_at_the_asked_size():
    digits, labels = _digits()
    images, targets = signs_like(digits, labels, 2, 64, seed=0)
    assert len(SIGN_CLASSES) == 43 == len(set(SIGN_CLASSES))
    assert images.shape == (86, 64, 64, 3) and np.bincount(targets).tolist() == [2] * 43


def test_the_real_size_vae_is_trained_with_a_perceptual_term_in_a_frozen_network_of_its_own():
    assert real_size_recipe("vae", (3, 32, 32), 10, 8000)["perceptual"] in PERCEPTUAL_NETWORKS
    digits, labels = _digits()
    images, targets = svhn_like(digits, labels, 96, 32, seed=0)
    pixels = torch.from_numpy(images).permute(0, 3, 1, 2).float() / 255
    dataset = ImageDataset("tiny-svhn", pixels[:64], torch.from_numpy(targets[:64]).long(), pixels[64:],
                           torch.from_numpy(targets[64:]).long(), SVHN_CLASSES, "test")
    features = perceptual_network(dataset, "random", seed=0)
    before = {name: value.clone() for name, value in features.state_dict().items()}
    vae = VAE(dataset.image_shape, 10)
    loss = perceptual_vae_loss(vae, pixels[:8], features.train())
    assert loss.shape == (8,) and torch.isfinite(loss).all()
    loss.mean().backward()
    assert all(parameter.grad is None for parameter in features.parameters())  # frozen: only the VAE learns
    assert any(parameter.grad is not None for parameter in vae.parameters())
    assert all(torch.equal(before[name], value) for name, value in features.state_dict().items())  # BN stats kept
    with torch.no_grad():
        assert [layer.shape[1] for layer in features(pixels[:2])] == [16, 32, 64]
    model, metrics = train_vae(dataset, latent_dim=4, epochs=1, perceptual="random")
    assert model.decode(torch.zeros(2, 4)).shape == (2, 3, 32, 32) and np.isfinite(metrics["test_elbo"])
    # a trained feature network's epochs come first, on the same bar: one progress from 0 to 1
    reports = []
    train_vae(dataset, latent_dim=4, epochs=3, perceptual="trained", reporter=recording(reports))
    assert [(r.kind, r.epoch, r.epochs) for r in reports] == [("vae", e, 4) for e in range(1, 5)]
    reports = []
    train_vae(dataset, latent_dim=4, epochs=1, perceptual="trained", feature_epochs=2, reporter=recording(reports))
    assert [(r.epoch, r.epochs) for r in reports] == [(1, 3), (2, 3), (3, 3)]
    assert reports[0].metric_name != reports[-1].metric_name == "train_elbo"
    with pytest.raises(ProbeError, match="perceptual"):
        perceptual_network(dataset, "imagenet")
    with pytest.raises(ProbeError, match="perceptual"):
        ModelSpec(kind="classifier", perceptual="random")


def test_the_real_size_vae_trains_on_augmented_batches_repeatably():
    """On 8,000 SVHN-like images a VAE trained without augmentation kept the class of 91 % of its training images'
    reconstructions and 71 % of held-out ones: the recipe augments, as the classifier's does."""
    assert real_size_recipe("vae", (3, 32, 32), 10, 8000)["augment"]
    assert ModelSpec(kind="vae", augment=True).augment
    with pytest.raises(ProbeError, match="augmentation applies to classifiers and VAEs"):
        ModelSpec(kind="gan", augment=True)
    digits, labels = _digits()
    images, targets = svhn_like(digits, labels, 48, 32, seed=0)
    pixels = torch.from_numpy(images).permute(0, 3, 1, 2).float() / 255
    dataset = ImageDataset("tiny-svhn", pixels[:32], torch.from_numpy(targets[:32]).long(), pixels[32:],
                           torch.from_numpy(targets[32:]).long(), SVHN_CLASSES, "test")
    plain, _ = train_vae(dataset, latent_dim=4, epochs=1, batch_size=16)
    augmented, _ = train_vae(dataset, latent_dim=4, epochs=1, batch_size=16, augment=True)
    again, _ = train_vae(dataset, latent_dim=4, epochs=1, batch_size=16, augment=True)
    weights = [dict(model.state_dict()) for model in (plain, augmented, again)]
    assert all(torch.equal(weights[1][name], weights[2][name]) for name in weights[1])  # seeded: the same model
    assert not all(torch.equal(weights[0][name], weights[1][name]) for name in weights[0])  # it saw other batches


def test_sampler_defaults_follow_the_image_size():
    """Real-size images take the real-size iterations; the matrix keeps its own; the page halves either."""
    from probe_core.bayestrex.request import (
        LARGE_IMAGE_MATRIX_SAMPLER_DEFAULTS,
        PAGE_SAMPLER_DEFAULTS,
        REAL_SIZE_SAMPLER_DEFAULTS,
        SAMPLER_DEFAULTS,
        page_sampler_defaults,
        sampler_defaults,
    )
    from probe_core.sampling.targets import TargetSpec

    names = tuple(str(digit) for digit in range(10))
    high = TargetSpec.parse("high:7", names)
    assert sampler_defaults(high, (3, 32, 32), sized=True) == REAL_SIZE_SAMPLER_DEFAULTS
    assert sampler_defaults(high, (3, 64, 48), sized=True) == REAL_SIZE_SAMPLER_DEFAULTS
    assert sampler_defaults(high, (1, 28, 28), sized=True) == SAMPLER_DEFAULTS
    assert sampler_defaults(high, (3, 32, 16), sized=True) == SAMPLER_DEFAULTS  # one side below real size
    assert sampler_defaults(high, (3, 32, 32)) == SAMPLER_DEFAULTS  # a built-in set (colours, scenes) keeps its own
    assert sampler_defaults(None) == SAMPLER_DEFAULTS
    assert REAL_SIZE_SAMPLER_DEFAULTS["warmup"] < SAMPLER_DEFAULTS["warmup"]
    matrix = TargetSpec.parse("ambiguous-matrix", names)
    assert sampler_defaults(matrix, (3, 32, 32), sized=True) == LARGE_IMAGE_MATRIX_SAMPLER_DEFAULTS
    assert page_sampler_defaults((1, 8, 8)) == PAGE_SAMPLER_DEFAULTS
    assert page_sampler_defaults((3, 32, 32)) == PAGE_SAMPLER_DEFAULTS
    page = page_sampler_defaults((3, 32, 32), sized=True)
    assert (page["warmup"], page["samples"]) == (REAL_SIZE_SAMPLER_DEFAULTS["warmup"] // 2,
                                                 REAL_SIZE_SAMPLER_DEFAULTS["samples"] // 2)


def test_class_kept_by_reconstructions_counts_only_the_classes_the_classifier_knows():
    from types import SimpleNamespace

    from probe_core.models.checks import _class_kept

    # a classifier of data classes 1 and 3 (outputs in that order); the data's labels include a class 0 it
    # does not know, which neither accuracy counts
    classifier = SimpleNamespace(class_match=SimpleNamespace(covered=(1, 3)))
    labels = np.array([1, 3, 3, 0, 1])
    real = torch.tensor([[0.9, 0.1], [0.2, 0.8], [0.3, 0.7], [0.5, 0.5], [0.6, 0.4]])
    reconstructed = torch.tensor([[0.9, 0.1], [0.7, 0.3], [0.3, 0.7], [0.1, 0.9], [0.1, 0.9]])
    figures = _class_kept(classifier, real, reconstructed, labels)
    assert figures == {"reconstruction_accuracy": 0.5, "real_accuracy": 1.0, "reconstruction_class_ratio": 0.5}
    assert _class_kept(classifier, real[3:4], reconstructed[3:4], labels[3:4]) == {}


def test_a_generators_feature_network_is_a_stored_classifier_that_later_generators_and_judges_reuse(tmp_path):
    """The feature network a real-size generator trains first is stored as a classifier of its own (another seed
    than the data's default classifier), so it serves as a judge at no cost; the generator's weights are those it
    had when it trained its own, and a second generator with the same feature network does not train it again."""
    from probe_core.catalog import load_dataset
    from probe_core.models.recipes import train_spec
    from probe_core.runs.workspace import Workspace

    path = tmp_path / "colour.npz"
    rng = np.random.default_rng(0)
    np.savez(path, x=rng.integers(0, 255, (300, 32, 32, 3), dtype=np.uint8), y=np.arange(300) % 10)
    registry = Workspace(tmp_path / "ws").registry
    trained = []
    registry.on_training = lambda spec, model_id: trained.append(model_id)
    data = f"arrays:{path}"
    spec = ModelSpec(dataset=data, kind="rae", epochs=3).resolved(load_dataset(data))
    feature = spec.feature_network_spec()
    assert feature.kind == "classifier" and feature.seed != spec.seed and feature.epochs == 1
    generator = registry.get_or_train(spec)
    assert trained == [generator.id, feature.model_id()]
    assert generator.record["spec"]["feature_network"] == feature.model_id()
    assert f"kept as the classifier {feature.model_id()}" in spec.describe_recipe()  # said when training starts
    judge = registry.load(feature.model_id())
    assert judge.kind == "classifier" and 0.0 <= judge.metrics["test_accuracy"] <= 1.0
    # the generator's training time is what it cost from scratch, its feature network's included
    assert generator.metrics["feature_network_seconds"] == judge.metrics["train_seconds"]
    assert generator.metrics["train_seconds"] > judge.metrics["train_seconds"]
    own, _, _ = train_spec(spec, load_dataset(data))  # the generator training a feature network it keeps to itself
    assert all(torch.equal(a, b) for a, b in zip(own.state_dict().values(), generator.module.state_dict().values()))
    vae = ModelSpec(dataset=data, kind="vae", epochs=3, perceptual="trained").resolved(load_dataset(data))
    assert vae.feature_network_spec() == feature
    registry.get_or_train(vae)
    assert trained[2:] == [vae.model_id()]
    # `features:GENERATOR` names it wherever a classifier is (a judge), resolved to its stored id
    assert registry.resolve(f"features:{generator.id}", "classifier", data).id == feature.model_id()
    plain = registry.get_or_train(ModelSpec(dataset=data, kind="vae", epochs=1, perceptual="random"))
    with pytest.raises(ModelNotFoundError, match="keeps no feature network"):
        registry.resolve(f"features:{plain.id}", "classifier", data)
    # a generator trained smaller than the data, or one without a trained feature network, keeps none
    assert ModelSpec(dataset=data, kind="rae", epochs=3, image_size=16).resolved(
        load_dataset(data)).feature_network_spec() is None
    assert ModelSpec(dataset=data, kind="vae", epochs=3, perceptual="random").feature_network_spec() is None
