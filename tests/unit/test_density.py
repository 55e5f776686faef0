"""The code densities fitted after training (the kernel density, the default, and the class Gaussians): whitening,
the density's gradient, a class's part, stored models of either kind, and Bayes-TrEx's posterior and HMC on a
generator seen through them."""

from __future__ import annotations

import pyro.distributions as dist
import pytest
import torch
from torch import nn

from probe_core.errors import ProbeError
from probe_core.models.density import (
    ClassCodeDensity,
    DensityGenerator,
    KernelCodeDensity,
    fit_code_density,
)
from probe_core.sampling import BayesTrExPosterior, SamplerConfig, run_hmc, run_pyro_nuts
from probe_core.sampling.protocols import generator_capabilities
from probe_core.sampling.targets import TargetBatch, parse_targets

CLASS_CENTRES = torch.tensor([[4.0, 0.0, 0.0, 1.0], [0.0, 4.0, 0.0, -1.0], [-3.0, -3.0, 2.0, 0.0]])
MIXING = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.6, 0.8, 0.0, 0.0], [0.0, 0.3, 0.5, 0.0], [0.2, 0.0, 0.1, 0.3]])


def _codes(count_per_class: int = 400, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Three classes of correlated 4-d codes around their centres, offset from the origin."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.arange(3).repeat_interleave(count_per_class)
    noise = torch.randn(len(labels), 4, generator=generator) @ MIXING.T
    return CLASS_CENTRES[labels] + noise + torch.tensor([10.0, -5.0, 3.0, 0.5]), labels


def test_whitened_codes_have_zero_mean_and_identity_covariance_and_unwhiten_inverts():
    codes, labels = _codes()
    density = ClassCodeDensity().fit(codes, labels)
    whitened = density.whiten(codes)
    assert whitened.mean(0).abs().max() < 1e-4
    assert torch.allclose(torch.cov(whitened.T), torch.eye(4), atol=1e-3)
    assert torch.allclose(density.unwhiten(whitened), codes, atol=1e-4)
    # each class's component sits at the whitened mean of that class's codes
    for k in range(3):
        assert torch.allclose(density.means_[k], whitened[labels == k].mean(0), atol=1e-4)
    assert torch.allclose(density.weights_, torch.full((3,), 1 / 3))


def test_the_mixture_is_a_pyro_distribution_with_the_gradient_of_its_log_density():
    codes, labels = _codes()
    density = ClassCodeDensity().fit(codes, labels)
    prior = density.distribution(batch=5)
    assert prior.batch_shape == (5,) and prior.event_shape == (4,)
    w = torch.randn(5, 4, generator=torch.Generator().manual_seed(1)).requires_grad_(True)
    (gradient,) = torch.autograd.grad(prior.log_prob(w).sum(), w)
    assert torch.isfinite(gradient).all()
    step = 1e-3  # central differences agree with autograd
    for dim in range(4):
        shift = torch.zeros(5, 4)
        shift[:, dim] = step
        with torch.no_grad():
            numeric = (prior.log_prob(w + shift) - prior.log_prob(w - shift)) / (2 * step)
        assert torch.allclose(gradient[:, dim], numeric, rtol=1e-2, atol=1e-2)
    # log density of the mixture: log Σ_k π_k N(w; μ_k, Σ)
    components = [density.class_distribution(k).log_prob(w.detach()) + density.weights_[k].log() for k in range(3)]
    assert torch.allclose(prior.log_prob(w.detach()), torch.logsumexp(torch.stack(components), 0), atol=1e-4)


def test_a_class_components_samples_are_that_class_and_the_mixtures_follow_the_weights():
    codes, labels = _codes()
    density = ClassCodeDensity().fit(codes, labels)
    generator = DensityGenerator(_LinearAutoencoder(), density, class_names=("a", "b", "c"))
    rng = torch.Generator().manual_seed(2)
    drawn = density.sample(600, rng, class_index=1)
    said = [generator.describe(w) for w in drawn[:200]]
    assert sum("class b" in text for text in said) > 0.9 * len(said)
    # in code space the class's samples sit around its codes' mean
    assert torch.allclose(density.unwhiten(drawn).mean(0), codes[labels == 1].mean(0), atol=0.3)
    mixed = density.sample(3000, rng)
    nearest = torch.cdist(mixed, density.means_).argmin(1)
    assert torch.allclose(torch.bincount(nearest, minlength=3) / 3000.0, density.weights_, atol=0.05)


class _LinearAutoencoder(nn.Module):
    """Codes (B, 4) to 8x8 images and back: a fixed linear decoder and its least-squares encoder."""

    latent_dim = 4

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.weight = nn.Parameter(torch.randn(64, 4) * 0.05, requires_grad=False)

    def decode(self, z):
        return torch.sigmoid(z @ self.weight.T).view(-1, 1, 8, 8)

    def encode(self, x):
        logits = torch.logit(x.reshape(len(x), 64).clamp(1e-4, 1 - 1e-4))
        mean = torch.linalg.lstsq(self.weight, logits.T).solution.T
        return mean, torch.full_like(mean, -4.0)


class _FirstPixels(nn.Module):
    """A 3-class classifier reading the first pixels of an 8x8 image."""

    def forward(self, x):
        return torch.softmax(20 * x.reshape(len(x), -1)[:, :3], dim=1)


def test_a_generator_seen_through_its_density_encodes_into_it_and_hmc_runs_on_the_mixture_prior():
    autoencoder = _LinearAutoencoder()
    codes, labels = _codes()
    images = autoencoder.decode(codes)
    density = fit_code_density(autoencoder, images, labels)
    generator = DensityGenerator(autoencoder, density)
    capabilities = generator_capabilities(generator)
    assert capabilities.structured_prior and capabilities.encoder and capabilities.sampler == "hmc"
    # Defuse perturbs codes in the same space the sampler moves in: encoding decoded codes gives them back
    whitened = density.whiten(codes[:50])
    assert torch.allclose(generator.encode(generator.decode(whitened))[0], whitened, atol=1e-2)
    targets = TargetBatch(parse_targets("high:1", ("0", "1", "2")), 4)
    posterior = BayesTrExPosterior(_FirstPixels(), generator, targets)
    z = density.sample(4, torch.Generator().manual_seed(3))
    logp, gradient, probs = posterior.logdensity_and_grad(z)
    log_prior, _, _ = posterior.log_terms(z)
    assert torch.allclose(log_prior, density.distribution(4).log_prob(z), atol=1e-5)  # the mixture is p(z)
    assert torch.isfinite(logp).all() and torch.isfinite(gradient).all() and probs.shape == (4, 3)
    # chains may start where a class's codes live (the component of class 1)
    start = density.sample(4, torch.Generator().manual_seed(4), class_index=1)
    result = run_hmc(posterior, SamplerConfig(num_warmup=10, num_samples=10, seed=0), initial=start)
    assert result.positions.shape[:2] == (4, 10) and torch.isfinite(result.positions).all()
    # Pyro NUTS, the reference sampler, sets up the same model with the mixture as its prior
    reference = run_pyro_nuts(BayesTrExPosterior(_FirstPixels(), generator, TargetBatch(targets.targets, 1)),
                              num_warmup=3, num_samples=3, seed=0)
    assert reference.positions.shape == (1, 3, 4) and torch.isfinite(reference.positions).all()


def test_bad_input_is_the_projects_error():
    codes, labels = _codes(count_per_class=1)
    with pytest.raises(ProbeError, match="needs at least 8 codes"):
        ClassCodeDensity().fit(codes, labels)
    with pytest.raises(ProbeError, match="ridge must be positive"):
        ClassCodeDensity(ridge=0).fit(*_codes())
    with pytest.raises(ProbeError, match="not fitted yet"):
        ClassCodeDensity().distribution()
    density = ClassCodeDensity().fit(*_codes())
    with pytest.raises(ProbeError, match="no component for class 7"):
        density.class_distribution(7)
    with pytest.raises(ProbeError, match="needs encode"):
        fit_code_density(nn.Linear(2, 2), torch.zeros(4, 2), torch.zeros(4, dtype=torch.long))


def test_the_fitted_density_travels_in_the_state_dict_and_class_starts_follow_the_target():
    codes, labels = _codes()
    autoencoder = _LinearAutoencoder()
    fitted = DensityGenerator(autoencoder, class_names=("a", "b", "c")).fit_density(autoencoder.decode(codes), labels)
    reloaded = DensityGenerator(_LinearAutoencoder(), class_names=("a", "b", "c"))
    reloaded.load_state_dict(fitted.state_dict())
    rng = torch.Generator().manual_seed(5)
    whitened = fitted.density.whiten(fitted.generator.encode(autoencoder.decode(codes))[0])
    assert torch.allclose(reloaded.encode(autoencoder.decode(codes))[0], whitened, atol=1e-4)
    assert torch.allclose(reloaded.decode(whitened[:20]), fitted.decode(whitened[:20]), atol=1e-6)
    # a high:c chain starts in c's component; an ambiguous a,b chain in a's or b's, never c's
    only_c = reloaded.sample_for_targets(torch.tensor([[0.0, 0.0, 1.0]]).repeat(100, 1), rng)
    assert sum("class c" in reloaded.describe(w) for w in only_c) > 90
    between = reloaded.sample_for_targets(torch.tensor([[0.5, 0.5, 0.0]]).repeat(200, 1), rng)
    said = [reloaded.describe(w) for w in between]
    assert sum("class c" in text for text in said) < 10
    assert min(sum("class a" in text for text in said), sum("class b" in text for text in said)) > 50


def test_init_classes_starts_chains_in_their_targets_components_and_is_refused_without_them():
    autoencoder = _LinearAutoencoder()
    codes, labels = _codes()
    generator = DensityGenerator(autoencoder, class_names=("0", "1", "2")).fit_density(autoencoder.decode(codes),
                                                                                     labels)
    targets = TargetBatch(parse_targets("high:2", ("0", "1", "2")), 6)
    posterior = BayesTrExPosterior(_FirstPixels(), generator, targets)
    result = run_hmc(posterior, SamplerConfig(num_warmup=0, num_samples=1, seed=0, init="classes"))
    first = result.positions[:, 0]
    assert sum("class 2" in generator.describe(w) for w in first) >= 5
    with pytest.raises(ProbeError, match="init='classes'"):
        run_hmc(BayesTrExPosterior(_FirstPixels(), autoencoder, targets),
                SamplerConfig(num_warmup=0, num_samples=1, init="classes"))


def test_auto_starts_chains_in_their_classes_on_a_density_generator_and_smc_elsewhere_for_ambiguous_targets():
    from probe_core.bayestrex.run import auto_init

    autoencoder = _LinearAutoencoder()
    codes, labels = _codes()
    generator = DensityGenerator(autoencoder, class_names=("0", "1", "2")).fit_density(autoencoder.decode(codes),
                                                                                     labels)
    assert auto_init(generator, hard=False, sampler="hmc") == "classes"  # disclosed in docs/fidelity.md
    assert auto_init(generator, hard=True, sampler="hmc") == "classes"  # SMC's prior draws missed the pair
    assert auto_init(autoencoder, hard=False, sampler="hmc") == "optimize"  # no class components: as before
    assert auto_init(autoencoder, hard=True, sampler="hmc") == "smc"


def test_a_density_generator_asks_defuse_for_centred_noise_and_a_bad_declaration_is_refused():
    from probe_core.defuse.identification import REAL_SIZE_NOISE, default_noise
    from probe_core.data import ImageDataset
    from probe_core.defuse.identify_step import IdentifyRequest, sized_identification, with_data_noise

    autoencoder = _LinearAutoencoder()
    codes, labels = _codes()
    generator = DensityGenerator(autoencoder, class_names=("0", "1", "2")).fit_density(autoencoder.decode(codes),
                                                                                     labels)
    declared = generator_capabilities(generator)
    assert declared.class_starts and declared.perturbation_noise["noise"] == "centered"
    real_size = (3, 64, 64)
    assert default_noise(real_size, declared) == declared.perturbation_noise  # whitened codes: centred
    assert default_noise(real_size, generator_capabilities(autoencoder)) == REAL_SIZE_NOISE  # by size, as before
    assert with_data_noise(IdentifyRequest(noise="paper"), real_size, declared).noise == "paper"  # a named one stays
    signs = ImageDataset("signs", torch.zeros(4, 3, 64, 64), torch.arange(4), torch.zeros(2, 3, 64, 64),
                         torch.arange(2), ("a", "b", "c", "d"), "test")
    chosen, note = sized_identification(IdentifyRequest(), signs, declared)
    assert chosen.noise == "centered" and "the generator's codes ask for" in note
    assert "ask for" not in sized_identification(IdentifyRequest(noise="paper"), signs, declared)[1]
    autoencoder.perturbation_noise = {"noise": "centered"}
    with pytest.raises(ProbeError, match="perturbation_noise"):
        generator_capabilities(autoencoder)


@pytest.mark.parametrize("size, levels, spatial, latent", [(8, 1, False, 12), (32, 3, False, 12), (64, 4, False, 12),
                                                           (32, 2, True, 128), (64, 3, True, 256)])
def test_the_autoencoder_halves_to_four_pixels_or_a_spatial_code_and_keeps_its_shapes(size, levels, spatial, latent):
    from probe_core.models.autoencoder import ConvAutoencoder

    network = ConvAutoencoder((3, size, size), latent_dim=latent, spatial=spatial)
    strided = [layer for layer in network.encoder if isinstance(layer, nn.Conv2d) and layer.stride == (2, 2)]
    assert len(strided) == levels
    images = torch.rand(5, 3, size, size)
    with torch.no_grad():
        code, log_variance = network.encode(images)
    assert code.shape == log_variance.shape == (5, latent)
    with torch.no_grad():
        decoded = network.decode(code)
    assert decoded.shape == (5, 3, size, size) and 0 <= float(decoded.min()) <= float(decoded.max()) <= 1


def test_a_trained_autoencoder_is_stored_resolves_again_and_samples_its_classes(tmp_path):
    from probe_core.catalog import load_dataset
    from probe_core.models import ModelSpec
    from probe_core.models.autoencoder import ConvAutoencoder
    from probe_core.runs.workspace import Workspace

    with pytest.raises(ProbeError, match="multiple of 64"):
        ConvAutoencoder((3, 64, 64), latent_dim=100, spatial=True)
    model = Workspace(tmp_path).registry.get_or_train(ModelSpec(dataset="digits", kind="rae", epochs=3))
    assert model.id.startswith("digits-rae-") and model.metrics["test_ssim"] > 0
    again = Workspace(tmp_path).registry.resolve(model.id, "generator", "digits")  # a new registry reads the file
    capabilities = again.capabilities
    assert capabilities.structured_prior and capabilities.encoder and capabilities.sampler == "hmc"
    assert isinstance(again.module.density, KernelCodeDensity)  # the default density, read back as it was
    for name in KernelCodeDensity.buffers:
        assert torch.equal(getattr(again.module, name), getattr(model.module, name))
    data = load_dataset("digits")
    whitened = again.module.encode(data.train_images[:400])[0]
    # the training codes are whitened: about zero mean and unit spread
    whitened = whitened.detach()
    assert whitened.mean(0).abs().max() < 0.5 and 0.5 < float(whitened.std(0).mean()) < 1.5
    assert again.module.decode(whitened[:4]).shape == (4, 1, 8, 8)


def test_the_kernel_density_is_the_mixture_of_kernels_around_the_codes_with_its_gradient():
    codes, labels = _codes(count_per_class=40)
    density = KernelCodeDensity(bandwidth=0.3).fit(codes, labels)
    whitened = density.whiten(codes)
    assert torch.allclose(density.codes_, whitened, atol=1e-4) and torch.equal(density.labels_, labels)
    prior = density.distribution(batch=5)
    assert prior.batch_shape == (5,) and prior.event_shape == (4,)
    w = whitened[:5] + 0.2 * torch.randn(5, 4, generator=torch.Generator().manual_seed(1))
    # the same density as torch's mixture of isotropic Gaussians, computed without (B, M, D) differences
    reference = dist.MixtureSameFamily(dist.Categorical(logits=torch.zeros(len(codes))),
                                       dist.Normal(density.codes_, 0.3).to_event(1))
    assert torch.allclose(prior.log_prob(w), reference.log_prob(w[:, None].expand(5, 1, 4)[:, 0]), atol=1e-3)
    w.requires_grad_(True)
    (gradient,) = torch.autograd.grad(prior.log_prob(w).sum(), w)
    (expected,) = torch.autograd.grad(reference.log_prob(w).sum(), w)
    assert torch.allclose(gradient, expected, rtol=1e-3, atol=1e-3)
    # a class's part is the kernels around that class's codes
    assert torch.allclose(density.class_distribution(2).log_prob(w.detach()),
                          dist.MixtureSameFamily(dist.Categorical(logits=torch.zeros(40)),
                                                 dist.Normal(density.codes_[labels == 2], 0.3).to_event(1)
                                                 ).log_prob(w.detach()), atol=1e-3)


def test_the_kernel_densitys_draws_are_near_their_class_codes_and_follow_the_weights():
    codes, labels = _codes(count_per_class=60)
    labels = labels.clone()
    labels[:30] = 1  # uneven classes: 30, 90 and 60 codes
    density = KernelCodeDensity(bandwidth=0.1).fit(codes, labels)
    generator = DensityGenerator(_LinearAutoencoder(), density, class_names=("a", "b", "c"))
    rng = torch.Generator().manual_seed(2)
    drawn = density.sample(300, rng, class_index=2)
    nearest = torch.cdist(drawn, density.codes_).argmin(1)
    assert bool((density.labels_[nearest] == 2).all())
    assert float(torch.cdist(drawn, density.codes_).min(1).values.median()) < 0.1 * 4 ** 0.5 * 2
    assert sum("class c" in generator.describe(w) for w in drawn[:50]) >= 45
    mixed = density.sample(3000, rng)
    nearest = density.labels_[torch.cdist(mixed, density.codes_).argmin(1)]
    assert torch.allclose(torch.bincount(nearest, minlength=3) / 3000.0, torch.tensor([30, 90, 60]) / 180.0,
                          atol=0.05)
    # more codes than it keeps: a random subset, each class's share measured on it
    kept = KernelCodeDensity(max_codes=50).fit(codes, labels)
    assert kept.codes_.shape == (50, 4) and abs(float(kept.weights_.sum()) - 1) < 1e-6
    assert torch.equal(torch.bincount(kept.labels_, minlength=3) / 50.0, kept.weights_)


def test_a_model_stored_with_either_density_loads_as_it_was_stored():
    codes, labels = _codes()
    autoencoder = _LinearAutoencoder()
    images = autoencoder.decode(codes)
    for estimator, kind in ((ClassCodeDensity(), ClassCodeDensity), (KernelCodeDensity(), KernelCodeDensity)):
        fitted = DensityGenerator(autoencoder, class_names=("a", "b", "c")).fit_density(images, labels,
                                                                                        estimator=estimator)
        assert isinstance(fitted.density, kind)
        placeholder = DensityGenerator(_LinearAutoencoder(), class_names=("a", "b", "c"))  # as the registry builds it
        placeholder.load_state_dict(fitted.state_dict())
        assert isinstance(placeholder.density, kind) and set(placeholder.state_dict()) == set(fitted.state_dict())
        w = fitted.density.sample(8, torch.Generator().manual_seed(0))
        assert torch.allclose(placeholder.prior_distribution(8).log_prob(w), fitted.prior_distribution(8).log_prob(w))
        assert torch.allclose(placeholder.decode(w), fitted.decode(w))


def test_the_kernel_densitys_bad_settings_are_the_projects_error():
    with pytest.raises(ProbeError, match="bandwidth must be positive"):
        KernelCodeDensity(bandwidth=0).fit(*_codes())
    with pytest.raises(ProbeError, match="at least one code"):
        KernelCodeDensity(max_codes=0).fit(*_codes())
    with pytest.raises(ProbeError, match="outside 0..1"):
        KernelCodeDensity().fit(*_codes(), num_classes=2)
    with pytest.raises(ProbeError, match="room for 2"):
        autoencoder = _LinearAutoencoder()
        codes, labels = _codes()
        DensityGenerator(autoencoder, num_classes=2).fit_density(autoencoder.decode(codes), labels)
