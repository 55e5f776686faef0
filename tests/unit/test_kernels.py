import math

import pytest
import torch

from probe_core.errors import ProbeError
from probe_core.mcmc import hmc, rwm

MEAN = torch.tensor([1.0, -2.0, 0.5])

SD = torch.tensor([0.5, 2.0, 1.0])

def gaussian_logdensity_and_grad(z):
    logp = (-0.5 * ((z - MEAN) / SD) ** 2).sum(1)
    return logp, -(z - MEAN) / SD ** 2, z[:, :1]


def _run(transition, state, iterations: int, burn_in: int) -> tuple[torch.Tensor, float]:
    """Kept draws (n, 3) after ``burn_in`` and the mean acceptance of ``transition(state) -> (state, info)``."""
    draws, accepted = [], []
    for iteration in range(iterations):
        state, info = transition(state)
        if iteration >= burn_in:
            draws.append(state.position)
            accepted.append(info.is_accepted.float().mean())
    return torch.stack(draws).reshape(-1, 3), float(torch.stack(accepted).mean())


def test_hmc_kernel_reproduces_a_gaussian_posterior():
    generator = torch.Generator().manual_seed(0)
    chains = 512
    state = hmc.init(torch.randn(chains, 3, generator=generator), gaussian_logdensity_and_grad)
    step_size = torch.full((chains,), 0.3)
    inverse_mass = (SD ** 2).expand(chains, 3).clone()

    def transition(state):
        steps = int(torch.randint(3, 8, (1,), generator=generator))
        return hmc.step(generator, state, gaussian_logdensity_and_grad, step_size, inverse_mass, steps)

    samples, acceptance = _run(transition, state, 300, 100)
    # Monte-Carlo error with ~512*200 correlated draws: a few per cent of the sd is generous.
    assert torch.allclose(samples.mean(0), MEAN, atol=0.05 * float(SD.max()))
    assert torch.allclose(samples.std(0), SD, rtol=0.05)
    assert 0.6 < acceptance <= 1.0


def test_rwm_kernel_reproduces_a_gaussian_posterior():
    generator = torch.Generator().manual_seed(1)
    chains = 512
    logdensity = lambda z: (gaussian_logdensity_and_grad(z)[0], z[:, :1])  # noqa: E731
    state = rwm.init(torch.randn(chains, 3, generator=generator), logdensity)
    proposal = rwm.GaussianProposal(SD * 1.2)
    draws = []
    for iteration in range(1500):
        state, info = rwm.step(generator, state, logdensity, proposal)
        if iteration >= 500 and iteration % 5 == 0:
            draws.append(state.position)
    samples = torch.stack(draws).reshape(-1, 3)
    assert torch.allclose(samples.mean(0), MEAN, atol=0.08 * float(SD.max()))
    assert torch.allclose(samples.std(0), SD, rtol=0.08)


def test_categorical_resampling_keeps_a_flat_prior_uniform():
    generator = torch.Generator().manual_seed(2)
    flat = lambda z: (torch.zeros(len(z)), z[:, :1])  # noqa: E731
    state = rwm.init(torch.zeros(4000, 1), flat)
    proposal = rwm.CategoricalResampleProposal([0], [3], rate=0.2)
    for _ in range(40):
        state, _ = rwm.step(generator, state, flat, proposal)
    frequencies = torch.bincount(state.position[:, 0].long(), minlength=3).float() / 4000
    assert torch.allclose(frequencies, torch.full((3,), 1 / 3), atol=0.03)


def test_poor_mixing_is_flagged_in_the_table_and_the_page_rows():
    from probe_core.bayestrex import summary_rows, table2
    from probe_core.mcmc.diagnostics import POOR_MIXING_NOTE, mixing_ok

    def entry(rhat, ess, failed=False):
        return {"spec": "ambiguous:4,9", "description": "ambiguous 4/9", "failed": failed, "hit_rate": 0.5,
                "summary": {"achieved": {"4": {"mean": 0.5, "sd": 0.02}}, "chains_with_hits": 30, "chains": 32,
                            "ess_min": ess, "rhat_max": rhat, "acceptance": 0.8, "divergences": 0}}

    stuck, fine = entry(3.2, 20), entry(1.01, 400)
    assert not mixing_ok(stuck["summary"]) and mixing_ok(fine["summary"])
    assert not mixing_ok(entry(1.01, 50)["summary"]) and not mixing_ok(entry(1.3, 400)["summary"])
    assert [r["status"] for r in summary_rows([stuck, fine])] == ["ok · poor mixing", "ok"]
    text = table2([stuck, fine])
    assert "ok · poor mixing" in text and POOR_MIXING_NOTE in text
    assert POOR_MIXING_NOTE not in table2([fine])


