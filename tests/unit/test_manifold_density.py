"""Manifold Parzen windows over codes (issue 99): kernels that spread along each code's same-class neighbours, so a
chain walks between training codes instead of staying on the one it starts on."""

from __future__ import annotations

import math

import pyro.distributions as dist
import pytest
import torch
from torch import nn

from probe_core.errors import ProbeError
from probe_core.models.density import (
    DensityGenerator,
    KernelCodeDensity,
    LowRankKernelMixture,
    ManifoldCodeDensity,
)
from probe_core.sampling import BayesTrExPosterior, SamplerConfig, run_hmc
from probe_core.sampling.targets import TargetBatch, parse_targets

DIM = 24


def _curves(per_class: int = 60, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Two classes of codes, each spread along a curve in 24 dimensions: sparse, as real codes are (neighbours
    several whitened units apart), with a little noise off the curve."""
    generator = torch.Generator().manual_seed(seed)
    directions = torch.randn(2, 3, DIM, generator=generator)
    labels = torch.arange(2).repeat_interleave(per_class)
    t = torch.rand(len(labels), generator=generator) * 2 * math.pi
    along = torch.stack([torch.cos(t), torch.sin(t), t / math.pi], 1)  # a helix
    codes = (along[:, :, None] * directions[labels]).sum(1) * 4 + 0.05 * torch.randn(len(labels), DIM,
                                                                                   generator=generator)
    return codes + 6.0 * labels[:, None], labels


class _Identity(nn.Module):
    """Codes as 'images' (B, 1, 1, D), and back."""

    def __init__(self, latent_dim: int = DIM) -> None:
        super().__init__()
        self.latent_dim = latent_dim

    def decode(self, z):
        return z.reshape(len(z), 1, 1, -1)

    def encode(self, x):
        mean = x.reshape(len(x), -1)
        return mean, torch.zeros_like(mean)


class _Uniform(nn.Module):
    """A classifier unsure of everything: the posterior of a uniform target is the prior."""

    def forward(self, x):
        return torch.full((len(x), 2), 0.5)


def test_the_low_rank_mixture_is_torchs_mixture_of_low_rank_gaussians_with_its_gradient():
    generator = torch.Generator().manual_seed(0)
    centres, factors = torch.randn(6, 5, generator=generator), torch.randn(6, 5, 2, generator=generator)
    mixture = LowRankKernelMixture(centres, 0.3, factors, batch_shape=(4,))
    reference = dist.MixtureSameFamily(dist.Categorical(logits=torch.zeros(6)),
                                       dist.LowRankMultivariateNormal(centres, factors, torch.full((6, 5), 0.09)))
    x = torch.randn(4, 5, generator=generator).requires_grad_(True)
    assert torch.allclose(mixture.log_prob(x), reference.log_prob(x), atol=1e-4)
    (gradient,) = torch.autograd.grad(mixture.log_prob(x).sum(), x)
    (expected,) = torch.autograd.grad(reference.log_prob(x).sum(), x)
    assert torch.allclose(gradient, expected, atol=1e-3)
    assert mixture.sample((3,)).shape == (3, 4, 5) and mixture.batch_shape == (4,)


def test_the_fitted_kernels_spread_along_same_class_neighbours_and_draws_keep_their_class():
    codes, labels = _curves()
    density = ManifoldCodeDensity(neighbours=4, spread=0.5).fit(codes, labels)
    assert density.neighbours_.shape == (len(codes), 4)
    assert bool((density.labels_[density.neighbours_] == density.labels_[:, None]).all())
    drawn = density.sample(400, torch.Generator().manual_seed(1), class_index=1)
    assert drawn.shape == (400, DIM)
    nearest = torch.cdist(drawn, density.codes_).argmin(1)
    assert float((density.labels_[nearest] == 1).float().mean()) > 0.95
    assert torch.isfinite(density.class_log_joint(drawn[:5])).all()
    # a stored model: the kind and its arrays come back from the state dict
    fitted = DensityGenerator(_Identity(), density, class_names=("a", "b"))
    placeholder = DensityGenerator(_Identity(), class_names=("a", "b"))
    placeholder.load_state_dict(fitted.state_dict())
    assert isinstance(placeholder.density, ManifoldCodeDensity)
    assert torch.allclose(placeholder.prior_distribution(3).log_prob(drawn[:3]),
                          fitted.prior_distribution(3).log_prob(drawn[:3]), atol=1e-4)


def _distinct_codes_per_chain(density, iterations: int) -> list[int]:
    """Four chains, each started on a training code; how many training codes each one's draws lie nearest."""
    generator = DensityGenerator(_Identity(), density, class_names=("a", "b"))
    posterior = BayesTrExPosterior(_Uniform(), generator, TargetBatch(parse_targets("uniform", ("a", "b")), 4))
    start = density.codes_[[0, 30, 70, 100]].clone()
    result = run_hmc(posterior, SamplerConfig(num_warmup=iterations, num_samples=iterations, seed=0), initial=start)
    visited = result.positions.reshape(4, -1, DIM)
    return [len(torch.cdist(chain, density.codes_).argmin(1).unique()) for chain in visited]


def test_a_chain_started_on_one_training_code_reaches_the_neighbourhoods_of_others():
    codes, labels = _curves()
    walking = _distinct_codes_per_chain(ManifoldCodeDensity(neighbours=4, spread=1.0).fit(codes, labels), 60)
    pinned = _distinct_codes_per_chain(KernelCodeDensity(bandwidth=0.05).fit(codes, labels), 20)
    assert pinned == [1, 1, 1, 1]  # the isotropic kernel keeps each chain on the code it starts on
    assert sum(walking) >= 12 and max(walking) >= 4, walking


def test_bad_manifold_settings_are_the_projects_error():
    with pytest.raises(ProbeError, match="neighbour"):
        ManifoldCodeDensity(neighbours=0).fit(*_curves())
    with pytest.raises(ProbeError, match="spread"):
        ManifoldCodeDensity(spread=0).fit(*_curves())
