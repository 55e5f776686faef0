"""How well chains mixed: ESS and split R-hat (pyro.ops.stats) and the poor-mixing rule shown with results.

Kept apart from the samplers and from Bayes-TrEx, so the kernels' tests, the summaries, the live
trace and the pages all read one definition.
"""

from __future__ import annotations

import math

import torch


def effective_sample_size(positions: torch.Tensor) -> float:
    """Minimum over latent dimensions of the ESS of chains (C, S, D) (pyro.ops.stats)."""
    from pyro.ops.stats import effective_sample_size as ess

    if positions.shape[1] < 4:
        return float("nan")
    return float(ess(positions.double(), chain_dim=0, sample_dim=1).min())


def split_rhat(positions: torch.Tensor) -> float:
    """Maximum over latent dimensions of the split R-hat of chains (C, S, D) (pyro.ops.stats)."""
    from pyro.ops.stats import split_gelman_rubin

    if positions.shape[1] < 4:
        return float("nan")
    return float(split_gelman_rubin(positions.double(), chain_dim=0, sample_dim=1).max())


RHAT_LIMIT = 1.1
ESS_FLOOR = 100
POOR_MIXING_NOTE = (
    "poor mixing (split R-hat > {rhat} or ESS < {ess}): many chains, each stuck near its own start. The hits are "
    "valid inputs at the target, but not a sample of the posterior: do not read their spread as its spread."
).format(rhat=RHAT_LIMIT, ess=ESS_FLOOR)


def mixing_ok(summary: dict) -> bool:
    """Whether a target's chains mixed: split R-hat at most 1.1 and ESS at least 100 (NaN counts as not judged)."""
    rhat, ess = summary.get("rhat_max", float("nan")), summary.get("ess_min", float("nan"))
    return not ((not math.isnan(rhat) and rhat > RHAT_LIMIT) or (not math.isnan(ess) and ess < ESS_FLOOR))
