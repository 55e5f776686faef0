"""A generator trained at a smaller size than the data, seen at the data's size (issue 68).

The Defuse authors probed their 128x128 German-signs classifier through a 64x64 autoencoder. On 2 CPU cores a
generator's cost grows with its pixels, so the real-size recipe trains generators of images above
:data:`~probe_core.models.recipes.REAL_SIZE_GENERATOR_SIDE` on a resized copy of the data
(:meth:`~probe_core.data.datasets.ImageDataset.resized`), and :class:`ResizedGenerator` puts a differentiable
resize between it and the classifier, so HMC's gradients flow through it.
"""

from __future__ import annotations

import torch
from torch import nn

from probe_core.data.datasets import resize_images
from probe_core.errors import ProbeError

# What the wrapper forwards to the generator it wraps, where that one has it: the protocols' methods
# (probe_core.sampling.protocols) and what describes a generator. Anything else is the wrapper's own.
FORWARDED = ("prior_distribution", "sample_prior", "proposal", "describe", "sample_for_targets",
             "density", "class_names", "differentiable", "perturbation_noise")


class ResizedGenerator(nn.Module):
    """A generator's images resized to ``image_shape``, and images resized to its size before it encodes them.

    It declares what the wrapped generator declares (its prior, its encoder, whether it is differentiable), so
    the samplers and Defuse treat it as they would the generator.

    Parameters
    ----------
    generator : nn.Module
        ``latent_dim``, ``image_shape`` (C, h, w) and ``decode(z)``: (B, D) -> (B, C, h, w).
    image_shape : tuple of int
        (C, H, W) of the data: what :meth:`decode` returns.
    """

    def __init__(self, generator: nn.Module, image_shape: tuple[int, int, int]) -> None:
        super().__init__()
        own = tuple(int(v) for v in generator.image_shape)
        wanted = tuple(int(v) for v in image_shape)
        if own[0] != wanted[0]:
            raise ProbeError(f"a generator of {own[0]}-channel images cannot be resized to {wanted[0]}-channel data")
        self.generator = generator
        self.latent_dim = int(generator.latent_dim)
        self.image_shape = wanted
        self.generator_shape = own

    def __getattr__(self, name: str):
        if name in FORWARDED:
            return getattr(self._modules["generator"], name)
        return super().__getattr__(name)

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        """Images (B, C, H, W) of the data's size for latents (B, D)."""
        return resize_images(self.generator.decode(z), *self.image_shape[1:])



class ResizedEncodingGenerator(ResizedGenerator):
    """A :class:`ResizedGenerator` of a generator with an encoder: images are resized to its size first."""

    def encode(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean, log-variance), each (B, D), of images (B, C, H, W) of the data's size."""
        return self.generator.encode(resize_images(images, *self.generator_shape[1:]))


def seen_at(generator: nn.Module, image_shape: tuple[int, int, int]) -> nn.Module:
    """``generator`` as it serves data of ``image_shape``: itself when its images are that size, else resized.

    A generator without ``image_shape`` (a plugin's, a model file's) is returned as it is: its size is checked
    where it is used.
    """
    own = getattr(generator, "image_shape", None)
    if own is None or tuple(int(v) for v in own) == tuple(int(v) for v in image_shape):
        return generator
    wrapper = ResizedEncodingGenerator if callable(getattr(generator, "encode", None)) else ResizedGenerator
    return wrapper(generator, image_shape)
