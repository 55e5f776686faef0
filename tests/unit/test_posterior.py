"""The Bayes-TrEx posterior read off its Pyro model equals the paper's density written out by hand:
log N(z; 0, I) + Σ_s log N(u*_s; u_s(f(g(z))), σ²) over each chain's own target sites."""

import math

import pyro
import pyro.distributions as dist
import pytest
import torch
from helpers import TinyDecoder
from pyro import poutine
from torch import nn

from probe_core.errors import ProbeError
from probe_core.sampling import BayesTrExPosterior
from probe_core.sampling.targets import TargetBatch, parse_targets

CLASSES = ("a", "b", "c")


class _ShiftedPrior(TinyDecoder):
    """A generator with its own prior (the scene world's protocol): N(3, 0.5²) per dimension."""

    def prior_distribution(self, batch):
        return dist.Normal(torch.full((batch, 2), 3.0), 0.5).to_event(1)

    def sample_prior(self, count, generator):
        return 3.0 + 0.5 * torch.randn(count, 2, generator=generator)

    def proposal(self, scale):
        return lambda rng, position: (position, torch.zeros(len(position)))

    def describe(self):
        return "shifted"


def _posterior(spec="high:a;ambiguous:b,c", chains=3, sigma=0.05, generator_class=TinyDecoder):
    torch.manual_seed(5)
    classifier = nn.Sequential(nn.Flatten(), nn.Linear(16, 3), nn.Softmax(dim=1))
    generator = generator_class()
    return BayesTrExPosterior(classifier, generator, TargetBatch(parse_targets(spec, CLASSES), chains), sigma=sigma)


def _by_hand(posterior, z, sigma, temperature=1.0):
    """The density written out: standard normal prior, Gaussian likelihood of each target's statistics."""
    probs = posterior.classifier(posterior.generator.decode(z))
    log_prior = (-0.5 * z.pow(2) - 0.5 * math.log(2 * math.pi)).sum(1)
    log_likelihood = torch.zeros(len(z))
    for chain, target_index in enumerate(posterior.targets.target_index.tolist()):
        target = posterior.targets.targets[target_index]
        u = target.statistics(probs[chain:chain + 1])[0]
        observed = target.observed()
        log_likelihood[chain] = (-0.5 * ((u - observed) / sigma).pow(2) - math.log(sigma)
                                 - 0.5 * math.log(2 * math.pi)).sum()
    return log_prior + temperature * log_likelihood, log_prior, log_likelihood, probs


def test_the_log_density_is_the_prior_plus_each_chains_own_target_likelihood():
    posterior = _posterior()
    z = torch.randn(6, 2, generator=torch.Generator().manual_seed(0))
    logp, probs = posterior.logdensity(z)
    expected, _, _, expected_probs = _by_hand(posterior, z, 0.05)
    torch.testing.assert_close(logp, expected)
    torch.testing.assert_close(probs, expected_probs)
    # each chain is scored against its own target: the same models with every chain on high:a agree on the
    # first three chains (high:a in both) and not on the last three (ambiguous:b,c here)
    all_high, _ = _posterior("high:a", chains=6).logdensity(z)
    torch.testing.assert_close(all_high[:3], logp[:3])
    assert not torch.allclose(all_high[3:], logp[3:])


@pytest.mark.parametrize("sigma,temperature", [(0.05, 1.0), (0.2, 1.0), (0.05, 0.3)])
def test_sigma_and_temperature_scale_only_the_likelihood(sigma, temperature):
    posterior = _posterior()
    z = torch.randn(6, 2, generator=torch.Generator().manual_seed(1))
    log_prior, log_likelihood, _ = posterior.log_terms(z, sigma)
    expected, expected_prior, expected_likelihood, _ = _by_hand(posterior, z, sigma, temperature)
    torch.testing.assert_close(log_prior, expected_prior)
    torch.testing.assert_close(log_likelihood, expected_likelihood)
    logp, _ = posterior.logdensity(z, sigma, temperature)
    torch.testing.assert_close(logp, expected)


