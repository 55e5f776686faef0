"""Bayes-TrEx's posterior over a generator's codes, its targets and its sampling runs.

- :mod:`~probe_core.sampling.targets`: the target kinds (high confidence, ambiguous, uniform, vectors, paths)
  and :class:`~probe_core.sampling.targets.TargetSpec`, their one parser;
- :mod:`~probe_core.sampling.posterior`: the one Pyro model of the posterior and its batched log density (a
  :class:`~probe_core.mcmc.driver.ChainDensity`);
- :mod:`~probe_core.sampling.protocols`: what a generator declares it can do;
- :mod:`~probe_core.sampling.runner`: where chains start, ``run_hmc``, ``run_rwm`` and the Pyro NUTS reference;
- :mod:`~probe_core.sampling.smc`: tempered SMC that finds starting points for hard targets.

The kernels, their adaptation, the run loop and the diagnostics are generic: :mod:`probe_core.mcmc`.
"""

from probe_core.sampling.posterior import BayesTrExPosterior
from probe_core.sampling.runner import SamplerConfig, run_hmc, run_pyro_nuts, run_rwm

__all__ = ["BayesTrExPosterior", "SamplerConfig", "run_hmc", "run_pyro_nuts", "run_rwm"]
