"""Generic batched MCMC, in the style of BlackJAX (pure kernels) and Pyro's MCMC (adaptation and the run loop apart).

Nothing here knows Bayes-TrEx, classifiers or generators: it samples any batched log density over positions
(B, D), chains as the leading dimension (:class:`~probe_core.mcmc.driver.ChainDensity`).

- :mod:`~probe_core.mcmc.hmc`, :mod:`~probe_core.mcmc.rwm`: pure ``init``/``step`` kernels over batched state;
  :mod:`~probe_core.mcmc.imh`: independence Metropolis-Hastings jumps from a per-chain Gaussian mixture;
- :mod:`~probe_core.mcmc.adaptation`: dual averaging, Welford variances, Stan's windows, the mixture fitted to
  warm-up draws;
- :mod:`~probe_core.mcmc.driver`: the one run loop (:func:`~probe_core.mcmc.driver.run_chains`) and the warm-up
  adapters that bind a kernel to a run;
- :mod:`~probe_core.mcmc.diagnostics`: ESS and R-hat (``pyro.ops.stats``).

Bayes-TrEx's posterior, its targets and its chain starts live one layer up, in :mod:`probe_core.sampling`.
"""
