"""A generator smaller than the data, seen at the data's size through a differentiable resize (issue 68)."""

from __future__ import annotations

import torch

from probe_core.catalog import load_dataset
from probe_core.models import ModelSpec
from probe_core.models.autoencoder import DensityAutoencoder
from probe_core.models.recipes import REAL_SIZE_GENERATOR_SIDE, real_size_recipe
from probe_core.models.resized import ResizedEncodingGenerator, ResizedGenerator, seen_at
from probe_core.sampling.protocols import ClassConditionalPrior, generator_capabilities


def test_the_resize_passes_gradients_and_keeps_what_the_generator_declares():
    small = DensityAutoencoder((3, 32, 32), 6, ("a", "b")).eval()
    served = seen_at(small, (3, 64, 64))
    assert isinstance(served, ResizedEncodingGenerator) and seen_at(small, (3, 32, 32)) is small
    capabilities = generator_capabilities(served)
    assert capabilities.structured_prior and capabilities.encoder and capabilities.sampler == "hmc"
    assert isinstance(served, ClassConditionalPrior) and served.class_names == ("a", "b")
    # the noise its whitened codes ask Defuse for (the papers' Beta(75, 75) would move every code off its prior)
    assert capabilities.perturbation_noise == generator_capabilities(small).perturbation_noise
    assert capabilities.perturbation_noise["noise"] == "centered"
    z = torch.randn(4, 6, requires_grad=True)
    images = served.decode(z)
    assert images.shape == (4, 3, 64, 64) and 0 <= float(images.detach().min()) <= float(images.detach().max()) <= 1
    (gradient,) = torch.autograd.grad(images.mean(), z)
    assert torch.isfinite(gradient).all() and gradient.abs().sum() > 0
    with torch.no_grad():  # the data's images are resized to the generator's size before it encodes them
        mean, _ = served.encode(torch.rand(4, 3, 64, 64))
    assert mean.shape == (4, 6)
    plain = seen_at(torch.nn.Module(), (3, 64, 64))  # no image_shape: left as it is, checked where it is used
    assert not isinstance(plain, ResizedGenerator)


def test_the_recipe_trains_generators_of_large_images_at_64_and_the_registry_serves_them_at_the_data_size(workspace):
    for kind in ("vae", "rae"):
        assert real_size_recipe(kind, (3, 128, 128), 43, 3870)["image_size"] == REAL_SIZE_GENERATOR_SIDE
        assert "image_size" not in real_size_recipe(kind, (3, 64, 64), 43, 3870)
    assert "image_size" not in real_size_recipe("classifier", (3, 128, 128), 43, 3870)
    spec = ModelSpec(dataset="digits", kind="rae", epochs=1, image_size=16)
    assert "trained at 16x16" in spec.resolved(load_dataset("digits")).describe_recipe()
    trained = workspace.registry.get_or_train(spec)
    assert trained.module.image_shape == (1, 16, 16)
    served = workspace.registry.resolve(trained.id, "generator", "digits")
    assert isinstance(served.module, ResizedEncodingGenerator) and served.capabilities.encoder
    assert served.module.decode(torch.zeros(2, served.module.latent_dim)).shape == (2, 1, 8, 8)


def test_a_resized_generator_is_judged_as_sharp_as_its_own_size_can_show_the_data():
    from probe_core.data.datasets import resize_images
    from probe_core.models.checks import _sharpness, sharpness_reference

    real = torch.rand(6, 3, 64, 64)  # noise: as sharp as images get
    small = DensityAutoencoder((3, 32, 32), 6, ("a", "b")).eval()
    assert sharpness_reference(small, real) is real  # a generator at the data's size: the images themselves
    reference = sharpness_reference(seen_at(small, (3, 64, 64)), real)
    assert reference.shape == real.shape
    assert torch.allclose(reference, resize_images(resize_images(real, 32, 32), 64, 64))
    assert _sharpness(reference) < 0.7 * _sharpness(real)  # a 32x32 generator cannot draw 64x64 noise
