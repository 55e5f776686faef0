"""The sampling driver: warm-up, then sampling, with a progress hook, cancellation and a sample sink.

One loop (:func:`run_chains`) runs any pure ``(init, step)`` kernel through a warm-up adapter
(:class:`HMCWindowAdapter`, :class:`RWMScaleAdapter`), as Pyro's MCMC runs a kernel with its
``WarmupAdapter``. Kernels (``hmc``, ``rwm``) and adaptation (``adaptation``) know nothing of
this module; this module knows nothing of the store: it hands kept samples to a sink.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, NamedTuple, Protocol

import torch

from probe_core.errors import ProbeError
from probe_core.sampling import adaptation, hmc, imh, rwm
from probe_core.sampling.posterior import SURROGATE_SHARPNESS, BayesTrExPosterior
from probe_core.sampling.protocols import ClassConditionalPrior, StructuredPrior
from probe_core.sampling.smc import SMCConfig, run_smc

INIT_MODES = ("smc", "optimize", "prior", "uniform", "classes")
PREVIEW_CHAINS = 8
# HMC's trajectory cap by default; with independence jumps HMC only has to move locally between them,
# and shorter trajectories buy more ESS per second (README, "Real MNIST: the sampler at 28×28")
DEFAULT_INTEGRATION_STEPS = 25
JUMPING_INTEGRATION_STEPS = 3


def _preview(posterior: BayesTrExPosterior, position: torch.Tensor) -> torch.Tensor:
    """Decoded images of the first few chains, for live views."""
    with torch.no_grad():
        return posterior.generator.decode(position[:PREVIEW_CHAINS].to(posterior.device)).cpu()


# A Bayes-TrEx run's default length, written once (bayestrex.SAMPLER_DEFAULTS and the run settings read these).
DEFAULT_CHAINS = 64
DEFAULT_WARMUP = 300
DEFAULT_SAMPLES = 300


@dataclass(frozen=True)
class SamplerConfig:
    """Settings of a sampling run.

    Parameters
    ----------
    num_warmup, num_samples : int
        Iterations per chain.
    max_integration_steps : int or None
        HMC leapfrog steps; each iteration draws L uniformly from [L/2, L] (jittered trajectories).
        None: ``DEFAULT_INTEGRATION_STEPS`` (25), or ``JUMPING_INTEGRATION_STEPS`` (3) when independence
        moves are asked for and the generator allows them (not a
        :class:`~probe_core.sampling.protocols.StructuredPrior`): they make the global moves and HMC only the
        local ones (warm-up included, so the proposal is fitted to draws of the same kernel).
    target_accept : float
        Dual-averaging target.
    init : {"smc", "optimize", "prior", "uniform", "classes"}
        Starting points: particles of the surrogate-bridged tempered SMC (with their step
        sizes and mass matrices; see :mod:`probe_core.sampling.smc`), a short Adam run on the
        surrogate exp(-A·CE(soft target)) · prior from prior draws, prior draws,
        Uniform(-2, 2) per dimension as in the paper, or draws from the prior's components of the classes
        each chain's target names (a :class:`~probe_core.sampling.protocols.ClassConditionalPrior`'s).
    anneal_sigma_from : float or None
        Anneal σ geometrically from this value to the target σ over the first half
        of warm-up (None: no annealing).
    independence_moves : int
        HMC only: independence Metropolis-Hastings proposals after each HMC transition once warm-up
        is over (0: none). Their proposal is a Gaussian mixture fitted to each target's pooled
        second-half warm-up draws (:func:`~probe_core.sampling.adaptation.fit_mixture_proposal`), so
        chains jump between the posterior's modes instead of each staying near its own start.
        Each costs one batched forward evaluation; a gradient is recomputed once after them.
    report_every : int
        Iterations between hook calls and sink flushes.
    """

    num_warmup: int = DEFAULT_WARMUP
    num_samples: int = DEFAULT_SAMPLES
    max_integration_steps: int | None = None
    target_accept: float = 0.75
    initial_step_size: float = 0.1
    init: str = "optimize"
    init_steps: int = 150
    anneal_sigma_from: float | None = 0.5
    rwm_initial_scale: float = 0.3
    seed: int = 0
    independence_moves: int = 0
    report_every: int = 10

    def __post_init__(self) -> None:
        if self.num_warmup < 0 or self.num_samples < 1:
            raise ProbeError("num_warmup must be >= 0 and num_samples >= 1")
        if self.init not in INIT_MODES:
            raise ProbeError(f"init must be one of {INIT_MODES}, got {self.init!r}")
        if not 0 < self.target_accept < 1:
            raise ProbeError("target_accept must be in (0, 1)")
        if self.max_integration_steps is not None and self.max_integration_steps < 1:
            raise ProbeError("max_integration_steps must be >= 1")
        if self.independence_moves < 0:
            raise ProbeError("independence_moves must be >= 0")


@dataclass
class Progress:
    """Handed to the hook every ``report_every`` iterations."""

    stage: str  # "warmup" or "sampling"
    iteration: int
    total: int
    acceptance: torch.Tensor  # (B,) mean acceptance since the last report
    step_size: torch.Tensor  # (B,)
    probs: torch.Tensor  # (B, K) current confidences
    logdensity: torch.Tensor  # (B,)
    position: torch.Tensor  # (B, D)
    sigma: float
    divergences: torch.Tensor  # (B,) so far
    images: torch.Tensor | None = None  # (n, C, H, W) decoded current positions of the first few chains


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


Hook = Callable[[Progress], None]
Sink = Callable[[int, torch.Tensor, torch.Tensor], None]  # (first step index, z (B, n, D), probs (B, n, K))
StopFn = Callable[[], bool]


def initial_positions(posterior: BayesTrExPosterior, config: SamplerConfig,
                      generator: torch.Generator) -> torch.Tensor:
    """Starting latent codes (B, D) for the configured init mode.

    A generator with its own prior (``sample_prior``, e.g. the scene world) always starts
    from prior draws: its codes are not Gaussian and it has no gradients to optimise with.
    """
    if config.init == "classes":
        if not isinstance(posterior.generator, ClassConditionalPrior):
            raise ProbeError("init='classes' starts chains in the prior's class components: this generator's prior "
                             "has none (a density autoencoder's has; use init='prior' or 'optimize')")
        weights = posterior.targets.soft_labels()
        return posterior.generator.sample_for_targets(weights, generator).to(posterior.device)
    if isinstance(posterior.generator, StructuredPrior):
        return posterior.generator.sample_prior(posterior.num_chains, generator).to(posterior.device)
    shape = (posterior.num_chains, posterior.latent_dim)
    if config.init == "uniform":
        return (torch.rand(shape, generator=generator) * 4 - 2).to(posterior.device)
    z = torch.randn(shape, generator=generator).to(posterior.device)
    if config.init == "prior" or config.init_steps == 0:
        return z
    soft = posterior.targets.soft_labels().to(posterior.device)
    z = z.requires_grad_(True)
    optimiser = torch.optim.Adam([z], lr=0.05)
    with torch.enable_grad():
        for _ in range(config.init_steps):
            probs = posterior.probabilities(z)
            cross_entropy = -(soft * probs.clamp_min(1e-8).log()).sum(1)
            loss = (SURROGATE_SHARPNESS * cross_entropy + 0.5 * z.pow(2).sum(1)).sum()
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
    return z.detach()


def _changed_sigma(config: SamplerConfig, posterior: BayesTrExPosterior, iteration: int,
                   sigma: float) -> float | None:
    """The annealed σ for a warm-up iteration when it differs from ``sigma`` (the state must then be
    re-evaluated), else None."""
    if iteration >= config.num_warmup:
        return None
    new_sigma = _sigma_schedule(config, posterior.sigma, iteration)
    return new_sigma if new_sigma != sigma else None


def _sigma_schedule(config: SamplerConfig, sigma: float, iteration: int) -> float:
    if config.anneal_sigma_from is None or config.anneal_sigma_from <= sigma or config.num_warmup == 0:
        return sigma
    fraction = min(1.0, iteration / max(1.0, 0.5 * config.num_warmup))
    return float(config.anneal_sigma_from * (sigma / config.anneal_sigma_from) ** fraction)


class _Recorder:
    """The part of a run loop that kernels share: keep post-warm-up samples, flush them to the
    sink, report to the hook and poll for cancellation every ``report_every`` iterations."""

    def __init__(self, posterior: BayesTrExPosterior, config: SamplerConfig, hook: Hook | None,
                 sink: Sink | None, should_stop: StopFn | None, chains: int, dim: int, started: float) -> None:
        self.posterior, self.config = posterior, config
        self.hook, self.sink, self.should_stop = hook, sink, should_stop
        self.chains, self.dim = chains, dim
        self.total = config.num_warmup + config.num_samples
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
        if iteration >= self.config.num_warmup:
            self.kept["z"].append(state.position.cpu())
            self.kept["probs"].append(state.aux.cpu())
            self.kept["logp"].append(state.logdensity.cpu())
            self.kept["accept"].append(acceptance_rate.cpu())
            self.kept["divergent"].append(divergent.cpu())

    def report(self, iteration: int, state, step_size: torch.Tensor, sigma: float) -> bool:
        """Flush, report and poll when a report is due; returns whether the run must stop."""
        last = iteration == self.total - 1
        if (iteration + 1) % self.config.report_every and not last:
            return False
        kept = self.kept
        if self.sink is not None and len(kept["z"]) > self.flushed:
            self.sink(self.flushed, torch.stack(kept["z"][self.flushed:], 1),
                      torch.stack(kept["probs"][self.flushed:], 1))
            self.flushed = len(kept["z"])
        if self.hook is not None:
            done = (iteration % self.config.report_every) + 1
            stage = "warmup" if iteration < self.config.num_warmup else "sampling"
            self.hook(Progress(stage, iteration + 1, self.total, self.window_accept / done, step_size.cpu(),
                               state.aux.cpu(), state.logdensity.cpu(), state.position.cpu(), sigma,
                               self.divergences.clone(), _preview(self.posterior, state.position)))
        self.window_accept.zero_()
        self.cancelled = self.should_stop is not None and not last and bool(self.should_stop())
        return self.cancelled

    def result(self, step_size: torch.Tensor, evaluations: int, density_evaluations: int = 0,
               independence_acceptance: torch.Tensor | None = None) -> ChainResult:
        def stack(key: str, shape: tuple) -> torch.Tensor:
            return torch.stack(self.kept[key], 1) if self.kept[key] else torch.zeros(shape)

        chains, dim, num_classes = self.chains, self.dim, self.posterior.targets.num_classes
        return ChainResult(
            positions=stack("z", (chains, 0, dim)),
            probs=stack("probs", (chains, 0, num_classes)),
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

    At the end of warm-up it fits each target's independence proposal to the second half of
    warm-up (σ has reached its target by then); after warm-up every HMC transition is followed by
    ``config.independence_moves`` independence Metropolis-Hastings proposals (:mod:`~probe_core.sampling.imh`).

    Parameters
    ----------
    posterior : BayesTrExPosterior
    config : SamplerConfig
        ``num_warmup``, ``target_accept``, ``max_integration_steps`` (each step draws L uniformly
        from [L/2, L]: jittered trajectories), ``independence_moves``, ``seed``.
    step_size : torch.Tensor, shape (B,)
    inverse_mass : torch.Tensor, shape (B, D)
    """

    def __init__(self, posterior: BayesTrExPosterior, config: SamplerConfig, step_size: torch.Tensor,
                 inverse_mass: torch.Tensor, gradient_evaluations: int = 0) -> None:
        self.posterior, self.config = posterior, config
        self.step_size, self.inverse_mass = step_size, inverse_mass
        self.gradient_evaluations = gradient_evaluations
        self.density_evaluations = 0
        self.averaging = adaptation.dual_averaging_init(step_size)
        self.welford = adaptation.welford_init(tuple(inverse_mass.shape), inverse_mass.device)
        self.windows = set(adaptation.mass_matrix_windows(config.num_warmup))
        jumps = config.independence_moves > 0 and not isinstance(posterior.generator, StructuredPrior)
        self.high_steps = config.max_integration_steps or (JUMPING_INTEGRATION_STEPS if jumps
                                                           else DEFAULT_INTEGRATION_STEPS)
        self.low_steps = max(1, self.high_steps // 2)
        self.warmup_draws: list[torch.Tensor] | None = [] if jumps else None
        self.proposal: imh.MixtureProposal | None = None
        self.jumps_accepted = torch.zeros(len(step_size))
        self.jumps_proposed = 0

    def _logdensity_fn(self, sigma: float):
        def fn(z):
            self.gradient_evaluations += 1
            return self.posterior.logdensity_and_grad(z, sigma=sigma)
        return fn

    def _density_fn(self, sigma: float):
        def fn(z):
            self.density_evaluations += 1
            with torch.no_grad():
                return self.posterior.logdensity(z, sigma=sigma)
        return fn

    def init(self, position: torch.Tensor, sigma: float) -> hmc.HMCState:
        return hmc.init(position, self._logdensity_fn(sigma))

    def step(self, rng: torch.Generator, state: hmc.HMCState, sigma: float) -> tuple[hmc.HMCState, TransitionInfo]:
        steps = int(torch.randint(self.low_steps, self.high_steps + 1, (1,), generator=rng))
        state, info = hmc.step(rng, state, self._logdensity_fn(sigma), self.step_size, self.inverse_mass, steps)
        if self.proposal is not None:
            moved = torch.zeros_like(self.jumps_accepted, dtype=torch.bool)
            for _ in range(self.config.independence_moves):
                state, jump = imh.step(rng, state, self._density_fn(sigma), self.proposal)
                moved |= jump.is_accepted.cpu()
                self.jumps_accepted += jump.is_accepted.float().cpu()
                self.jumps_proposed += 1
            if moved.any():  # the gradient of a chain that jumped is stale
                state = hmc.init(state.position, self._logdensity_fn(sigma))
        return state, TransitionInfo(info.acceptance_rate, info.is_divergent)

    def adapt(self, iteration: int, state: hmc.HMCState, info: TransitionInfo) -> None:
        self.averaging = adaptation.dual_averaging_update(self.averaging, info.acceptance_rate,
                                                          self.config.target_accept)
        self.step_size = self.averaging.log_step.exp()
        self.welford = adaptation.welford_update(self.welford, state.position)
        if iteration + 1 in self.windows:
            self.inverse_mass = adaptation.welford_variance(self.welford)
            self.welford = adaptation.welford_init(tuple(self.inverse_mass.shape), self.inverse_mass.device)
            self.averaging = adaptation.restart_dual_averaging(self.averaging)
        if self.warmup_draws is not None and iteration >= self.config.num_warmup // 2:
            self.warmup_draws.append(state.position.cpu())
        if iteration + 1 == self.config.num_warmup:
            self.step_size = self.averaging.log_step_average.exp()
            if self.warmup_draws:
                proposal = adaptation.fit_mixture_proposal(torch.stack(self.warmup_draws, 1),
                                                           self.posterior.targets.target_index, seed=self.config.seed)
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
    """Random-walk Metropolis with per-chain proposal scales tuned by Robbins-Monro towards ``target_accept``.

    A generator with a :class:`~probe_core.sampling.protocols.StructuredPrior` brings its own proposal at
    that scale; otherwise steps are Gaussian.
    """

    def __init__(self, posterior: BayesTrExPosterior, chains: int, initial_scale: float,
                 target_accept: float = 0.234) -> None:
        self.posterior, self.target_accept = posterior, target_accept
        self.log_scale = torch.full((chains, 1), math.log(initial_scale))
        self.gradient_evaluations = 0  # counts density evaluations: no gradients are used
        self.density_evaluations = 0
        self.independence_acceptance = None
        structured = isinstance(posterior.generator, StructuredPrior)
        self.make_proposal = posterior.generator.proposal if structured else rwm.GaussianProposal
        self.no_divergence = torch.zeros(chains, dtype=torch.bool)

    def _logdensity_fn(self, sigma: float):
        def fn(z):
            self.gradient_evaluations += 1
            return self.posterior.logdensity(z, sigma=sigma)
        return fn

    def init(self, position: torch.Tensor, sigma: float) -> rwm.RWMState:
        return rwm.init(position, self._logdensity_fn(sigma))

    def step(self, rng: torch.Generator, state: rwm.RWMState, sigma: float) -> tuple[rwm.RWMState, TransitionInfo]:
        proposal = self.make_proposal(self.log_scale.exp().to(state.position.device))
        state, info = rwm.step(rng, state, self._logdensity_fn(sigma), proposal)
        return state, TransitionInfo(info.acceptance_rate, self.no_divergence)

    def adapt(self, iteration: int, state: rwm.RWMState, info: TransitionInfo) -> None:
        self.log_scale += (info.acceptance_rate.cpu().unsqueeze(1) - self.target_accept) / math.sqrt(iteration + 1)

    @property
    def scale(self) -> torch.Tensor:
        return self.log_scale.exp().squeeze(1)


def run_chains(posterior: BayesTrExPosterior, config: SamplerConfig, adapter: WarmupAdapter,
               initial: torch.Tensor, rng: torch.Generator, hook: Hook | None = None, sink: Sink | None = None,
               should_stop: StopFn | None = None, started: float | None = None) -> ChainResult:
    """The one sampling driver: warm-up (σ annealing, the adapter's tuning), then sampling.

    Runs any kernel through its adapter; keeps post-warm-up samples, streams them to ``sink``,
    reports to ``hook`` and polls ``should_stop`` every ``config.report_every`` iterations.
    Cancellation ends the run early with what was kept.
    """
    started = time.perf_counter() if started is None else started
    chains, dim = initial.shape
    sigma = _sigma_schedule(config, posterior.sigma, 0)
    state = adapter.init(initial, sigma)
    recorder = _Recorder(posterior, config, hook, sink, should_stop, chains, dim, started)
    for iteration in range(recorder.total):
        if (new_sigma := _changed_sigma(config, posterior, iteration, sigma)) is not None:
            sigma = new_sigma
            state = adapter.init(state.position, sigma)
        state, info = adapter.step(rng, state, sigma)
        recorder.record(iteration, state, info.acceptance_rate, info.is_divergent)
        if iteration < config.num_warmup:
            adapter.adapt(iteration, state, info)
        if recorder.report(iteration, state, adapter.scale, sigma):
            break
    return recorder.result(adapter.scale, adapter.gradient_evaluations, adapter.density_evaluations,
                           adapter.independence_acceptance)


def run_hmc(posterior: BayesTrExPosterior, config: SamplerConfig = SamplerConfig(), hook: Hook | None = None,
            sink: Sink | None = None, should_stop: StopFn | None = None,
            initial: torch.Tensor | None = None) -> ChainResult:
    """Batched HMC with per-chain warm-up adaptation (:class:`HMCWindowAdapter`); returns all kept samples.

    Starting points come from ``initial`` or ``config.init``; ``smc`` also brings each particle's
    step size and mass matrix. Cancellation (``should_stop`` returning True, checked at every
    report) ends the run early; what was kept so far is returned (and was already given to the sink).
    """
    started = time.perf_counter()
    rng = torch.Generator().manual_seed(config.seed)
    evaluations = 0
    step_size = inverse_mass = None
    if initial is None and config.init == "smc":
        particles = run_smc(posterior, SMCConfig(seed=config.seed), should_stop=should_stop)
        initial, step_size, inverse_mass = particles.positions, particles.step_size, particles.inverse_mass
        evaluations += particles.gradient_evaluations
    if initial is None and config.init == "optimize":
        evaluations += config.init_steps  # each Adam step is one batched forward+backward
    position = initial if initial is not None else initial_positions(posterior, config, rng)
    chains, dim = position.shape
    if step_size is None:
        step_size = torch.full((chains,), config.initial_step_size, device=position.device)
        inverse_mass = torch.ones(chains, dim, device=position.device)
    adapter = HMCWindowAdapter(posterior, config, step_size, inverse_mass, evaluations)
    return run_chains(posterior, config, adapter, position, rng, hook, sink, should_stop, started)


def run_rwm(posterior: BayesTrExPosterior, config: SamplerConfig = SamplerConfig(), hook: Hook | None = None,
            sink: Sink | None = None, should_stop: StopFn | None = None,
            initial: torch.Tensor | None = None, target_accept: float = 0.234) -> ChainResult:
    """Random-walk Metropolis with per-chain scales adapted in warm-up (:class:`RWMScaleAdapter`; no gradients).

    For generators that cannot be differentiated. Starting points come from
    ``config.init`` as for HMC, except that ``optimize`` falls back to prior draws.
    """
    started = time.perf_counter()
    rng = torch.Generator().manual_seed(config.seed)
    if initial is None:
        fallback = config if config.init != "optimize" else SamplerConfig(init="prior", seed=config.seed)
        initial = initial_positions(posterior, fallback, rng)
    adapter = RWMScaleAdapter(posterior, len(initial), config.rwm_initial_scale, target_accept)
    return run_chains(posterior, config, adapter, initial, rng, hook, sink, should_stop, started)


def run_pyro_nuts(posterior: BayesTrExPosterior, num_warmup: int = 1000, num_samples: int = 1000, seed: int = 0,
                  hook: Callable[[int], None] | None = None) -> ChainResult:
    """The paper's reference sampler: Pyro NUTS with default settings, one chain, z0 ~ Uniform(-2, 2).

    ``posterior`` must hold exactly one chain (see :meth:`BayesTrExPosterior.for_target`). The result's
    ``gradient_evaluations`` counts the model's evaluations during the run: Pyro evaluates the model once
    per potential-energy gradient (each leapfrog step), plus a few times to set up.
    """
    import pyro
    from pyro.infer import MCMC, NUTS

    if posterior.num_chains != 1:
        raise ProbeError("the Pyro NUTS reference runs one chain; use posterior.for_target(target)")
    started = time.perf_counter()
    pyro.set_rng_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    initial = (torch.rand(1, posterior.latent_dim, generator=generator) * 4 - 2).to(posterior.device)
    evaluations = 0

    def counted_model(*args, **kwargs):
        nonlocal evaluations
        evaluations += 1
        return posterior.model(*args, **kwargs)

    kernel = NUTS(counted_model, target_accept_prob=0.8, adapt_step_size=True, adapt_mass_matrix=True,
                  max_tree_depth=10)
    hook_fn = None if hook is None else (lambda kernel, params, stage, i: hook(i))
    mcmc = MCMC(kernel, num_samples=num_samples, warmup_steps=num_warmup, initial_params={"z": initial},
                num_chains=1, disable_progbar=True, hook_fn=hook_fn)
    mcmc.run()
    z = mcmc.get_samples()["z"].reshape(num_samples, 1, posterior.latent_dim).transpose(0, 1)  # (1, S, D)
    with torch.no_grad():
        logp, probs = posterior.for_target(posterior.targets.targets[0], num_samples).logdensity(z[0])
    return ChainResult(
        positions=z.cpu(), probs=probs.unsqueeze(0).cpu(), logdensity=logp.unsqueeze(0).cpu(),
        acceptance=torch.full((1, num_samples), float("nan")), divergent=torch.zeros(1, num_samples, dtype=torch.bool),
        step_size=torch.tensor([float(kernel.step_size)]), wall_seconds=time.perf_counter() - started,
        gradient_evaluations=evaluations,
    )
