"""The one sampling driver: any kernel through its warm-up adapter, streaming, cancellation, seeds."""

import pytest
import torch
from helpers import TinyDecoder, recording
from torch import nn

from probe_core.mcmc.driver import (
    DEFAULT_INTEGRATION_STEPS,
    JUMPING_INTEGRATION_STEPS,
    HMCWindowAdapter,
    RWMScaleAdapter,
)
from probe_core.progress import CallbackReporter
from probe_core.sampling import BayesTrExPosterior, SamplerConfig, run_hmc, run_rwm
from probe_core.sampling.targets import TargetBatch, parse_targets


def _posterior(chains: int = 6) -> BayesTrExPosterior:
    torch.manual_seed(1)
    classifier = nn.Sequential(nn.Flatten(), nn.Linear(16, 3), nn.Softmax(dim=1))
    targets = TargetBatch(parse_targets("ambiguous:0,1", ("a", "b", "c")), chains)
    return BayesTrExPosterior(classifier, TinyDecoder(), targets, sigma=0.1)


def test_both_kernels_run_through_the_driver_and_are_reproducible_for_a_seed():
    config = SamplerConfig(num_warmup=20, num_samples=10, init="prior", seed=3, report_every=5,
                           max_integration_steps=3)
    for run in (run_hmc, run_rwm):
        first, second = run(_posterior(), config), run(_posterior(), config)
        assert first.positions.shape == (6, 10, 2) and first.probs.shape == (6, 10, 3)
        assert torch.equal(first.positions, second.positions)
        assert first.gradient_evaluations >= 30 and not first.cancelled


def test_the_sink_gets_every_kept_sample_and_the_reporter_every_report():
    kept, reports = [], []
    config = SamplerConfig(num_warmup=10, num_samples=25, init="prior", report_every=10, max_integration_steps=2)
    result = run_hmc(_posterior(), config, reporter=recording(reports),
                     sink=lambda first, z, probs: kept.append((first, z.shape[1])))
    assert sum(count for _, count in kept) == result.positions.shape[1] == 25
    assert [first for first, _ in kept] == [0, 10, 20]  # flushed in order, each from where the last ended
    assert [r.chains.iteration for r in reports] == [10, 20, 30, 35] and reports[0].chains.stage == "warmup"
    assert [r.progress for r in reports] == pytest.approx([10 / 35, 20 / 35, 30 / 35, 1.0])


def test_stopping_keeps_what_was_sampled():
    calls = {"n": 0}

    def stop_after_three_reports():  # a run asked to stop: its reporter's report raises from then on
        calls["n"] += 1
        return calls["n"] >= 3

    config = SamplerConfig(num_warmup=5, num_samples=200, init="prior", report_every=5)
    result = run_rwm(_posterior(), config, reporter=CallbackReporter(should_stop=stop_after_three_reports))
    assert result.cancelled and result.positions.shape[1] == 10


def test_a_report_that_raises_a_stop_ends_the_chains_with_what_was_sampled():
    reports = []
    config = SamplerConfig(num_warmup=5, num_samples=200, init="prior", report_every=5)
    result = run_rwm(_posterior(), config, reporter=recording(reports, lambda report: len(reports) >= 3))
    assert result.cancelled and result.positions.shape[1] == 10
    assert [r.chains.iteration for r in reports] == [5, 10, 15]


def test_adapters_tune_only_what_they_own():
    posterior = _posterior(4)
    config = SamplerConfig(num_warmup=30, num_samples=1, max_integration_steps=2)
    hmc_adapter = HMCWindowAdapter(posterior, config, torch.full((4,), 0.1), torch.ones(4, 2))
    state = hmc_adapter.init(torch.zeros(4, 2), 0.1)
    rng = torch.Generator().manual_seed(0)
    for iteration in range(30):
        state, info = hmc_adapter.step(rng, state, 0.1)
        hmc_adapter.adapt(iteration, state, info)
    assert hmc_adapter.scale.shape == (4,) and not torch.allclose(hmc_adapter.scale, torch.full((4,), 0.1))
    rwm_adapter = RWMScaleAdapter(posterior, 4, initial_scale=0.3)
    state = rwm_adapter.init(torch.zeros(4, 2), 0.1)
    state, info = rwm_adapter.step(rng, state, 0.1)
    assert not info.is_divergent.any() and rwm_adapter.gradient_evaluations == 2


def test_independence_jumps_follow_warm_up_and_are_counted():
    config = SamplerConfig(num_warmup=40, num_samples=15, init="prior", seed=4, max_integration_steps=3,
                           independence_moves=3)
    first, second = run_hmc(_posterior(), config), run_hmc(_posterior(), config)
    assert torch.equal(first.positions, second.positions)
    assert first.density_evaluations == 3 * 15  # only after warm-up, one batched forward pass per move
    assert first.independence_acceptance.shape == (6,)
    # per chain, the share of its 3 x 15 jumps that were accepted: a count over 45, some accepted
    accepted = first.independence_acceptance * 45
    assert torch.allclose(accepted, accepted.round(), atol=1e-4) and 0 < float(accepted.sum()) <= 6 * 45
    plain = run_hmc(_posterior(), SamplerConfig(num_warmup=40, num_samples=15, init="prior", seed=4,
                                                max_integration_steps=3, independence_moves=0))
    assert plain.independence_acceptance is None and plain.density_evaluations == 0
    # too few warm-up draws for a mixture: no proposal, plain HMC
    short = run_hmc(_posterior(), SamplerConfig(num_warmup=4, num_samples=5, init="prior", independence_moves=3))
    assert short.independence_acceptance is None and short.density_evaluations == 0


def test_jumps_shorten_the_default_trajectory_and_an_explicit_cap_wins():
    def adapter(**settings) -> HMCWindowAdapter:
        config = SamplerConfig(init="prior", **settings)
        return HMCWindowAdapter(_posterior(), config, torch.full((6,), 0.1), torch.ones(6, 2))

    assert adapter().high_steps == DEFAULT_INTEGRATION_STEPS == 25
    assert adapter(independence_moves=2).high_steps == JUMPING_INTEGRATION_STEPS == 3  # HMC only moves locally
    assert adapter(independence_moves=2, max_integration_steps=12).high_steps == 12
    # each iteration's trajectory is drawn from [L/2, L]: the count of gradient evaluations shows L in use
    plain = run_hmc(_posterior(), SamplerConfig(num_warmup=0, num_samples=20, init="prior", seed=5))
    jumping = run_hmc(_posterior(), SamplerConfig(num_warmup=0, num_samples=20, init="prior", seed=5,
                                                  independence_moves=2))
    assert 20 * 12 <= plain.gradient_evaluations and jumping.gradient_evaluations <= 20 * 3 + 1
