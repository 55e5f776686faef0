"""Tempered sequential Monte Carlo along a surrogate-bridged path, for hard (ambiguous, vector) targets.

Plain HMC on an ambiguous target gets stuck: the relaxed likelihood rewards images
whose mass sits on *other* classes (a trap mode), and tempering straight from the
prior pulls particles there. This sampler moves particles along a path that avoids
the trap (measurements in ``../shared/reference/methods.md``):

1. τ ∈ [0, 1]: from the prior p(z) to p(z)·exp(-τ·A·KL(q ‖ f(g(z)))), q the target's soft
   label (0.5/0.5 for an ambiguous pair). KL does not saturate, so it pulls towards the pair.
2. τ ∈ [1, 2]: bridge from that surrogate to the exact Bayes-TrEx posterior,
   p(z)·exp((2-τ)·S(z) + (τ-1)·L(z)).

Each step of τ is chosen per island so that the effective sample size of the incremental
weights stays at half the island; particles are resampled systematically within their
island and moved by a few HMC transitions whose step size adapts per island and whose mass
matrix comes from the spread of the target's particles. Several independent islands per
target keep the final particles' ancestry diverse.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from probe_core.errors import CancelledError
from probe_core.mcmc import hmc
from probe_core.progress import Reporter
from probe_core.sampling.posterior import SURROGATE_SHARPNESS, BayesTrExPosterior

MIN_ISLAND_SIZE = 8  # fewer particles per island make resampling degenerate


@dataclass(frozen=True)
class SMCConfig:
    """Settings of the tempered SMC initialiser.

    Up to ``islands`` independent particle systems per target, of equal size and at least 8
    particles each (the posterior's chains): the island count is the largest divisor of the
    chains per target that allows this, so any chain count works (a prime count gives one island).
    """

    islands: int = 4
    ess_fraction: float = 0.5
    moves_per_stage: int = 5
    leapfrog_steps: int = 5
    initial_step_size: float = 0.2
    sharpness: float = SURROGATE_SHARPNESS
    max_stages: int = 200
    seed: int = 0


@dataclass
class SMCResult:
    positions: torch.Tensor  # (B, D) final particles
    probs: torch.Tensor  # (B, K)
    step_size: torch.Tensor  # (B,)
    inverse_mass: torch.Tensor  # (B, D)
    stages: int
    wall_seconds: float
    gradient_evaluations: int


def _coefficients(tau: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Weights of the surrogate S and the exact likelihood L at path position τ ∈ [0, 2]."""
    return torch.where(tau <= 1, tau, 2 - tau), torch.clamp(tau - 1, min=0)


def _ess_fraction(log_weights: torch.Tensor) -> torch.Tensor:
    """Normalised ESS per island of log weights (G, n): (Σw)² / (n Σw²)."""
    w = torch.exp(log_weights - log_weights.max(1, keepdim=True).values)
    return w.sum(1) ** 2 / (w.pow(2).sum(1) * log_weights.shape[1])


def _systematic_resample(log_weights: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Indices (G, n) into each island's particles."""
    groups, n = log_weights.shape
    w = torch.softmax(log_weights, 1)
    cumulative = w.cumsum(1)
    cumulative[:, -1] = 1.0
    offsets = (torch.rand(groups, 1, generator=generator) + torch.arange(n)) / n
    return torch.searchsorted(cumulative, offsets).clamp(max=n - 1)


def island_count(chains_per_target: int, max_islands: int) -> int:
    """The number of equal islands of at least :data:`MIN_ISLAND_SIZE` particles for a chain count.

    The largest divisor of ``chains_per_target`` not above ``max_islands`` whose islands keep
    :data:`MIN_ISLAND_SIZE` particles; 1 when there is none (fewer chains, or a prime count).
    """
    for islands in range(min(max_islands, chains_per_target // MIN_ISLAND_SIZE), 1, -1):
        if chains_per_target % islands == 0:
            return islands
    return 1


def run_smc(posterior: BayesTrExPosterior, config: SMCConfig = SMCConfig(),
            reporter: Reporter | None = None) -> SMCResult:
    """Move prior particles to the Bayes-TrEx posterior along the surrogate-bridged path.

    Returns the final particles, one per chain of ``posterior``, with the step sizes and
    mass matrices reached, ready to start HMC chains from.
    """
    started = time.perf_counter()
    batch = posterior.targets
    chains, dim = batch.num_chains, posterior.latent_dim
    per_target = batch.chains_per_target
    islands = island_count(per_target, config.islands)
    n = per_target // islands
    groups = chains // n
    generator = torch.Generator().manual_seed(config.seed)
    device = posterior.device
    soft = batch.soft_labels().to(device)
    soft_entropy = -(soft * soft.clamp_min(1e-12).log()).sum(1)
    evaluations = [0]

    def terms(z: torch.Tensor):
        log_prior, log_likelihood, probs = posterior.log_terms(z)
        kl = -(soft * probs.clamp_min(1e-12).log()).sum(1) - soft_entropy
        return log_prior, -config.sharpness * kl, log_likelihood, probs

    tau = torch.zeros(groups, device=device)

    # Reads the current ``tau`` of the enclosing loop at each call: the HMC moves of a stage
    # target that stage's tempered density.
    def logdensity_and_grad(z: torch.Tensor):
        evaluations[0] += 1
        with torch.enable_grad():
            z = z.detach().requires_grad_(True)
            log_prior, surrogate, likelihood, probs = terms(z)
            c_s, c_l = _coefficients(tau.repeat_interleave(n))
            logp = log_prior + c_s * surrogate + c_l * likelihood
            (grad,) = torch.autograd.grad(logp.sum(), z)
        return logp.detach(), grad, torch.stack([surrogate.detach(), likelihood.detach()], 1)

    position = torch.randn(chains, dim, generator=generator).to(device)
    step_size = torch.full((groups,), config.initial_step_size, device=device)
    inverse_mass = torch.ones(chains, dim, device=device)
    with torch.no_grad():
        _, surrogate, likelihood, probs = terms(position)
    stages = 0
    while bool((tau < 2).any()) and stages < config.max_stages:
        stages += 1
        tau, log_weights = _next_temperatures(tau, surrogate.view(groups, n), likelihood.view(groups, n),
                                              config.ess_fraction)
        # Resample within islands.
        index = _systematic_resample(log_weights, generator)
        flat_index = (index + torch.arange(groups).unsqueeze(1) * n).reshape(-1).to(device)
        position = position[flat_index]
        inverse_mass = _mass_from_spread(position, len(batch.targets), per_target)
        state = hmc.init(position, logdensity_and_grad)
        accepted = torch.zeros(groups, device=device)
        for _ in range(config.moves_per_stage):
            state, info = hmc.step(generator, state, logdensity_and_grad, step_size.repeat_interleave(n),
                                   inverse_mass, config.leapfrog_steps)
            accepted += info.acceptance_rate.view(groups, n).mean(1)
        rate = accepted / config.moves_per_stage
        step_size = torch.where(rate > 0.8, step_size * 1.3, torch.where(rate < 0.6, step_size * 0.7, step_size))
        step_size = step_size.clamp(1e-3, 2.0)
        position = state.position
        surrogate, likelihood = state.aux[:, 0], state.aux[:, 1]
        try:
            if reporter is not None:
                reporter.report(None, f"starting chains: tempering stage {stages}, "
                                      f"{float(tau.mean()) / 2:.0%} of the way to the posterior")
        except CancelledError:  # asked to stop: the particles as they are
            break
    with torch.no_grad():
        _, _, _, probs = terms(position)
    return SMCResult(position, probs.detach(), step_size.repeat_interleave(n), inverse_mass, stages,
                     time.perf_counter() - started, evaluations[0])


def _next_temperatures(tau: torch.Tensor, surrogate: torch.Tensor, likelihood: torch.Tensor,
                       ess_fraction: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Each island's next τ (G,), chosen by bisection so that the incremental weights keep ``ess_fraction`` of
    the particles' ESS, and those log weights (G, n): τ in [0, 1) moves along the surrogate (G, n), in [1, 2)
    from the surrogate to the likelihood (G, n); an island at 2 stays."""
    in_first = tau < 1
    slope = torch.where(in_first.unsqueeze(1), surrogate, likelihood - surrogate)
    limit = torch.where(in_first, 1 - tau, 2 - tau)
    low, high = torch.zeros_like(tau), limit.clone()
    ok_full = _ess_fraction(high.unsqueeze(1) * slope) >= ess_fraction
    for _ in range(30):
        middle = (low + high) / 2
        good = _ess_fraction(middle.unsqueeze(1) * slope) >= ess_fraction
        low, high = torch.where(good, middle, low), torch.where(good, high, middle)
    delta = torch.where(ok_full, limit, torch.clamp(low, min=1e-6))
    delta = torch.where(tau >= 2, torch.zeros_like(delta), torch.minimum(delta, limit))
    tau = torch.where(tau >= 2, tau, tau + delta)
    tau = torch.where((tau - 1).abs() < 1e-9, torch.ones_like(tau), tau)
    tau = torch.where(tau > 2 - 1e-9, torch.full_like(tau, 2.0), tau)
    return tau, delta.unsqueeze(1) * slope


def _mass_from_spread(position: torch.Tensor, targets: int, per_target: int) -> torch.Tensor:
    """The inverse mass matrix (diagonal) of each chain (B, D) from the spread of its target's particles; a single
    chain per target has no spread, so unit mass."""
    spread = position.view(targets, per_target, position.shape[1]).var(1, correction=0)
    spread = torch.where(torch.tensor(per_target > 1), spread, torch.ones_like(spread)).clamp(1e-3, 10.0)
    return spread.repeat_interleave(per_target, 0)
