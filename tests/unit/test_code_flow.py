"""The flow prior over codes (issue 99): an invertible map from N(0, I) noise to whitened codes, its log density
by the change of variables, and a generator whose chains run on the noise and move between training codes."""

from __future__ import annotations

import math

import pytest
import torch
from test_density import _codes
from test_manifold_density import _Identity as _IdentityOf, _Uniform

from probe_core.errors import ProbeError
from probe_core.models.code_flow import CodeFlow, NoiseFlowGenerator, fit_code_flow, noise_flow_generator
from probe_core.sampling import BayesTrExPosterior, SamplerConfig, run_hmc
from probe_core.sampling.protocols import generator_capabilities
from probe_core.sampling.targets import TargetBatch, parse_targets


def test_the_flow_inverts_and_its_log_density_is_the_change_of_variables():
    flow = CodeFlow(5, layers=3, hidden=16, seed=1)
    for coupling in flow.couplings:  # away from the identity it starts as
        torch.nn.init.normal_(coupling.net[-1].weight, std=0.3)
    noise = torch.randn(4, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    flow = flow.double()
    codes, log_det = flow(noise)
    back, inverse_log_det = flow.inverse(codes)
    assert torch.allclose(back, noise, atol=1e-10) and torch.allclose(log_det, -inverse_log_det, atol=1e-10)
    for row in range(4):  # log |det J| against autograd's Jacobian
        jacobian = torch.autograd.functional.jacobian(lambda x: flow(x[None])[0][0], noise[row])
        assert torch.allclose(torch.linalg.slogdet(jacobian).logabsdet, log_det[row], atol=1e-8)
    reference = torch.distributions.Normal(0.0, 1.0).log_prob(back).sum(-1) + inverse_log_det
    assert torch.allclose(flow.log_prob(codes), reference, atol=1e-10)
    w = codes.clone().requires_grad_(True)
    (gradient,) = torch.autograd.grad(flow.log_prob(w).sum(), w)
    step = 1e-6
    numeric = torch.stack([(flow.log_prob(codes + step * e) - flow.log_prob(codes - step * e)) / (2 * step)
                           for e in torch.eye(5, dtype=torch.float64)], 1)
    assert torch.allclose(gradient, numeric, atol=1e-5)


DIM = 4


def _identity():
    return _IdentityOf(DIM)


@pytest.fixture(scope="module")
def fitted():
    every, every_label = _codes(count_per_class=250)  # three clusters: far from one Gaussian
    held = torch.arange(len(every)) % 5 == 0  # a fifth of the same curves held out
    codes, labels, held_out = every[~held], every_label[~held], every[held]
    generator, figures = noise_flow_generator(_identity(), codes.reshape(-1, 1, 1, DIM), held_out.reshape(-1, 1, 1, DIM),
                                              layers=4, hidden=32, max_steps=150, seed=0)
    return codes, labels, generator, figures


def test_the_fitted_flow_beats_a_gaussian_on_held_out_codes_and_its_draws_lie_near_the_codes(fitted):
    codes, labels, generator, figures = fitted
    assert figures["held_out_nll"] < figures["gaussian_nll"] and figures["steps"] > 0
    capabilities = generator_capabilities(generator)
    assert not capabilities.structured_prior and capabilities.encoder and capabilities.sampler == "hmc"
    with torch.no_grad():
        drawn = generator.decode(torch.randn(300, DIM, generator=torch.Generator().manual_seed(1))).reshape(300, DIM)
        assert drawn.shape == (300, DIM)
        typical = torch.cdist(codes, codes).fill_diagonal_(math.inf).min(1).values.median()
        # prior draws sit among the codes (as near them as codes sit to each other), of both classes
        nearest = torch.cdist(drawn, codes).min(1)
        assert float(nearest.values.median()) < 3 * float(typical)
        assert set(labels[nearest.indices].tolist()) == {0, 1, 2}
        # a code's noise decodes back to it (Defuse perturbs that noise)
        noise, _ = generator.encode(codes[:20].reshape(-1, 1, 1, DIM))
        assert torch.allclose(generator.decode(noise).reshape(20, DIM), codes[:20], atol=1e-3)


def test_a_chain_started_on_one_training_codes_noise_reaches_others(fitted):
    codes, _, generator, _ = fitted
    posterior = BayesTrExPosterior(_Uniform(), generator, TargetBatch(parse_targets("uniform", ("a", "b")), 2))
    with torch.no_grad():
        start, _ = generator.encode(codes[[0, 400]].reshape(-1, 1, 1, DIM))
    result = run_hmc(posterior, SamplerConfig(num_warmup=15, num_samples=15, seed=0), initial=start)
    with torch.no_grad():
        visited = generator.decode(result.positions.reshape(-1, DIM)).reshape(2, -1, DIM)
    reached = [len(torch.cdist(chain, codes).argmin(1).unique()) for chain in visited]
    assert min(reached) >= 5, reached  # of 15 draws each: not pinned to its start


def test_bad_flow_input_is_the_projects_error():
    with pytest.raises(ProbeError, match="held-out"):
        fit_code_flow(torch.zeros(10, 4), torch.zeros(0, 4))
    with pytest.raises(ProbeError, match="at least 2 dimensions"):
        CodeFlow(1)
    with pytest.raises(ProbeError, match="encode"):
        noise_flow_generator(torch.nn.Linear(2, 2), torch.zeros(4, 2), torch.zeros(4, 2))
    with pytest.raises(ProbeError, match="dimensions"):
        NoiseFlowGenerator(_identity(), CodeFlow(3), torch.zeros(3), torch.eye(3))


def test_a_flow_autoencoder_trains_stores_and_resolves_again_with_its_flow(tmp_path):
    """The real-size recipe's autoencoder (issue 99): trained, its flow fitted on nine tenths of the training codes
    and stopped on the rest, stored as plain tensors and read back in a new registry decoding the same noise to the
    same images; its prior is N(0, I) noise (no class starts), and an image's noise decodes to its reconstruction."""
    from probe_core.catalog import load_dataset
    from probe_core.models import ModelSpec
    from probe_core.models.autoencoder import FLOW_HELD_OUT_SHARE, FlowAutoencoder, flow_fits
    from probe_core.runs.workspace import Workspace

    model = Workspace(tmp_path).registry.get_or_train(ModelSpec(dataset="digits", kind="rae", epochs=2,
                                                                architecture="FlowAutoencoder"))
    assert isinstance(model.module, FlowAutoencoder) and model.metrics["prior"] == "CodeFlow"
    assert model.metrics["flow_held_out_nll"] < model.metrics["flow_gaussian_nll"]
    again = Workspace(tmp_path).registry.resolve(model.id, "generator", "digits")
    capabilities = again.capabilities
    assert not capabilities.structured_prior and not capabilities.class_starts and capabilities.encoder
    assert capabilities.sampler == "hmc" and capabilities.perturbation_noise["noise"] == "centered"
    noise = torch.randn(6, again.module.latent_dim, generator=torch.Generator().manual_seed(0))
    images = load_dataset("digits").train_images[:6]
    with torch.no_grad():
        assert torch.allclose(again.module.decode(noise), model.module.decode(noise), atol=1e-6)
        assert again.module.decode(noise).shape == (6, 1, 8, 8)
        code, _ = again.module.generator.encode(images)
        reconstruction = again.module.generator.decode(code)
        assert torch.allclose(again.module.decode(again.module.encode(images)[0]), reconstruction, atol=1e-3)
    assert flow_fits(100, 45) and not flow_fits(100, 46) and FLOW_HELD_OUT_SHARE == 0.1
