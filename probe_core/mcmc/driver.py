"""The run loop: warm-up, then sampling, with progress and a stop (a reporter) and a sample sink.

One loop (:func:`run_chains`) runs any pure ``(init, step)`` kernel through a warm-up adapter
(:class:`HMCWindowAdapter`, :class:`RWMScaleAdapter`), as Pyro's MCMC runs a kernel with its
``WarmupAdapter``. Kernels (``hmc``, ``rwm``, ``imh``) and adaptation (``adaptation``) know nothing of this
module; this module knows nothing of what the density means (:class:`ChainDensity` is all it asks for) nor of
the store: it hands kept samples to a sink.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, NamedTuple, Protocol

import torch

from probe_core.errors import CancelledError, ProbeError
from probe_core.mcmc import adaptation, hmc, imh, rwm
from probe_core.progress import Reporter

# HMC's trajectory cap by default; with independence jumps HMC only has to move locally between them,
# and shorter trajectories buy more ESS per second (README, "Real MNIST: the sampler at 28×28")
DEFAULT_INTEGRATION_STEPS = 25
JUMPING_INTEGRATION_STEPS = 3


class ChainDensity(Protocol):
    """A batched, unnormalised log density over positions (B, D): what the driver and its adapters sample.

    Its likelihood has a scale ``sigma`` that the driver may anneal during warm-up (from
    :attr:`ChainSettings.anneal_sigma_from` down to ``sigma``); each evaluation also returns auxiliary values
    (B, K) kept with every sample (Bayes-TrEx: the classifier's confidences).
    """

    sigma: float

    def logdensity(self, z: torch.Tensor, sigma: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Log density (B,) and auxiliary values (B, K) at positions (B, D)."""

    def logdensity_and_grad(self, z: torch.Tensor, sigma: float | None = None
                            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Log density (B,), its gradient (B, D) and auxiliary values (B, K)."""

    def jump_groups(self) -> torch.Tensor | None:
        """Per chain (B,), the group whose pooled warm-up draws its independence proposal is fitted to (chains
        that sample the same distribution share one); None where positions are not Euclidean codes and
        independence proposals do not apply."""

    def random_walk_proposal(self, scale: torch.Tensor) -> rwm.Proposal:
        """The random-walk proposal at per-chain scales (B, 1) (Gaussian steps, or the space's own moves)."""


@dataclass(frozen=True)
class ChainSettings:
    """Settings of the run loop and its adapters.

    Parameters
    ----------
    num_warmup, num_samples : int
        Iterations per chain.
    max_integration_steps : int or None
        HMC leapfrog steps; each iteration draws L uniformly from [L/2, L] (jittered trajectories).
        None: :data:`DEFAULT_INTEGRATION_STEPS` (25), or :data:`JUMPING_INTEGRATION_STEPS` (3) when independence
        moves are asked for and the density allows them (:meth:`ChainDensity.jump_groups`): they make the global
        moves and HMC only the local ones (warm-up included, so the proposal is fitted to draws of the same
        kernel).
    target_accept : float
        Dual-averaging target.
    initial_step_size : float
        HMC's step size before adaptation.
    anneal_sigma_from : float or None
        Anneal σ geometrically from this value to the density's σ over the first half of warm-up (None: no
        annealing).
    rwm_initial_scale : float
        Random-walk proposal scale before adaptation.
    seed : int
        Seeds the kernels' random draws.
    independence_moves : int
        HMC only: independence Metropolis-Hastings proposals after each HMC transition once warm-up
        is over (0: none). Their proposal is a Gaussian mixture fitted to each group's pooled
        second-half warm-up draws (:func:`~probe_core.mcmc.adaptation.fit_mixture_proposal`), so
        chains jump between the density's modes instead of each staying near its own start.
        Each costs one batched forward evaluation; a gradient is recomputed once after them.
    report_every : int
        Iterations between reports and sink flushes.
    """

    num_warmup: int = 300
    num_samples: int = 300
    max_integration_steps: int | None = None
    target_accept: float = 0.75
    initial_step_size: float = 0.1
    anneal_sigma_from: float | None = 0.5
    rwm_initial_scale: float = 0.3
    seed: int = 0
    independence_moves: int = 0
    report_every: int = 10

    def __post_init__(self) -> None:
        if self.num_warmup < 0 or self.num_samples < 1:
            raise ProbeError("num_warmup must be >= 0 and num_samples >= 1")
        if not 0 < self.target_accept < 1:
            raise ProbeError("target_accept must be in (0, 1)")
        if self.max_integration_steps is not None and self.max_integration_steps < 1:
            raise ProbeError("max_integration_steps must be >= 1")
        if self.independence_moves < 0:
            raise ProbeError("independence_moves must be >= 0")


@dataclass
class ChainsSnapshot:
    """What the chains look like, in a report's details (``details["chains"]``) every ``report_every``
    iterations."""

    stage: str  # "warmup" or "sampling"
    iteration: int
    total: int
    acceptance: torch.Tensor  # (B,) mean acceptance since the last report
    step_size: torch.Tensor  # (B,)
    probs: torch.Tensor  # (B, K) current auxiliary values (Bayes-TrEx: confidences)
    logdensity: torch.Tensor  # (B,)
    position: torch.Tensor  # (B, D)
    sigma: float
    divergences: torch.Tensor  # (B,) so far
    images: torch.Tensor | None = None  # (n, C, H, W) the run's preview of the first few chains' positions


@dataclass
class ChainResult:
    """Kept samples of all chains: positions (B, S, D), probs (B, S, K), per-step diagnostics (B, S).

    ``gradient_evaluations`` counts batched evaluations of the log density and its gradient, warm-up and
    initialisation included: each covers all B chains (random-walk Metropolis: density evaluations alone).
    ``density_evaluations`` counts batched evaluations of the density alone (forward passes: HMC's
    independence proposals). ``independence_acceptance`` (B,) is the fraction of each chain's independence
    proposals accepted after warm-up (None without them).
    """

    positions: torch.Tensor
    probs: torch.Tensor
    logdensity: torch.Tensor
    acceptance: torch.Tensor
    divergent: torch.Tensor
    step_size: torch.Tensor
    wall_seconds: float
    gradient_evaluations: int
    cancelled: bool = False
    density_evaluations: int = 0
    independence_acceptance: torch.Tensor | None = None


Sink = Callable[[int, torch.Tensor, torch.Tensor], None]  # (first step index, z (B, n, D), probs (B, n, K))
Preview = Callable[[torch.Tensor], torch.Tensor]  # positions (B, D) -> images of the first few chains


def sigma_schedule(settings: ChainSettings, sigma: float, iteration: int) -> float:
    """σ at a warm-up iteration: annealed geometrically from ``settings.anneal_sigma_from`` to ``sigma`` over the
    first half of warm-up, ``sigma`` after."""
    if settings.anneal_sigma_from is None or settings.anneal_sigma_from <= sigma or settings.num_warmup == 0:
        return sigma
    fraction = min(1.0, iteration / max(1.0, 0.5 * settings.num_warmup))
    return float(settings.anneal_sigma_from * (sigma / settings.anneal_sigma_from) ** fraction)


def _changed_sigma(settings: ChainSettings, target_sigma: float, iteration: int, sigma: float) -> float | None:
    """The annealed σ for a warm-up iteration when it differs from ``sigma`` (the state must then be
    re-evaluated), else None."""
    if iteration >= settings.num_warmup:
        return None
    new_sigma = sigma_schedule(settings, target_sigma, iteration)
    return new_sigma if new_sigma != sigma else None


class _Recorder:
    """The part of a run loop that kernels share: keep post-warm-up samples, flush them to the
    sink and report (learning of a stop) every ``report_every`` iterations."""

    def __init__(self, settings: ChainSettings, reporter: Reporter | None, sink: Sink | None,
                 preview: Preview | None, chains: int, dim: int, aux_dim: int, started: float) -> None:
        self.settings = settings
        self.reporter, self.sink, self.preview = reporter, sink, preview
        self.chains, self.dim, self.aux_dim = chains, dim, aux_dim
        self.total = settings.num_warmup + settings.num_samples
        self.kept = {"z": [], "probs": [], "logp": [], "accept": [], "divergent": []}
        self.flushed = 0
        self.window_accept = torch.zeros(chains)
        self.divergences = torch.zeros(chains, dtype=torch.long)
        self.cancelled = False
        self.started = started

    def record(self, iteration: int, state, acceptance_rate: torch.Tensor, divergent: torch.Tensor) -> None:
        """Account one transition; keep it if warm-up is over."""
        self.divergences += divergent.long().cpu()
        self.window_accept += acceptance_rate.cpu()
        if iteration >= self.settings.num_warmup:
            self.kept["z"].append(state.position.cpu())
            self.kept["probs"].append(state.aux.cpu())
            self.kept["logp"].append(state.logdensity.cpu())
            self.kept["accept"].append(acceptance_rate.cpu())
            self.kept["divergent"].append(divergent.cpu())

    def report(self, iteration: int, state, step_size: torch.Tensor, sigma: float) -> bool:
        """Flush and report when a report is due; returns whether the run must stop."""
        last = iteration == self.total - 1
        if (iteration + 1) % self.settings.report_every and not last:
            return False
        kept = self.kept
        if self.sink is not None and len(kept["z"]) > self.flushed:
            self.sink(self.flushed, torch.stack(kept["z"][self.flushed:], 1),
                      torch.stack(kept["probs"][self.flushed:], 1))
            self.flushed = len(kept["z"])
        if self.reporter is not None:
            done = (iteration % self.settings.report_every) + 1
            stage = "warmup" if iteration < self.settings.num_warmup else "sampling"
            images = None
            if self.preview is not None:
                with torch.no_grad():
                    images = self.preview(state.position).cpu()
            chains = ChainsSnapshot(stage, iteration + 1, self.total, self.window_accept / done, step_size.cpu(),
                                    state.aux.cpu(), state.logdensity.cpu(), state.position.cpu(), sigma,
                                    self.divergences.clone(), images)
            try:
                self.reporter.report((iteration + 1) / self.total, f"{stage} {iteration + 1}/{self.total}",
                                     {"chains": chains}, force=last)
            except CancelledError:  # the run was stopped: end here with what was kept
                self.cancelled = not last
                return self.cancelled
        self.window_accept.zero_()
        return False

    def result(self, step_size: torch.Tensor, evaluations: int, density_evaluations: int = 0,
               independence_acceptance: torch.Tensor | None = None) -> ChainResult:
        def stack(key: str, shape: tuple) -> torch.Tensor:
            return torch.stack(self.kept[key], 1) if self.kept[key] else torch.zeros(shape)

        chains, dim = self.chains, self.dim
        return ChainResult(
            positions=stack("z", (chains, 0, dim)),
            probs=stack("probs", (chains, 0, self.aux_dim)),
            logdensity=stack("logp", (chains, 0)),
            acceptance=stack("accept", (chains, 0)),
            divergent=stack("divergent", (chains, 0)).bool(),
            step_size=step_size.cpu(),
            wall_seconds=time.perf_counter() - self.started,
            gradient_evaluations=evaluations,
            cancelled=self.cancelled,
            density_evaluations=density_evaluations,
            independence_acceptance=independence_acceptance,
        )


class TransitionInfo(NamedTuple):
    """What the driver needs from any kernel's transition, per chain."""

    acceptance_rate: torch.Tensor  # (B,)
    is_divergent: torch.Tensor  # (B,) bool


class WarmupAdapter(Protocol):
    """Binds a pure ``(init, step)`` kernel to a run and tunes it during warm-up (as Pyro's ``WarmupAdapter``).

    The kernel functions stay pure; the adapter holds the tuning (step sizes, mass matrices,
    proposal scales) and hands it to them as arguments at every step.
    """

    gradient_evaluations: int
    density_evaluations: int

    def init(self, position: torch.Tensor, sigma: float):
        """The kernel state at positions (B, D) under the likelihood's σ."""

    def step(self, rng: torch.Generator, state, sigma: float) -> tuple[object, TransitionInfo]:
        """One transition of every chain with the current tuning."""

    def adapt(self, iteration: int, state, info: TransitionInfo) -> None:
        """Update the tuning after warm-up iteration ``iteration`` (0-based)."""

    @property
    def scale(self) -> torch.Tensor:
        """The per-chain step scale now (B,), for progress and the result."""

    @property
    def independence_acceptance(self) -> torch.Tensor | None:
        """Per chain (B,), the accepted fraction of independence proposals after warm-up; None without them."""


class HMCWindowAdapter:
    """HMC with per-chain dual averaging of the step size and diagonal mass matrices from Stan's windows,
    then independence jumps between modes.

    At the end of warm-up it fits each jump group's independence proposal to the second half of
    warm-up (σ has reached its target by then); after warm-up every HMC transition is followed by
    ``settings.independence_moves`` independence Metropolis-Hastings proposals (:mod:`~probe_core.mcmc.imh`).

    Parameters
    ----------
    density : ChainDensity
    settings : ChainSettings
        ``num_warmup``, ``target_accept``, ``max_integration_steps`` (each step draws L uniformly
        from [L/2, L]: jittered trajectories), ``independence_moves``, ``seed``.
    step_size : torch.Tensor, shape (B,)
    inverse_mass : torch.Tensor, shape (B, D)
    gradient_evaluations : int
        Evaluations already spent before the run (finding its starts), counted on.
    """

    def __init__(self, density: ChainDensity, settings: ChainSettings, step_size: torch.Tensor,
                 inverse_mass: torch.Tensor, gradient_evaluations: int = 0) -> None:
        self.density, self.settings = density, settings
        self.step_size, self.inverse_mass = step_size, inverse_mass
        self.gradient_evaluations = gradient_evaluations
        self.density_evaluations = 0
        self.averaging = adaptation.dual_averaging_init(step_size)
        self.welford = adaptation.welford_init(tuple(inverse_mass.shape), inverse_mass.device)
        self.windows = set(adaptation.mass_matrix_windows(settings.num_warmup))
        self.groups = density.jump_groups() if settings.independence_moves > 0 else None
        jumps = self.groups is not None
        self.high_steps = settings.max_integration_steps or (JUMPING_INTEGRATION_STEPS if jumps
                                                             else DEFAULT_INTEGRATION_STEPS)
        self.low_steps = max(1, self.high_steps // 2)
        self.warmup_draws: list[torch.Tensor] | None = [] if jumps else None
        self.proposal: imh.MixtureProposal | None = None
        self.jumps_accepted = torch.zeros(len(step_size))
        self.jumps_proposed = 0

    def _logdensity_fn(self, sigma: float):
        def fn(z):
            self.gradient_evaluations += 1
            return self.density.logdensity_and_grad(z, sigma=sigma)
        return fn

    def _density_fn(self, sigma: float):
        def fn(z):
            self.density_evaluations += 1
            with torch.no_grad():
                return self.density.logdensity(z, sigma=sigma)
        return fn

    def init(self, position: torch.Tensor, sigma: float) -> hmc.HMCState:
        return hmc.init(position, self._logdensity_fn(sigma))

    def step(self, rng: torch.Generator, state: hmc.HMCState, sigma: float) -> tuple[hmc.HMCState, TransitionInfo]:
        steps = int(torch.randint(self.low_steps, self.high_steps + 1, (1,), generator=rng))
        state, info = hmc.step(rng, state, self._logdensity_fn(sigma), self.step_size, self.inverse_mass, steps)
        if self.proposal is not None:
            moved = torch.zeros_like(self.jumps_accepted, dtype=torch.bool)
            for _ in range(self.settings.independence_moves):
                state, jump = imh.step(rng, state, self._density_fn(sigma), self.proposal)
                moved |= jump.is_accepted.cpu()
                self.jumps_accepted += jump.is_accepted.float().cpu()
                self.jumps_proposed += 1
            if moved.any():  # the gradient of a chain that jumped is stale
                state = hmc.init(state.position, self._logdensity_fn(sigma))
        return state, TransitionInfo(info.acceptance_rate, info.is_divergent)

    def adapt(self, iteration: int, state: hmc.HMCState, info: TransitionInfo) -> None:
        self.averaging = adaptation.dual_averaging_update(self.averaging, info.acceptance_rate,
                                                          self.settings.target_accept)
        self.step_size = self.averaging.log_step.exp()
        self.welford = adaptation.welford_update(self.welford, state.position)
        if iteration + 1 in self.windows:
            self.inverse_mass = adaptation.welford_variance(self.welford)
            self.welford = adaptation.welford_init(tuple(self.inverse_mass.shape), self.inverse_mass.device)
            self.averaging = adaptation.restart_dual_averaging(self.averaging)
        if self.warmup_draws is not None and iteration >= self.settings.num_warmup // 2:
            self.warmup_draws.append(state.position.cpu())
        if iteration + 1 == self.settings.num_warmup:
            self.step_size = self.averaging.log_step_average.exp()
            if self.warmup_draws:
                proposal = adaptation.fit_mixture_proposal(torch.stack(self.warmup_draws, 1), self.groups,
                                                           seed=self.settings.seed)
                self.proposal = None if proposal is None else imh.MixtureProposal(
                    *(tensor.to(state.position.device) for tensor in proposal))
            self.warmup_draws = None

    @property
    def scale(self) -> torch.Tensor:
        return self.step_size

    @property
    def independence_acceptance(self) -> torch.Tensor | None:
        return self.jumps_accepted / self.jumps_proposed if self.jumps_proposed else None


class RWMScaleAdapter:
    """Random-walk Metropolis with per-chain proposal scales tuned by Robbins-Monro towards ``target_accept``,
    with the density's own proposal (:meth:`ChainDensity.random_walk_proposal`) at that scale."""

    def __init__(self, density: ChainDensity, chains: int, initial_scale: float,
                 target_accept: float = 0.234) -> None:
        self.density, self.target_accept = density, target_accept
        self.log_scale = torch.full((chains, 1), math.log(initial_scale))
        self.gradient_evaluations = 0  # counts density evaluations: no gradients are used
        self.density_evaluations = 0
        self.independence_acceptance = None
        self.no_divergence = torch.zeros(chains, dtype=torch.bool)

    def _logdensity_fn(self, sigma: float):
        def fn(z):
            self.gradient_evaluations += 1
            return self.density.logdensity(z, sigma=sigma)
        return fn

    def init(self, position: torch.Tensor, sigma: float) -> rwm.RWMState:
        return rwm.init(position, self._logdensity_fn(sigma))

    def step(self, rng: torch.Generator, state: rwm.RWMState, sigma: float) -> tuple[rwm.RWMState, TransitionInfo]:
        proposal = self.density.random_walk_proposal(self.log_scale.exp().to(state.position.device))
        state, info = rwm.step(rng, state, self._logdensity_fn(sigma), proposal)
        return state, TransitionInfo(info.acceptance_rate, self.no_divergence)

    def adapt(self, iteration: int, state: rwm.RWMState, info: TransitionInfo) -> None:
        self.log_scale += (info.acceptance_rate.cpu().unsqueeze(1) - self.target_accept) / math.sqrt(iteration + 1)

    @property
    def scale(self) -> torch.Tensor:
        return self.log_scale.exp().squeeze(1)


def run_chains(density: ChainDensity, settings: ChainSettings, adapter: WarmupAdapter, initial: torch.Tensor,
               rng: torch.Generator, reporter: Reporter | None = None, sink: Sink | None = None,
               started: float | None = None, preview: Preview | None = None) -> ChainResult:
    """The one sampling loop: warm-up (σ annealing, the adapter's tuning), then sampling.

    Runs any kernel through its adapter; keeps post-warm-up samples, streams them to ``sink``,
    reports to ``reporter`` every ``settings.report_every`` iterations (the fraction of iterations done, and in
    its details ``chains``, a :class:`ChainsSnapshot` with ``preview`` of the positions, for live views). A stop
    ends the run early with what was kept: the reporter's ``report`` raising
    :class:`~probe_core.errors.CancelledError`, as a :class:`~probe_core.progress.Reporter` does once its run was
    asked to stop.

    Parameters
    ----------
    density : ChainDensity
    settings : ChainSettings
    adapter : WarmupAdapter
        The kernel bound to ``density`` and its tuning.
    initial : torch.Tensor
        Starting positions, shape (B, D).
    rng : torch.Generator
        The kernels' random draws.

    Returns
    -------
    ChainResult
        Positions (B, S, D) and auxiliary values (B, S, K) of the S kept iterations.
    """
    started = time.perf_counter() if started is None else started
    chains, dim = initial.shape
    sigma = sigma_schedule(settings, density.sigma, 0)
    state = adapter.init(initial, sigma)
    recorder = _Recorder(settings, reporter, sink, preview, chains, dim, state.aux.shape[-1], started)
    for iteration in range(recorder.total):
        if (new_sigma := _changed_sigma(settings, density.sigma, iteration, sigma)) is not None:
            sigma = new_sigma
            state = adapter.init(state.position, sigma)
        state, info = adapter.step(rng, state, sigma)
        recorder.record(iteration, state, info.acceptance_rate, info.is_divergent)
        if iteration < settings.num_warmup:
            adapter.adapt(iteration, state, info)
        if recorder.report(iteration, state, adapter.scale, sigma):
            break
    return recorder.result(adapter.scale, adapter.gradient_evaluations, adapter.density_evaluations,
                           adapter.independence_acceptance)
