import pytest
import torch
from helpers import recording

from probe_core.catalog import load_dataset
from probe_core.errors import ModelNotFoundError, ProbeError
from probe_core.models import (
    FD_METRIC,
    ModelSpec,
    ProbabilityModel,
    feature_frechet_distance,
    train_classifier,
    train_gan,
    train_vae,
)


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits")


def test_tiny_classifier_beats_chance_by_far_and_reports_progress(digits):
    reports = []
    model, metrics = train_classifier(digits, epochs=3, reporter=recording(reports))
    assert metrics["test_accuracy"] > 0.7  # chance is 0.1
    assert [r.epoch for r in reports] == [1, 2, 3]
    assert reports[-1].metric_name == "test_accuracy" and reports[-1].progress == 1.0
    assert reports[-1].loss < reports[0].loss


def test_training_is_deterministic_for_a_seed(digits):
    first, _ = train_classifier(digits, epochs=1, seed=3)
    second, _ = train_classifier(digits, epochs=1, seed=3)
    other, _ = train_classifier(digits, epochs=1, seed=4)
    for key, value in first.state_dict().items():
        assert torch.equal(value, second.state_dict()[key])
    assert not torch.equal(first.head.weight, other.head.weight)


def test_always_ambiguous_classifier_splits_mass_between_y_and_next(digits):
    model, metrics = train_classifier(digits, epochs=8, ambiguous=True)
    assert metrics["test_mean_top2_mass"] > 0.8
    with torch.no_grad():
        probs = torch.softmax(model(digits.test_images), 1)
    labels = digits.test_labels
    pair = probs[torch.arange(len(labels)), labels] + probs[torch.arange(len(labels)), (labels + 1) % 10]
    assert float(pair.mean()) > 0.8
    assert float(probs.max(1).values.mean()) < 0.7  # never confident in one class


def test_generators_share_one_interface(digits):
    vae, vae_metrics = train_vae(digits, latent_dim=4, epochs=2)
    gan, _ = train_gan(digits, latent_dim=3, epochs=1)
    for generator, latent in ((vae, 4), (gan, 3)):
        assert generator.latent_dim == latent
        images = generator.decode(torch.randn(5, latent))
        assert images.shape == (5, 1, 8, 8) and 0 <= float(images.min().detach()) and float(images.max().detach()) <= 1
    mu, logvar = vae.encode(digits.test_images[:7])
    assert mu.shape == logvar.shape == (7, 4)
    assert vae_metrics["test_elbo"] < 0 and vae_metrics["test_reconstruction_mse"] > 0


def test_registry_returns_stored_model_instead_of_retraining(workspace):
    spec = ModelSpec(dataset="digits", kind="classifier", epochs=2, seed=1)
    first = workspace.registry.get_or_train(spec)
    path = workspace.models_dir / f"{first.id}.pt"
    stamp = path.stat().st_mtime_ns
    calls = []
    second = workspace.registry.get_or_train(spec, recording(calls))
    assert second.id == first.id and calls == [] and path.stat().st_mtime_ns == stamp
    assert isinstance(second.module, ProbabilityModel)
    probs = second.module(torch.rand(3, 1, 8, 8))
    assert torch.allclose(probs.sum(1), torch.ones(3), atol=1e-5)
    record = workspace.store.get_model(first.id)
    assert record["spec"]["seed"] == 1 and record["spec"]["epochs"] == 2
    assert record["metrics"]["test_accuracy"] == second.metrics["test_accuracy"] > 0.5
    # A fresh registry over the same folder (a new process) finds it too.
    from probe_core.runs.workspace import Workspace

    assert Workspace(workspace.root).registry.exists(first.id)


def test_a_remembering_registry_loads_each_model_of_a_run_once(trained_workspace, monkeypatch):
    from probe_core.bayestrex.recipes import prepare_sample
    from probe_core.bayestrex.request import SampleRequest
    from probe_core.models.registry import ModelRegistry

    loads = []
    original = ModelRegistry.load
    monkeypatch.setattr(ModelRegistry, "load", lambda self, model_id, device="cpu": (
        loads.append(model_id), original(self, model_id, device))[1])
    plain = trained_workspace.registry
    assert plain.resolve("default", "classifier", "digits") is not plain.resolve("default", "classifier", "digits")
    loads.clear()
    registry = plain.remembering()
    request = SampleRequest.build(registry, dataset="digits", target="high:3", chains=2, warmup=2, samples=2)
    prepared = prepare_sample(registry, request)
    assert sorted(loads) == sorted({prepared.classifier.id, prepared.generator.id})  # validated and prepared: once
    assert registry.announcing(None).resolve(prepared.classifier.id, "classifier", "digits") is prepared.classifier
    assert len(loads) == 2


def test_a_sharded_request_is_checked_by_the_request_alone(trained_workspace, monkeypatch):
    from probe_core.bayestrex import request as requests
    from probe_core.bayestrex import run
    from probe_core.bayestrex.recipes import prepare_sample, probe_target
    from probe_core.bayestrex.request import SampleRequest

    checks = {"count": 0}
    original = requests.check_sampler_settings

    def counted(**settings):
        checks["count"] += 1
        return original(**settings)

    # the one check: every layer reaches it through the settings type (run.py has no check of its own)
    monkeypatch.setattr(requests, "check_sampler_settings", counted)
    assert not hasattr(run, "check_sampler_settings")
    registry = trained_workspace.registry.remembering()
    request = SampleRequest.build(registry, dataset="digits", target="high:3;high:5", chains=2, warmup=2, samples=2,
                                  shards=2)
    assert checks["count"] == 1  # built: checked once, by the request being made
    prepared = prepare_sample(registry, request)
    before = checks["count"]
    result = probe_target(prepared)
    assert checks["count"] == before  # neither the run nor its two shards check again: a request is valid
    assert [entry["target_index"] for entry in result.targets] == [0, 1]
    with pytest.raises(ProbeError, match="chains per target"):
        run.sample(None, None, "high:3", class_names=("a", "b"), chains=0)  # keywords are checked first
    with pytest.raises(ProbeError, match="not both"):
        run.sample(None, None, "high:3", class_names=("a", "b"), settings=request.sampler_settings(), chains=2)