def test_independence_kernel_reproduces_a_gaussian_posterior_from_a_poor_proposal():
    from probe_core.mcmc import imh

    generator = torch.Generator().manual_seed(2)
    chains = 512
    logdensity = lambda z: (gaussian_logdensity_and_grad(z)[0], z[:, :1])  # noqa: E731
    # A proposal that is off-centre and too wide: the accept step, not the proposal, must give π.
    loc = torch.zeros(chains, 1, 3)
    scale_tril = torch.diag_embed((2.0 * SD).expand(chains, 1, 3)).clone()
    proposal = imh.MixtureProposal(loc, scale_tril, torch.zeros(chains, 1))
    position = torch.randn(chains, 3, generator=generator)
    state = hmc.init(position, gaussian_logdensity_and_grad)
    samples, acceptance = _run(lambda state: imh.step(generator, state, logdensity, proposal), state, 400, 100)
    assert torch.allclose(samples.mean(0), MEAN, atol=0.08 * float(SD.max()))
    assert torch.allclose(samples.std(0), SD, rtol=0.08)
    assert 0.05 < acceptance < 0.9


def test_mixture_proposal_is_fitted_per_group_and_keeps_the_prior():
    from probe_core.mcmc import adaptation

    generator = torch.Generator().manual_seed(3)
    # group 0: two separated clusters; group 1: one cluster far away
    first = torch.cat([torch.randn(4, 300, 2, generator=generator) * 0.1 + torch.tensor([2.0, 0.0]),
                       torch.randn(4, 300, 2, generator=generator) * 0.1 - torch.tensor([2.0, 0.0])])
    second = torch.randn(8, 300, 2, generator=generator) * 0.2 + torch.tensor([0.0, 3.0])
    groups = torch.tensor([0] * 8 + [1] * 8)
    proposal = adaptation.fit_mixture_proposal(torch.cat([first, second]), groups, prior_weight=0.1)
    assert proposal.loc.shape[0] == 16 and proposal.log_weights.shape == proposal.loc.shape[:2]
    assert torch.allclose(proposal.log_weights.exp().sum(1), torch.ones(16), atol=1e-5)
    near = lambda chain, point: (proposal.loc[chain] - torch.tensor(point)).norm(dim=1).min() < 0.1  # noqa: E731
    assert near(0, [2.0, 0.0]) and near(0, [-2.0, 0.0]) and not near(0, [0.0, 3.0])
    assert near(15, [0.0, 3.0]) and not near(15, [2.0, 0.0])
    # the defensive prior component: mass 0.1, so q is never far below 0.1 · N(0, I)
    z = torch.randn(16, 2, generator=generator) * 3
    prior = torch.distributions.Normal(0.0, 1.0).log_prob(z).sum(1)
    assert (proposal.log_prob(z) >= prior + torch.log(torch.tensor(0.1)) - 1e-4).all()
    draws = torch.stack([proposal.sample(generator) for _ in range(200)], 1)  # (16, 200, 2)
    assert (draws[:8, :, 0].abs() > 1.5).float().mean() > 0.75 and (draws[8:, :, 1] > 2.0).float().mean() > 0.75
    too_few = adaptation.fit_mixture_proposal(torch.randn(2, 5, 2), torch.tensor([0, 1]))
    assert too_few is None


# The proposals and the acceptance rule checked directly (the posterior checks above pass with many a broken
# proposal). Frequencies from n = 20,000-40,000 draws have a standard error below 0.004; the margins are over
# five times that, so they hold for any seed.
def test_gaussian_proposal_moves_only_its_coordinates_with_its_scale():
    generator = torch.Generator().manual_seed(3)
    position = torch.tensor([1.0, 2.0, 3.0]).repeat(20000, 1)
    scale = torch.tensor([0.5, 2.0, 1.0])
    proposed, log_ratio = rwm.GaussianProposal(scale, dims=[0, 2])(generator, position)
    moves = proposed - position
    assert torch.equal(log_ratio, torch.zeros(20000)) and torch.equal(position[:, 1], torch.full((20000,), 2.0))
    assert torch.equal(moves[:, 1], torch.zeros(20000))
    assert torch.allclose(moves[:, [0, 2]].std(0), scale[[0, 2]], rtol=0.03)
    assert torch.allclose(moves[:, [0, 2]].mean(0), torch.zeros(2), atol=0.03)
    per_chain = torch.tensor([[0.0], [1.0]]).repeat(5000, 1)  # every other chain stands still
    moved = rwm.GaussianProposal(per_chain)(generator, torch.zeros(10000, 2))[0]
    assert torch.equal(moved[0::2], torch.zeros(5000, 2)) and abs(float(moved[1::2].std()) - 1.0) < 0.05