def test_the_default_sigma_is_the_one_the_posterior_was_built_with():
    posterior = _posterior(sigma=0.2)
    z = torch.randn(6, 2, generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(posterior.logdensity(z)[0], _by_hand(posterior, z, 0.2)[0])


def test_the_gradient_is_the_gradient_of_the_hand_written_density():
    posterior = _posterior()
    z = torch.randn(6, 2, generator=torch.Generator().manual_seed(3))
    logp, grad, probs = posterior.logdensity_and_grad(z, 0.1, 0.5)
    by_hand_z = z.clone().requires_grad_(True)
    expected = _by_hand(posterior, by_hand_z, 0.1, 0.5)[0]
    (expected_grad,) = torch.autograd.grad(expected.sum(), by_hand_z)
    torch.testing.assert_close(logp, expected.detach())
    torch.testing.assert_close(grad, expected_grad)
    assert not logp.requires_grad and not grad.requires_grad and not probs.requires_grad and not z.requires_grad


def test_pyro_sees_the_same_joint_density_as_the_fast_kernels():
    posterior = _posterior()
    z = torch.randn(6, 2, generator=torch.Generator().manual_seed(4))
    for temperature in (1.0, 0.25):
        trace = poutine.trace(poutine.condition(posterior.model, data={"z": z})).get_trace(None, temperature)
        torch.testing.assert_close(trace.log_prob_sum(), posterior.logdensity(z, None, temperature)[0].sum())
    assert trace.nodes["probs"]["value"].shape == (6, 3)


def test_a_generator_with_its_own_prior_replaces_the_standard_normal():
    posterior = _posterior(generator_class=_ShiftedPrior)
    z = torch.full((6, 2), 3.0)
    log_prior, _, _ = posterior.log_terms(z)
    torch.testing.assert_close(log_prior, torch.full((6,), 2 * (-math.log(0.5) - 0.5 * math.log(2 * math.pi))))
    with pyro.plate("chains", 6):
        assert pyro.sample("z", posterior.prior()).shape == (6, 2)


def test_overflowing_confidences_give_a_nan_density_not_an_exception():
    posterior = _posterior()
    z = torch.full((6, 2), float("nan"))
    logp, _ = posterior.logdensity(z)
    assert torch.isnan(logp).all()


def test_the_models_are_frozen_and_sigma_must_be_positive():
    posterior = _posterior()
    assert not any(p.requires_grad for module in (posterior.classifier, posterior.generator)
                   for p in module.parameters())
    assert not posterior.classifier.training and not posterior.generator.training
    assert posterior.num_chains == 6 and posterior.latent_dim == 2 and posterior.device == torch.device("cpu")
    for sigma in (0.0, -0.05, float("nan")):
        with pytest.raises(ProbeError, match="sigma must be positive"):
            _posterior(sigma=sigma)


def test_a_posterior_restricted_to_one_target_keeps_its_models_and_sigma():
    posterior = _posterior(sigma=0.1)
    target = posterior.targets.targets[1]
    single = posterior.for_target(target, num_chains=4)
    assert single.targets.targets == [target] and single.num_chains == 4 and single.sigma == 0.1
    assert single.classifier is posterior.classifier and single.generator is posterior.generator
    z = torch.randn(4, 2, generator=torch.Generator().manual_seed(6))
    torch.testing.assert_close(single.logdensity(z)[0], _by_hand(single, z, 0.1)[0])


def test_the_defaults_are_the_untempered_posterior_and_one_chain_per_target():
    posterior = _posterior()
    z = torch.randn(6, 2, generator=torch.Generator().manual_seed(6))
    untempered = _by_hand(posterior, z, 0.05)[0]
    torch.testing.assert_close(posterior.logdensity_and_grad(z)[0], untempered)
    trace = poutine.trace(poutine.condition(posterior.model, data={"z": z})).get_trace()
    torch.testing.assert_close(trace.log_prob_sum(), untempered.sum())
    assert posterior.for_target(posterior.targets.targets[0]).num_chains == 1
