"""Samplers for the Bayes-TrEx posterior, in the style of BlackJAX and Pyro's MCMC.

- :mod:`~probe_core.sampling.posterior`: the one Pyro model of the posterior and its batched log density;
- :mod:`~probe_core.sampling.hmc`, :mod:`~probe_core.sampling.rwm`: pure ``init``/``step`` kernels over
  batched state (chains are the leading dimension); :mod:`~probe_core.sampling.imh`: independence
  Metropolis-Hastings jumps from a per-chain Gaussian mixture;
- :mod:`~probe_core.sampling.adaptation`: dual averaging, Welford variances, Stan's windows, the mixture
  fitted to warm-up draws;
- :mod:`~probe_core.sampling.runner`: the one driver (:func:`run_chains`) and the warm-up adapters;
  ``run_hmc``, ``run_rwm`` and the Pyro NUTS reference;
- :mod:`~probe_core.sampling.smc`: tempered SMC that finds starting points for hard targets.

Diagnostics (ESS, R-hat) are in :mod:`probe_core.sampling.diagnostics`.
"""

from probe_core.sampling.posterior import BayesTrExPosterior
from probe_core.sampling.runner import ChainResult, Progress, SamplerConfig, run_hmc, run_pyro_nuts, run_rwm

__all__ = ["BayesTrExPosterior", "ChainResult", "Progress", "SamplerConfig", "run_hmc", "run_pyro_nuts", "run_rwm"]
