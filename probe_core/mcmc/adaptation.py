"""Warm-up adaptation kept apart from the kernels: per-chain dual averaging, diagonal mass matrices and
the independence proposal fitted to warm-up draws.

All state is batched over chains, so every chain gets its own step size and
mass matrix (as in Pyro's ``WarmupAdapter``, but without mutating a kernel).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from probe_core.mcmc import imh


@dataclass
class DualAveragingState:
    """Nesterov dual averaging of log step size (Hoffman & Gelman 2014), per chain."""

    log_step: torch.Tensor  # (B,)
    log_step_average: torch.Tensor  # (B,)
    error_sum: torch.Tensor  # (B,)
    iteration: int
    mu: torch.Tensor  # (B,) shrinkage target log(10 * initial step)


def dual_averaging_init(step_size: torch.Tensor) -> DualAveragingState:
    log_step = step_size.log()
    return DualAveragingState(log_step, torch.zeros_like(log_step), torch.zeros_like(log_step), 0,
                              torch.log(10 * step_size))


def dual_averaging_update(state: DualAveragingState, acceptance_rate: torch.Tensor, target: float = 0.8,
                          gamma: float = 0.05, t0: float = 10.0, kappa: float = 0.75,
                          min_step: float = 1e-4) -> DualAveragingState:
    """One update towards the target acceptance rate; returns the new state."""
    t = state.iteration + 1
    acceptance = torch.nan_to_num(acceptance_rate, nan=0.0)
    error_sum = state.error_sum + (target - acceptance)
    log_step = state.mu - math.sqrt(t) / gamma * error_sum / (t + t0)
    log_step = log_step.clamp(min=math.log(min_step), max=math.log(10.0))
    weight = t ** (-kappa)
    log_average = weight * log_step + (1 - weight) * state.log_step_average
    return DualAveragingState(log_step, log_average, error_sum, t, state.mu)


def restart_dual_averaging(state: DualAveragingState) -> DualAveragingState:
    """Restart from the current step size (after the mass matrix changed)."""
    return dual_averaging_init(state.log_step.exp())


@dataclass
class WelfordState:
    """Running mean and sum of squares per chain."""

    count: int
    mean: torch.Tensor  # (B, D)
    m2: torch.Tensor  # (B, D)


def welford_init(shape: tuple[int, int], device: torch.device | None = None) -> WelfordState:
    return WelfordState(0, torch.zeros(shape, device=device), torch.zeros(shape, device=device))


def welford_update(state: WelfordState, x: torch.Tensor) -> WelfordState:
    count = state.count + 1
    delta = x - state.mean
    mean = state.mean + delta / count
    return WelfordState(count, mean, state.m2 + delta * (x - mean))


def welford_variance(state: WelfordState) -> torch.Tensor:
    """Regularised variance (as Stan): shrunk towards 1e-3 for short windows, shape (B, D)."""
    n = max(state.count, 2)
    variance = state.m2 / (n - 1)
    return (n / (n + 5.0)) * variance + 1e-3 * (5.0 / (n + 5.0))


def mass_matrix_windows(num_warmup: int, initial_buffer: int = 75, final_buffer: int = 50,
                        first_window: int = 25) -> list[int]:
    """Warm-up iterations after which the mass matrix is re-estimated (Stan's doubling windows)."""
    if num_warmup < 20:
        return []
    if initial_buffer + first_window + final_buffer > num_warmup:
        initial_buffer, final_buffer = int(0.15 * num_warmup), int(0.1 * num_warmup)
        first_window = num_warmup - initial_buffer - final_buffer
    ends, start, size = [], initial_buffer, first_window
    while start + size <= num_warmup - final_buffer:
        next_size = 2 * size
        if start + size + next_size > num_warmup - final_buffer:
            size = num_warmup - final_buffer - start
        ends.append(start + size)
        start, size = start + size, next_size
    return ends


def fit_mixture_proposal(draws: torch.Tensor, groups: torch.Tensor, prior_weight: float = 0.1,
                         max_components: int = 6, max_points: int = 2000, seed: int = 0
                         ) -> "imh.MixtureProposal | None":
    """An independence proposal per chain: a Gaussian mixture fitted to its group's pooled warm-up draws.

    Each group's (target's) chains are pooled, so the mixture covers the modes that any of them
    found; its number of components is chosen by BIC, at most one per ``10 × parameters`` draws.
    A defensive component, the prior N(0, I) with weight ``prior_weight``, keeps π/q bounded
    (π ≤ prior × max likelihood), so the independence sampler stays uniformly ergodic even
    where the mixture misses part of the posterior.

    Parameters
    ----------
    draws : torch.Tensor
        Warm-up positions, shape (B, N, D): N draws of each of B chains.
    groups : torch.Tensor
        Shape (B,), the group (target) of each chain.
    prior_weight : float
        Weight of the N(0, I) component, in (0, 1).
    max_components, max_points : int
        Bounds on the mixture and on the draws it is fitted to (a fixed-seed subsample).
    seed : int

    Returns
    -------
    imh.MixtureProposal or None
        Per-chain mixtures, (B, K, ...) with K the largest count over groups plus the prior; None
        when the draws are too few for even one full-covariance component.
    """
    from sklearn.mixture import GaussianMixture

    chains, _, dim = draws.shape
    parameters = dim + dim * (dim + 1) // 2 + 1
    fitted = {}
    for group in groups.unique().tolist():
        points = draws[groups == group].reshape(-1, dim).double().numpy()
        points = points[np.isfinite(points).all(1)]
        if len(points) > max_points:
            points = points[np.random.default_rng(seed).choice(len(points), max_points, replace=False)]
        most = min(max_components, len(points) // (10 * parameters))
        if most < 1:
            return None
        candidates = [GaussianMixture(count, covariance_type="full", reg_covar=1e-4, random_state=seed).fit(points)
                      for count in range(1, most + 1)]
        best = min(candidates, key=lambda mixture: mixture.bic(points))
        fitted[group] = (torch.tensor(best.means_), torch.linalg.cholesky(torch.tensor(best.covariances_)),
                         torch.tensor(best.weights_) * (1 - prior_weight))
    width = 1 + max(len(weights) for _, _, weights in fitted.values())
    loc = torch.zeros(chains, width, dim, dtype=torch.float64)
    scale_tril = torch.eye(dim, dtype=torch.float64).repeat(chains, width, 1, 1)
    weights = torch.zeros(chains, width, dtype=torch.float64)
    for group, (means, trils, group_weights) in fitted.items():
        rows, count = (groups == group).nonzero().squeeze(1), len(group_weights)
        loc[rows, :count], scale_tril[rows, :count], weights[rows, :count] = means, trils, group_weights
        weights[rows, -1] = prior_weight  # the prior N(0, I): zero mean, identity already in place
    return imh.MixtureProposal(loc.float(), scale_tril.float(), weights.log().float())
