"""The Bayes-TrEx posterior p(z | u = u*) ∝ N(z; 0, I) · Π_s N(u*_s; u_s(f(g(z))), σ²), as a Pyro model.

The model is written once over a plate of chains; the batched log density used
by our own kernels is read off the same model with ``poutine`` (so the reference
Pyro NUTS and the fast sampler target exactly the same density).
"""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from torch import nn

from probe_core.errors import ProbeError
from probe_core.mcmc import rwm
from probe_core.sampling.protocols import StructuredPrior
from probe_core.sampling.targets import DEFAULT_SIGMA, Target, TargetBatch

# Sharpness of the smooth surrogate (cross-entropy to the target) that initialisation and SMC's
# first stages climb before the σ-likelihood takes over: steep enough to reach the target
# region in a few hundred steps, smooth enough for large steps.
SURROGATE_SHARPNESS = 30.0

class BayesTrExPosterior:
    """Posterior over latent codes for a batch of chains and their targets.

    Parameters
    ----------
    classifier : nn.Module
        Images (B, C, H, W) -> probabilities (B, K).
    generator : nn.Module
        ``latent_dim`` and ``decode(z)`` with z (B, D) -> images (B, C, H, W).
    targets : TargetBatch
        Which target each chain serves.
    sigma : float
        Likelihood scale σ (default 0.05, as in the paper).
    """

    def __init__(self, classifier: nn.Module, generator: nn.Module, targets: TargetBatch,
                 sigma: float = DEFAULT_SIGMA) -> None:
        if not sigma > 0:
            raise ProbeError(f"sigma must be positive, got {sigma}")
        self.classifier = classifier.eval()
        self.generator = generator.eval()
        self.targets = targets
        self.sigma = float(sigma)
        self.latent_dim = int(generator.latent_dim)
        self._standard_normal = None  # N(0, I), built once: every log-density evaluation asks for it
        for module in (self.classifier, self.generator):
            for parameter in module.parameters():
                parameter.requires_grad_(False)

    @property
    def num_chains(self) -> int:
        return self.targets.num_chains

    @property
    def device(self) -> torch.device:
        parameter = next(self.generator.parameters(), None)
        return parameter.device if parameter is not None else torch.device("cpu")

    def probabilities(self, z: torch.Tensor) -> torch.Tensor:
        """f(g(z)): (B, D) -> (B, K)."""
        return self.classifier(self.generator.decode(z))

    def prior(self):
        """p(z): N(0, I), or the generator's own prior when it has one (e.g. the scene world's)."""
        if isinstance(self.generator, StructuredPrior):
            return self.generator.prior_distribution(self.num_chains)
        device = self.device
        if self._standard_normal is None or self._standard_normal.mean.device != device:
            self._standard_normal = dist.Normal(torch.zeros(self.latent_dim, device=device), 1.0,
                                                validate_args=False).to_event(1)
        return self._standard_normal

    def model(self, sigma: float | None = None, temperature: float = 1.0) -> torch.Tensor:
        """The Pyro model: z ~ p(z) per chain (:meth:`prior`), each target's sites observed at u*.

        ``temperature`` scales the likelihood (β in tempered sampling; 1 is the posterior).
        """
        sigma = self.sigma if sigma is None else sigma
        with pyro.plate("chains", self.num_chains):
            z = pyro.sample("z", self.prior())
            probs = pyro.deterministic("probs", self.probabilities(z), event_dim=1)
            u = self.targets.statistics(probs)
            observed = self.targets.observed.to(u)
            # No argument validation: a leapfrog step that overflows gives NaN confidences, which must
            # reach the kernel as a -inf/NaN density (a rejected, divergent proposal), not an exception.
            likelihood = dist.Normal(u, sigma, validate_args=False).mask(self.targets.mask.to(u.device)).to_event(1)
            with poutine.scale(scale=temperature):
                pyro.sample("u", likelihood, obs=observed)
        return probs

    def log_terms(self, z: torch.Tensor, sigma: float | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Log prior (B,), log likelihood (B,) and confidences (B, K), read from the Pyro model."""
        trace = poutine.trace(poutine.condition(self.model, data={"z": z})).get_trace(sigma, 1.0)
        site = trace.nodes["u"]
        return trace.nodes["z"]["fn"].log_prob(z), site["fn"].log_prob(site["value"]), trace.nodes["probs"]["value"]

    def logdensity(self, z: torch.Tensor, sigma: float | None = None,
                   temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
        """Unnormalised log posterior per chain, read from the Pyro model.

        Parameters
        ----------
        z : torch.Tensor
            Shape (num_chains, D).

        Returns
        -------
        logp : torch.Tensor
            Shape (num_chains,).
        probs : torch.Tensor
            The classifier's confidences, shape (num_chains, K).
        """
        log_prior, log_likelihood, probs = self.log_terms(z, sigma)
        return log_prior + temperature * log_likelihood, probs

    def logdensity_and_grad(self, z: torch.Tensor, sigma: float | None = None,
                            temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Log density (B,), its gradient (B, D) and the confidences (B, K)."""
        with torch.enable_grad():
            z = z.detach().requires_grad_(True)
            logp, probs = self.logdensity(z, sigma, temperature)
            (grad,) = torch.autograd.grad(logp.sum(), z)
        return logp.detach(), grad, probs.detach()

    def jump_groups(self) -> torch.Tensor | None:
        """Each chain's target index (B,): chains of one target share an independence proposal. None for a
        generator with its own prior (the scene world's codes are not Euclidean)."""
        return None if isinstance(self.generator, StructuredPrior) else self.targets.target_index

    def random_walk_proposal(self, scale: torch.Tensor) -> rwm.Proposal:
        """Random-walk steps at per-chain scales (B, 1): the generator's own proposal where it has its own prior,
        Gaussian steps otherwise."""
        if isinstance(self.generator, StructuredPrior):
            return self.generator.proposal(scale)
        return rwm.GaussianProposal(scale)

    def for_target(self, target: Target, num_chains: int = 1) -> "BayesTrExPosterior":
        """The same posterior restricted to one target (e.g. for the one-chain Pyro NUTS reference)."""
        return BayesTrExPosterior(self.classifier, self.generator, TargetBatch([target], num_chains), self.sigma)
