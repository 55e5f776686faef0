"""Warm-up adaptation kept apart from the kernels: per-chain dual averaging and diagonal mass matrices.

All state is batched over chains, so every chain gets its own step size and
mass matrix (as in Pyro's ``WarmupAdapter``, but without mutating a kernel).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


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