def test_categorical_proposal_resamples_each_coordinate_at_its_rate_over_all_categories():
    generator = torch.Generator().manual_seed(4)
    position = torch.tensor([1.0, 7.5, 4.0]).repeat(20000, 1)
    proposed, log_ratio = rwm.CategoricalResampleProposal([0, 2], [3, 5], rate=0.2)(generator, position)
    assert torch.equal(position[0], torch.tensor([1.0, 7.5, 4.0]))  # the input is left as it was
    assert torch.equal(log_ratio, torch.zeros(20000)) and torch.equal(proposed[:, 1], position[:, 1])
    # a coordinate changes when it is resampled (rate) to another category (K - 1 of K)
    changed = (proposed != position).float().mean(0)
    assert abs(float(changed[0]) - 0.2 * 2 / 3) < 0.02 and abs(float(changed[2]) - 0.2 * 4 / 5) < 0.02
    everything = rwm.CategoricalResampleProposal([0, 2], [3, 5], rate=1.0)(generator, position)[0]
    for column, categories in ((0, 3), (2, 5)):
        values = everything[:, column]
        assert torch.equal(values, values.floor()) and int(values.min()) == 0 and int(values.max()) == categories - 1
        frequencies = torch.bincount(values.long(), minlength=categories).float() / len(values)
        assert torch.allclose(frequencies, torch.full((categories,), 1 / categories), atol=0.02)
    for dims, categories, rate, message in (([0], [3, 5], 0.2, "same length"), ([0], [3], 0.0, r"in \(0, 1\]"),
                                            ([0], [3], 1.5, r"in \(0, 1\], got 1.5")):
        with pytest.raises(ProbeError, match=message):
            rwm.CategoricalResampleProposal(dims, categories, rate=rate)
    assert rwm.CategoricalResampleProposal([0], [3]).rate == 0.2  # the paper's CLEVR runs


