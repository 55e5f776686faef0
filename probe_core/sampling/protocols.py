"""The contracts between models and algorithms, written down once (as BlackJAX's ``base.py`` does).

A generator is anything with ``latent_dim`` and ``decode``; what else it can do is declared by
the protocols it satisfies, never found out by its name:

- :class:`Generator`: ``latent_dim: int`` and ``decode(z) -> images``; every sampler needs it.
- :class:`Encoder`: ``encode(images) -> (mean, log_variance)``; Defuse needs it to perturb codes.
- :class:`StructuredPrior`: a generator whose latents are not N(0, I) (the scene world's scene
  vectors): its own Pyro prior, prior draws, a random-walk proposal and a text description.
- :class:`ClassConditionalPrior`: a prior with one component per class, so chains can start where their
  target's classes live.
- ``differentiable`` (a class attribute, default True): False for renderers without gradients,
  which are sampled with random-walk Metropolis instead of HMC.

:func:`generator_capabilities` checks the contracts once, where a model is loaded; algorithms
then test ``isinstance(generator, Encoder)`` and friends, or read the capabilities.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol, runtime_checkable

import torch

from probe_core.errors import ProbeError


@runtime_checkable
class Generator(Protocol):
    """Latent codes (B, D) to images (B, C, H, W) in [0, 1]."""

    latent_dim: int

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        ...


@runtime_checkable
class Encoder(Protocol):
    """Images (B, C, H, W) to the mean and log-variance (B, D) of their latent codes."""

    def encode(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ...


@runtime_checkable
class StructuredPrior(Protocol):
    """A latent space with its own prior and moves (sampled with random-walk Metropolis)."""

    def prior_distribution(self, batch: int):
        """A Pyro distribution over (batch, D) latents."""
        ...

    def sample_prior(self, count: int, generator: torch.Generator) -> torch.Tensor:
        """``count`` prior draws, shape (count, D)."""
        ...

    def proposal(self, scale: float | torch.Tensor) -> Callable:
        """A symmetric proposal ``(rng, position (B, D)) -> (proposed (B, D), log ratio (B,))``."""
        ...

    def describe(self, z: torch.Tensor) -> str:
        """One latent (D,) in words."""
        ...


@runtime_checkable
class ClassConditionalPrior(Protocol):
    """A prior made of one component per class (a density fitted on class-labelled codes): chains may start in the
    components of the classes their target names (``init="classes"``)."""

    def sample_for_targets(self, weights: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """One draw per row of ``weights`` (B, K), each from the component of a class chosen with those weights;
        shape (B, D)."""
        ...


def prior_draws(generator, count: int, rng: torch.Generator) -> torch.Tensor:
    """``count`` latents (count, D) from the generator's prior: its own (a :class:`StructuredPrior`) or N(0, I)."""
    if isinstance(generator, StructuredPrior):
        return generator.sample_prior(count, rng)
    return torch.randn(count, int(generator.latent_dim), generator=rng)


def is_differentiable(generator) -> bool:
    """Whether gradients flow through ``decode`` (a renderer declares ``differentiable = False``)."""
    return bool(getattr(generator, "differentiable", True))


@dataclass(frozen=True)
class GeneratorCapabilities:
    """What a loaded generator can do, for pickers and samplers."""

    differentiable: bool
    encoder: bool
    structured_prior: bool
    class_starts: bool = False  # a prior with class components: chains may start in them (init="classes")
    # the Defuse noise its codes want where a run names none (``noise``, ``a``, ``b`` and optionally
    # ``noise_scale``), declared by the generator as ``perturbation_noise``; None: the one the images' size chooses
    perturbation_noise: dict | None = None

    @property
    def sampler(self) -> str:
        """The sampler family that is valid for it: ``hmc`` with gradients, else ``rwm``."""
        return "hmc" if self.differentiable else "rwm"


def generator_capabilities(generator, source: str = "generator") -> GeneratorCapabilities:
    """Check a generator against the protocols once and say what it can do.

    Raises
    ------
    ProbeError
        If it is not a :class:`Generator` (no integer ``latent_dim`` >= 1 or no ``decode``),
        or implements only part of :class:`StructuredPrior`.
    """
    latent_dim = getattr(generator, "latent_dim", None)
    if not isinstance(generator, Generator) or not isinstance(latent_dim, int) or latent_dim < 1:
        raise ProbeError(f"{source}: a generator needs an integer attribute latent_dim >= 1 and a method decode(z)")
    structured = [name for name in ("prior_distribution", "sample_prior", "proposal", "describe")
                  if callable(getattr(generator, name, None))]
    if structured and len(structured) < 4:
        raise ProbeError(f"{source}: a structured prior needs prior_distribution, sample_prior, proposal and "
                         f"describe; it has only {', '.join(structured)}")
    return GeneratorCapabilities(differentiable=is_differentiable(generator),
                                 encoder=isinstance(generator, Encoder),
                                 structured_prior=isinstance(generator, StructuredPrior),
                                 class_starts=isinstance(generator, ClassConditionalPrior),
                                 perturbation_noise=_declared_noise(generator, source))


def _declared_noise(generator, source: str) -> dict | None:
    declared = getattr(generator, "perturbation_noise", None)
    if declared is None:
        return None
    if not isinstance(declared, dict) or not {"noise", "a", "b"} <= set(declared):
        raise ProbeError(f"{source}: perturbation_noise is a dict with noise, a and b, got {declared!r}")
    return dict(declared)


@dataclass(frozen=True)
class GeneratorSource:
    """Generators that are built, not trained: references ``PREFIX:NAME`` (e.g. ``scene:novel``).

    Parameters
    ----------
    prefix : str
        The reference scheme, without the colon.
    choices : tuple of str
        The full references it offers.
    build : callable
        ``build(reference) -> nn.Module`` for one of ``choices``.
    """

    prefix: str
    choices: tuple[str, ...]
    build: Callable[[str], torch.nn.Module]

    def owns(self, reference: str | None) -> bool:
        return bool(reference) and reference.startswith(self.prefix + ":")
