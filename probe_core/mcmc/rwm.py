"""Batched random-walk Metropolis for non-differentiable generators, as pure functions.

A proposal is a callable ``proposal(generator, position) -> (proposed, log_ratio)``
where ``log_ratio = log q(x | x') - log q(x' | x)`` (0 for symmetric proposals),
so the acceptance rule stays valid for asymmetric ones.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Sequence

import torch

from probe_core.errors import ProbeError

# logdensity_fn(z (B, D)) -> (logp (B,), aux (B, ...))
LogDensity = Callable[[torch.Tensor], "tuple[torch.Tensor, torch.Tensor]"]
Proposal = Callable[[torch.Generator, torch.Tensor], "tuple[torch.Tensor, torch.Tensor]"]


class RWMState(NamedTuple):
    position: torch.Tensor  # (B, D)
    logdensity: torch.Tensor  # (B,)
    aux: torch.Tensor  # (B, ...)


class RWMInfo(NamedTuple):
    acceptance_rate: torch.Tensor  # (B,)
    is_accepted: torch.Tensor  # (B,) bool


def init(position: torch.Tensor, logdensity_fn: LogDensity) -> RWMState:
    with torch.no_grad():
        logdensity, aux = logdensity_fn(position)
    return RWMState(position, logdensity, aux)


def step(generator: torch.Generator, state: RWMState, logdensity_fn: LogDensity,
         proposal: Proposal) -> tuple[RWMState, RWMInfo]:
    """One Metropolis-Hastings transition per chain: accept with min(1, π(x')q(x|x') / π(x)q(x'|x))."""
    with torch.no_grad():
        proposed, log_ratio = proposal(generator, state.position)
        logdensity, aux = logdensity_fn(proposed)
        log_accept = logdensity - state.logdensity + log_ratio
        log_accept = torch.where(torch.isnan(log_accept), torch.full_like(log_accept, -torch.inf), log_accept)
        acceptance_rate = torch.exp(torch.clamp(log_accept, max=0.0))
        accepted = torch.rand(acceptance_rate.shape, generator=generator).to(acceptance_rate.device) < acceptance_rate
        keep = accepted.unsqueeze(1)
        new_state = RWMState(
            torch.where(keep, proposed, state.position),
            torch.where(accepted, logdensity, state.logdensity),
            torch.where(accepted.view(-1, *([1] * (aux.ndim - 1))), aux, state.aux),
        )
    return new_state, RWMInfo(acceptance_rate, accepted)


class GaussianProposal:
    """Symmetric Gaussian steps on continuous coordinates.

    Parameters
    ----------
    scale : float or torch.Tensor
        Step standard deviation: scalar, (D,) or per chain (B, 1) / (B, D).
    dims : sequence of int, optional
        Coordinates to move (default all).
    """

    def __init__(self, scale: float | torch.Tensor, dims: Sequence[int] | None = None) -> None:
        self.scale = scale
        self.dims = None if dims is None else list(dims)

    def __call__(self, generator: torch.Generator, position: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        noise = torch.randn(position.shape, generator=generator).to(position.device) * self.scale
        if self.dims is not None:
            mask = torch.zeros(position.shape[1], dtype=torch.bool, device=position.device)
            mask[self.dims] = True
            noise = noise * mask
        return position + noise, torch.zeros(len(position), device=position.device)


class CategoricalResampleProposal:
    """Resample each discrete coordinate uniformly over its categories with probability ``rate``.

    Symmetric: q(x' | x) = q(x | x') for uniform resampling, so the log ratio is 0.

    Parameters
    ----------
    dims : sequence of int
        Coordinates holding category indices (stored as floats).
    num_categories : sequence of int
        Categories of each of those coordinates.
    rate : float
        Probability of resampling each coordinate (0.2 in the paper's CLEVR runs).
    """

    def __init__(self, dims: Sequence[int], num_categories: Sequence[int], rate: float = 0.2) -> None:
        if len(dims) != len(num_categories):
            raise ProbeError("dims and num_categories must have the same length")
        if not 0 < rate <= 1:
            raise ProbeError(f"rate must be in (0, 1], got {rate}")
        self.dims = list(dims)
        self.num_categories = torch.tensor(list(num_categories), dtype=torch.float32)
        self.rate = rate

    def __call__(self, generator: torch.Generator, position: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        batch = len(position)
        draws = torch.floor(torch.rand(batch, len(self.dims), generator=generator) * self.num_categories)
        resample = torch.rand(batch, len(self.dims), generator=generator) < self.rate
        proposed = position.clone()
        current = proposed[:, self.dims]
        proposed[:, self.dims] = torch.where(resample.to(position.device), draws.to(position), current)
        return proposed, torch.zeros(batch, device=position.device)
