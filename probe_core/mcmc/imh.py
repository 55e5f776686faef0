"""Independence Metropolis-Hastings with a per-chain Gaussian-mixture proposal, as pure functions.

A proposal z' ~ q that does not depend on the current state is accepted with probability
min(1, [π(z') / q(z')] / [π(z) / q(z)]), so the chain keeps π whatever q is, as long as q is fixed
while samples are kept. Fitted to the pooled warm-up draws of all chains of a target (see
:func:`probe_core.mcmc.adaptation.fit_mixture_proposal`), q lets a chain jump between the
posterior's separate modes, which local HMC moves with σ = 0.05 cross rarely. Chains are the
leading dimension; each chain has its own mixture (in practice, its target's).
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import torch

# logdensity_fn(z (B, D)) -> (logp (B,), aux (B, ...)): the density alone, no gradient
LogDensity = Callable[[torch.Tensor], "tuple[torch.Tensor, torch.Tensor]"]


class MixtureProposal(NamedTuple):
    """A Gaussian mixture per chain; unused components carry log weight -inf."""

    loc: torch.Tensor  # (B, K, D)
    scale_tril: torch.Tensor  # (B, K, D, D) Cholesky factors of the covariances
    log_weights: torch.Tensor  # (B, K), normalised over K

    def log_prob(self, z: torch.Tensor) -> torch.Tensor:
        """log q(z) per chain: z (B, D) -> (B,)."""
        components = torch.distributions.MultivariateNormal(self.loc, scale_tril=self.scale_tril, validate_args=False)
        return torch.logsumexp(self.log_weights + components.log_prob(z.unsqueeze(1)), dim=1)

    def sample(self, generator: torch.Generator) -> torch.Tensor:
        """One draw per chain, (B, D)."""
        chains, _, dim = self.loc.shape
        device = self.loc.device
        chosen = torch.multinomial(self.log_weights.exp().cpu(), 1, generator=generator).squeeze(1).to(device)
        rows = torch.arange(chains, device=device)
        noise = torch.randn(chains, dim, 1, generator=generator).to(device)
        return self.loc[rows, chosen] + (self.scale_tril[rows, chosen] @ noise).squeeze(2)


class IMHInfo(NamedTuple):
    """Per-transition diagnostics."""

    acceptance_rate: torch.Tensor  # (B,) min(1, importance-weight ratio)
    is_accepted: torch.Tensor  # (B,) bool


def step(generator: torch.Generator, state: NamedTuple, logdensity_fn: LogDensity,
         proposal: MixtureProposal) -> tuple[NamedTuple, IMHInfo]:
    """One independence Metropolis-Hastings transition for every chain.

    Parameters
    ----------
    generator : torch.Generator
        Source of randomness (proposals and accept draws).
    state : NamedTuple
        Any kernel state with ``position`` (B, D), ``logdensity`` (B,) and ``aux`` (B, ...); the
        returned state is ``state._replace(...)`` of those three. Other fields (HMC's gradient)
        are stale where a chain moved: the caller refreshes them.
    logdensity_fn : callable
        z (B, D) -> (logp (B,), aux (B, ...)).
    proposal : MixtureProposal
        Fixed while samples are kept, or the chain does not keep π.

    Returns
    -------
    (state, IMHInfo)
    """
    candidate = proposal.sample(generator)
    logdensity, aux = logdensity_fn(candidate)
    log_ratio = (logdensity - proposal.log_prob(candidate)) - (state.logdensity - proposal.log_prob(state.position))
    log_ratio = torch.where(torch.isnan(log_ratio), torch.full_like(log_ratio, -math.inf), log_ratio)
    acceptance_rate = torch.exp(torch.clamp(log_ratio, max=0.0))
    uniform = torch.rand(acceptance_rate.shape, generator=generator).to(acceptance_rate.device)
    accepted = uniform < acceptance_rate
    new_state = state._replace(
        position=torch.where(accepted.unsqueeze(1), candidate, state.position).detach(),
        logdensity=torch.where(accepted, logdensity, state.logdensity),
        aux=torch.where(accepted.view(-1, *([1] * (aux.ndim - 1))), aux, state.aux),
    )
    return new_state, IMHInfo(acceptance_rate, accepted)