def test_rwm_step_accepts_by_the_metropolis_hastings_ratio_and_keeps_the_rejected_state():
    generator = torch.Generator().manual_seed(5)
    chains = 40000
    # each proposal jumps from 0 to 1; log π(1) - log π(0) + log q-ratio = log of the acceptance probability
    log_target = torch.tensor([-math.log(4.0), -math.log(4.0), 1.0, float("nan")]).repeat(chains // 4)
    log_ratio = torch.tensor([0.0, math.log(2.0), 0.0, 0.0]).repeat(chains // 4)
    expected = torch.tensor([0.25, 0.5, 1.0, 0.0])

    def logdensity(z):
        return torch.where(z[:, 0] > 0.5, log_target, torch.zeros(chains)), z[:, :1] + 10.0

    state = rwm.init(torch.zeros(chains, 2), logdensity)
    state, info = rwm.step(generator, state, logdensity, lambda rng, x: (x + 1.0, log_ratio))
    assert torch.allclose(info.acceptance_rate.view(-1, 4)[0], expected)
    rates = info.is_accepted.float().view(-1, 4).mean(0)
    assert torch.allclose(rates, expected, atol=0.02)
    accepted = info.is_accepted
    assert torch.equal(state.position[accepted], torch.ones(int(accepted.sum()), 2))
    assert torch.equal(state.position[~accepted], torch.zeros(int((~accepted).sum()), 2))
    assert torch.equal(state.aux[:, 0], torch.where(accepted, 11.0, 10.0))
    assert torch.equal(state.logdensity[~accepted], torch.zeros(int((~accepted).sum())))
    assert torch.equal(state.logdensity[accepted], log_target[accepted])


def _leapfrog_by_hand(position, momentum, step_size, inverse_mass, steps):
    """The leapfrog integrator written out chain by chain for the Gaussian above: (position, momentum) after
    ``steps`` steps, each a half kick, a drift and a half kick."""
    position, momentum = position.clone(), momentum.clone()
    for _ in range(steps):
        momentum = momentum + 0.5 * step_size * gaussian_logdensity_and_grad(position)[1]
        position = position + step_size * inverse_mass * momentum
        momentum = momentum + 0.5 * step_size * gaussian_logdensity_and_grad(position)[1]
    return position, momentum


def test_hmc_step_is_the_leapfrog_with_a_metropolis_correction_on_the_energy_change():
    chains, steps = 6, 3
    start = torch.randn(chains, 3, generator=torch.Generator().manual_seed(6))
    step_size = torch.tensor([0.05, 0.1, 0.2, 0.3, 0.4, 0.5])
    inverse_mass = torch.rand(chains, 3, generator=torch.Generator().manual_seed(7)) + 0.5
    state = hmc.init(start, gaussian_logdensity_and_grad)
    # the kernel's first draw from its generator is the momentum, N(0, M) with M the inverse of inverse_mass
    momentum = torch.randn(chains, 3, generator=torch.Generator().manual_seed(8)) / inverse_mass.sqrt()
    new_state, info = hmc.step(torch.Generator().manual_seed(8), state, gaussian_logdensity_and_grad, step_size,
                               inverse_mass, steps)
    end, end_momentum = _leapfrog_by_hand(start, momentum, step_size.unsqueeze(1), inverse_mass, steps)

    def energy(position, momentum):
        return -gaussian_logdensity_and_grad(position)[0] + 0.5 * (momentum.pow(2) * inverse_mass).sum(1)

    change = energy(end, end_momentum) - energy(start, momentum)
    assert torch.allclose(info.energy_change, change, atol=1e-5)
    assert torch.allclose(info.acceptance_rate, torch.exp(-change).clamp(max=1.0), atol=1e-5)
    assert info.num_integration_steps == steps and not info.is_divergent.any()
    # the acceptance draw is the generator's next one after the momentum
    draws = torch.Generator().manual_seed(8)
    torch.randn(chains, 3, generator=draws)
    assert torch.equal(info.is_accepted, torch.rand(chains, generator=draws) < info.acceptance_rate)
    assert 0 < float(info.acceptance_rate.min()) < 1  # so the draw decides something
    accepted = info.is_accepted.unsqueeze(1)
    assert torch.allclose(new_state.position, torch.where(accepted, end, start), atol=1e-6)
    assert torch.allclose(new_state.logdensity, gaussian_logdensity_and_grad(new_state.position)[0], atol=1e-5)
    assert torch.allclose(new_state.grad, gaussian_logdensity_and_grad(new_state.position)[1], atol=1e-5)
    assert torch.allclose(new_state.aux, new_state.position[:, :1])


def test_hmc_step_flags_divergences_and_rejects_them_and_non_finite_densities():
    chains = 4000
    state = hmc.init(torch.zeros(chains, 3), gaussian_logdensity_and_grad)
    inverse_mass = torch.ones(chains, 3)
    huge = torch.full((chains,), 200.0)  # an energy error of about ε²|p|²/SD² ≫ the threshold
    _, info = hmc.step(torch.Generator().manual_seed(9), state, gaussian_logdensity_and_grad, huge, inverse_mass, 1)
    assert info.is_divergent.all() and not info.is_accepted.any()
    assert torch.equal(info.is_divergent, info.energy_change > hmc.DIVERGENCE_THRESHOLD)
    small = torch.full((chains,), 0.01)  # an energy error of order ε³: nearly every proposal accepted
    _, info = hmc.step(torch.Generator().manual_seed(9), state, gaussian_logdensity_and_grad, small, inverse_mass, 1)
    assert not info.is_divergent.any() and float(info.is_accepted.float().mean()) > 0.99
    # accepted iff the uniform draw falls below the acceptance probability: the mean acceptance matches it
    medium = torch.full((chains,), 1.5)
    _, info = hmc.step(torch.Generator().manual_seed(9), state, gaussian_logdensity_and_grad, medium, inverse_mass, 1)
    assert abs(float(info.is_accepted.float().mean()) - float(info.acceptance_rate.mean())) < 0.05

    def broken(z):
        logp, grad, aux = gaussian_logdensity_and_grad(z)
        return torch.where(z[:, 0] > -100, torch.full_like(logp, float("nan")), logp), grad, aux

    new_state, info = hmc.step(torch.Generator().manual_seed(9), state, broken, small, inverse_mass, 1)
    assert torch.isinf(info.energy_change).all() and info.is_divergent.all() and not info.is_accepted.any()
    assert torch.equal(new_state.position, state.position) and torch.equal(new_state.logdensity, state.logdensity)


def test_random_walk_draws_come_from_the_given_generator_alone():
    def logdensity(z):
        return -(z ** 2).sum(1), z.sum(1, keepdim=True)

    position = torch.ones(64, 4)
    gaussian = rwm.GaussianProposal(0.5)
    proposed, log_ratio = gaussian(torch.Generator().manual_seed(3), position)
    assert torch.equal(proposed, 1.0 + 0.5 * torch.randn((64, 4), generator=torch.Generator().manual_seed(3)))
    assert torch.equal(log_ratio, torch.zeros(64))
    categorical = rwm.CategoricalResampleProposal([0, 2], [3, 5], rate=0.5)
    runs = []
    for global_seed in (0, 1):  # the global generator differs between the two runs; the given one does not
        torch.manual_seed(global_seed)
        generator = torch.Generator().manual_seed(11)
        state = rwm.init(position, logdensity)
        for proposal in (gaussian, categorical) * 3:
            state, info = rwm.step(generator, state, logdensity, proposal)
        runs.append((state, info))
    (first, first_info), (second, second_info) = runs
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    assert torch.equal(first_info.is_accepted, second_info.is_accepted)
    assert 0 < int(first_info.is_accepted.sum()) < 64  # the acceptance draws decided something
