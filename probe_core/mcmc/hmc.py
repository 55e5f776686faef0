"""Batched Hamiltonian Monte Carlo as pure functions, in the style of BlackJAX.

Chains are the leading dimension of every tensor. ``init`` builds the state,
``step`` makes one HMC transition for all chains with per-chain step sizes and
diagonal inverse mass matrices, and accepts or rejects per chain. Tunable values
are arguments, so an adaptation scheme outside the kernel can change them at
every step.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import torch

# logdensity_and_grad(z (B, D)) -> (logp (B,), grad (B, D), aux (B, ...))
LogDensityAndGrad = Callable[[torch.Tensor], "tuple[torch.Tensor, torch.Tensor, torch.Tensor]"]

DIVERGENCE_THRESHOLD = 1000.0


class HMCState(NamedTuple):
    """What the next transition needs."""

    position: torch.Tensor  # (B, D)
    logdensity: torch.Tensor  # (B,)
    grad: torch.Tensor  # (B, D)
    aux: torch.Tensor  # (B, ...) e.g. the classifier's confidences at position


class HMCInfo(NamedTuple):
    """Per-transition diagnostics, not carried forward."""

    acceptance_rate: torch.Tensor  # (B,) min(1, exp(-ΔH))
    is_accepted: torch.Tensor  # (B,) bool
    is_divergent: torch.Tensor  # (B,) bool
    energy_change: torch.Tensor  # (B,)
    num_integration_steps: int


def init(position: torch.Tensor, logdensity_fn: LogDensityAndGrad) -> HMCState:
    """Evaluate the log density and gradient at the starting positions (B, D)."""
    logdensity, grad, aux = logdensity_fn(position)
    return HMCState(position.detach(), logdensity, grad, aux)


def _kinetic(momentum: torch.Tensor, inverse_mass: torch.Tensor) -> torch.Tensor:
    return 0.5 * (momentum.pow(2) * inverse_mass).sum(1)


def step(generator: torch.Generator, state: HMCState, logdensity_fn: LogDensityAndGrad,
         step_size: torch.Tensor, inverse_mass: torch.Tensor, num_integration_steps: int,
         divergence_threshold: float = DIVERGENCE_THRESHOLD) -> tuple[HMCState, HMCInfo]:
    """One HMC transition (leapfrog, Metropolis correction) for every chain.

    Parameters
    ----------
    generator : torch.Generator
        Source of randomness (momenta and accept draws).
    state : HMCState
    logdensity_fn : callable
        z (B, D) -> (logp (B,), grad (B, D), aux).
    step_size : torch.Tensor
        Shape (B,), per chain.
    inverse_mass : torch.Tensor
        Diagonal inverse mass matrix, shape (B, D).
    num_integration_steps : int
        Leapfrog steps L.

    Returns
    -------
    (HMCState, HMCInfo)
    """
    position, grad = state.position, state.grad
    device = position.device
    momentum = torch.randn(position.shape, generator=generator).to(device) / inverse_mass.sqrt()
    initial_energy = -state.logdensity + _kinetic(momentum, inverse_mass)
    eps = step_size.unsqueeze(1)
    logdensity, aux = state.logdensity, state.aux
    momentum = momentum + 0.5 * eps * grad
    for index in range(num_integration_steps):
        position = position + eps * inverse_mass * momentum
        logdensity, grad, aux = logdensity_fn(position)
        if index < num_integration_steps - 1:
            momentum = momentum + eps * grad
    momentum = momentum + 0.5 * eps * grad
    energy_change = -logdensity + _kinetic(momentum, inverse_mass) - initial_energy
    energy_change = torch.where(torch.isfinite(energy_change), energy_change, torch.full_like(energy_change, torch.inf))
    is_divergent = energy_change > divergence_threshold
    acceptance_rate = torch.exp(torch.clamp(-energy_change, max=0.0))
    uniform = torch.rand(acceptance_rate.shape, generator=generator).to(device)
    accepted = uniform < acceptance_rate
    keep = accepted.unsqueeze(1)
    new_state = HMCState(
        torch.where(keep, position, state.position).detach(),
        torch.where(accepted, logdensity, state.logdensity),
        torch.where(keep, grad, state.grad),
        torch.where(accepted.view(-1, *([1] * (aux.ndim - 1))), aux, state.aux),
    )
    return new_state, HMCInfo(acceptance_rate, accepted, is_divergent, energy_change, num_integration_steps)