def test_registry_variants_and_metrics(trained_workspace):
    registry = trained_workspace.registry
    models = {m["kind"]: m for m in registry.list(dataset="digits")}
    assert set(models) >= {"classifier", "vae", "gan"}
    assert models["classifier"]["metrics"]["test_accuracy"] > 0.93
    assert models["vae"]["metrics"]["test_elbo"] < 0
    for kind in ("vae", "gan"):
        assert models[kind]["metrics"][FD_METRIC] > 0
    subset = registry.get_or_train(ModelSpec(dataset="digits", kind="vae", classes=(0, 1, 2, 3, 4, 6, 7, 8, 9), epochs=2))
    assert "-k012346789" in subset.id and subset.record["spec"]["architecture"]["class"] == "MLPVAE"
    assert registry.load(subset.id).record["spec"]["dataset_view"] == "digits[keep=0,1,2,3,4,6,7,8,9]"


def test_fd_ranks_real_data_above_noise(trained_workspace):
    digits = load_dataset("digits")
    classifier = trained_workspace.registry.resolve("default", "classifier").module.net
    generator = trained_workspace.registry.load(trained_workspace.registry.default_id("digits", "gan")).module

    class Noise(torch.nn.Module):
        latent_dim = 8

        def decode(self, z):
            return torch.rand(len(z), 1, 8, 8)

    noise = Noise()
    noise.register_parameter("dummy", torch.nn.Parameter(torch.zeros(1)))
    assert feature_frechet_distance(classifier, generator, digits.test_images) < \
        feature_frechet_distance(classifier, noise, digits.test_images) / 3


def test_vae_kl_warmup_is_part_of_the_spec_and_changes_training(digits):
    vae = ModelSpec(kind="vae").resolved(digits)
    assert vae.kl_warmup == vae.epochs // 2 > 0
    assert ModelSpec(kind="vae", kl_warmup=0).resolved(digits).model_id() != vae.model_id()
    classifier = ModelSpec(kind="classifier").resolved(digits)
    assert classifier.kl_warmup is None
    # Ids of models without the field keep the digest they had before it existed.
    assert ModelSpec(kind="classifier", seed=0).resolved(digits).model_id() == "digits-classifier-s0-7c0cfd"
    with pytest.raises(ProbeError, match="kl_warmup applies to VAEs"):
        ModelSpec(kind="classifier", kl_warmup=3)
    plain, _ = train_vae(digits, latent_dim=4, epochs=2, seed=1)
    warmed, _ = train_vae(digits, latent_dim=4, epochs=2, seed=1, kl_warmup_epochs=2)
    assert any(not torch.equal(first, second)
               for first, second in zip(plain.state_dict().values(), warmed.state_dict().values()))


def _mean_kl(vae, images):
    with torch.no_grad():
        mu, logvar = vae.encode(images)
    return float((0.5 * (mu.pow(2) + logvar.exp() - 1.0 - logvar).sum(1)).mean())


def test_beta_vae_is_part_of_the_spec_and_trades_information_for_a_tighter_prior(digits, trained_workspace, capsys):
    default = ModelSpec(kind="vae").resolved(digits)
    assert default.beta is None  # the ELBO; ids of models from before the field keep their digest
    assert ModelSpec(kind="vae", beta=1.0).resolved(digits).model_id() == default.model_id()
    assert ModelSpec(kind="vae", beta=4.0).resolved(digits).model_id() != default.model_id()
    for bad in ({"kind": "gan", "beta": 4.0}, {"kind": "vae", "beta": 0.0}, {"kind": "vae", "beta": -1.0}):
        with pytest.raises(ProbeError, match="beta applies to VAEs"):
            ModelSpec(**bad)
    plain, plain_metrics = train_vae(digits, latent_dim=4, epochs=3, seed=1)
    beta, beta_metrics = train_vae(digits, latent_dim=4, epochs=3, seed=1, beta=4.0)
    # A heavier KL weight pushes the codes towards the prior: less information in z.
    assert _mean_kl(beta, digits.test_images) < 0.8 * _mean_kl(plain, digits.test_images)
    assert set(beta_metrics) == set(plain_metrics)  # the same plain-ELBO metrics, comparable across β
    from probe_core.cli import main
    capsys.readouterr()
    assert main(["--workspace", str(trained_workspace.root), "models", "train", "--kind", "vae", "--epochs", "1",
                 "--beta", "4", "--kl-warmup", "0"]) == 0
    model_id = capsys.readouterr().out.split(":")[0]
    record = trained_workspace.registry.load(model_id).record
    assert (record["spec"]["beta"], record["spec"]["kl_warmup"]) == (4.0, 0)


def test_bad_specs_and_unknown_models(workspace):
    with pytest.raises(ProbeError, match="classifiers only"):
        ModelSpec(kind="vae", ambiguous=True)
    with pytest.raises(ProbeError, match="unknown model kind"):
        ModelSpec(kind="svm")
    with pytest.raises(ModelNotFoundError, match="no model"):
        workspace.registry.load("digits-vae-nope")
