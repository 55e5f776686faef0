"""Bayes-TrEx's sampling runs: where chains start, and HMC, random-walk Metropolis and the Pyro NUTS reference
over a :class:`~probe_core.sampling.posterior.BayesTrExPosterior`.

The run loop, the kernels and their warm-up adapters are generic and live one layer down, in
:mod:`probe_core.mcmc`; this module adds what only the posterior knows: starts from the targets (tempered SMC,
a surrogate optimisation, the prior's class components) and the decoded preview of live views.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import torch

from probe_core.errors import ProbeError
from probe_core.mcmc.driver import (
    ChainResult,
    ChainSettings,
    HMCWindowAdapter,
    RWMScaleAdapter,
    Sink,
    run_chains,
)
from probe_core.progress import Reporter
from probe_core.sampling.posterior import SURROGATE_SHARPNESS, BayesTrExPosterior
from probe_core.sampling.protocols import ClassConditionalPrior, StructuredPrior
from probe_core.sampling.smc import SMCConfig, run_smc

INIT_MODES = ("smc", "optimize", "prior", "uniform", "classes")
PREVIEW_CHAINS = 8
# A Bayes-TrEx run's default length, written once (bayestrex.SAMPLER_DEFAULTS and the run settings read these).
DEFAULT_CHAINS = 64
DEFAULT_WARMUP = 300
DEFAULT_SAMPLES = 300


@dataclass(frozen=True)
class SamplerConfig(ChainSettings):
    """Settings of a Bayes-TrEx sampling run: the run loop's (:class:`~probe_core.mcmc.driver.ChainSettings`:
    lengths, HMC's trajectories and jumps, σ annealing, seed, reports) and where chains start.

    Parameters
    ----------
    init : {"smc", "optimize", "prior", "uniform", "classes"}
        Starting points: particles of the surrogate-bridged tempered SMC (with their step
        sizes and mass matrices; see :mod:`probe_core.sampling.smc`), a short Adam run on the
        surrogate exp(-A·CE(soft target)) · prior from prior draws, prior draws,
        Uniform(-2, 2) per dimension as in the paper, or draws from the prior's components of the classes
        each chain's target names (a :class:`~probe_core.sampling.protocols.ClassConditionalPrior`'s).
    init_steps : int
        The surrogate optimisation's Adam steps (``init="optimize"``).

    Independence jumps apply where the generator's codes are Euclidean (not a
    :class:`~probe_core.sampling.protocols.StructuredPrior`): their proposal is fitted per target.
    """

    num_warmup: int = DEFAULT_WARMUP
    num_samples: int = DEFAULT_SAMPLES
    init: str = "optimize"
    init_steps: int = 150

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.init not in INIT_MODES:
            raise ProbeError(f"init must be one of {INIT_MODES}, got {self.init!r}")


def _preview(posterior: BayesTrExPosterior) -> Callable[[torch.Tensor], torch.Tensor]:
    """Decoded images (n, C, H, W) of the first few chains' positions (B, D), for live views."""
    return lambda position: posterior.generator.decode(position[:PREVIEW_CHAINS].to(posterior.device))


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


def run_hmc(posterior: BayesTrExPosterior, config: SamplerConfig = SamplerConfig(),
            reporter: Reporter | None = None, sink: Sink | None = None,
            initial: torch.Tensor | None = None) -> ChainResult:
    """Batched HMC with per-chain warm-up adaptation (:class:`HMCWindowAdapter`); returns all kept samples.

    Starting points come from ``initial`` or ``config.init``; ``smc`` also brings each particle's
    step size and mass matrix. ``reporter`` is told the progress (:func:`~probe_core.mcmc.driver.run_chains`);
    a stop (its ``report`` raising) ends the run early, and what was kept so far is returned (and was already
    given to the sink).
    """
    started = time.perf_counter()
    rng = torch.Generator().manual_seed(config.seed)
    evaluations = 0
    step_size = inverse_mass = None
    if initial is None and config.init == "smc":
        particles = run_smc(posterior, SMCConfig(seed=config.seed), reporter=reporter)
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
    return run_chains(posterior, config, adapter, position, rng, reporter, sink, started, preview=_preview(posterior))


def run_rwm(posterior: BayesTrExPosterior, config: SamplerConfig = SamplerConfig(),
            reporter: Reporter | None = None, sink: Sink | None = None,
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
    return run_chains(posterior, config, adapter, initial, rng, reporter, sink, started, preview=_preview(posterior))


def run_pyro_nuts(posterior: BayesTrExPosterior, num_warmup: int = 1000, num_samples: int = 1000,
                  seed: int = 0) -> ChainResult:
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
    mcmc = MCMC(kernel, num_samples=num_samples, warmup_steps=num_warmup, initial_params={"z": initial},
                num_chains=1, disable_progbar=True)
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
