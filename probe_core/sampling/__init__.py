"""Samplers for the Bayes-TrEx posterior: pure kernels, adaptation and run loops."""

from probe_core.sampling.posterior import BayesTrExPosterior
from probe_core.sampling.runner import ChainResult, Progress, SamplerConfig, run_hmc, run_pyro_nuts, run_rwm

__all__ = ["BayesTrExPosterior", "ChainResult", "Progress", "SamplerConfig", "run_hmc", "run_pyro_nuts", "run_rwm"]
