"""The catalogue's capabilities, lookups that never train, and generator capabilities checked at load."""

import pytest
import torch
from helpers import write_tiny_plugin

from probe_core.catalog import (
    dataset_entry,
    generator_source,
    list_datasets,
    load_dataset,
)
from probe_core.errors import DataError, ModelNotFoundError, ProbeError
from probe_core.sampling.protocols import Encoder, StructuredPrior, generator_capabilities


def test_entries_carry_what_the_data_set_uses():
    assert {"digits", "mnist", "scenes", "scenes-novel"} <= {entry.name for entry in list_datasets()}
    novel = dataset_entry("scenes-novel")
    assert novel.classifier_dataset == "scenes" and novel.default_generator == "scene:novel"
    assert novel.zoo_generators == () and novel.classifier_architecture == "CountingClassifier"
    digits = dataset_entry("digits[drop=5]")  # a view has its data set's entry
    assert digits.name == "digits" and digits.default_generator is None and digits.zoo_generators == ("vae", "gan")
    assert generator_source("scene:novel") is not None and generator_source("digits-vae-s0-abc") is None
    with pytest.raises(DataError, match="unknown data set 'nope'"):
        dataset_entry("nope")
    assert load_dataset("digits[keep=1,7]").class_names == ("1", "7")


def test_lookups_never_train(workspace):
    registry = workspace.registry
    with pytest.raises(ModelNotFoundError, match="not trained yet.*probe models defaults --dataset digits"):
        registry.resolve("default", "classifier", "digits")
    with pytest.raises(ModelNotFoundError):
        registry.resolve(None, "generator", "digits[mislabel=9->8:0.4]")
    assert registry.list() == [] and not any(workspace.models_dir.iterdir())
    assert len(registry.missing_defaults("digits")) == 3


def test_defaults_follow_the_entries(workspace):
    registry = workspace.registry
    assert [(s.dataset, s.kind) for s in registry.default_specs("digits")] == [
        ("digits", "classifier"), ("digits", "vae"), ("digits", "gan")]
    assert [(s.dataset, s.kind) for s in registry.default_specs("scenes-novel")] == [("scenes", "classifier")]
    flawed = "digits[mislabel=9->8:0.4]"  # its classifier learns the flawed labels; generators ignore labels
    assert registry.default_id(flawed, "generator") == registry.default_id("digits", "generator")
    assert registry.default_id(flawed, "classifier") != registry.default_id("digits", "classifier")
    assert registry.default_id("scenes", "generator") == "scene:standard"
    assert registry.generator_choices("scenes-novel")[:3] == ["scene:standard", "scene:no-squares", "scene:novel"]
    assert registry.generator_choices("digits") == []


def test_capabilities_are_checked_once_where_a_generator_is_loaded(workspace, tmp_path):
    scene = workspace.registry.resolve("scene:novel", "generator", "scenes-novel")
    assert isinstance(scene.module, StructuredPrior) and scene.capabilities.sampler == "rwm"
    assert not scene.capabilities.encoder
    plugin = workspace.registry.resolve(str(write_tiny_plugin(tmp_path)), "generator", "digits")
    assert plugin.capabilities.differentiable and plugin.capabilities.encoder and not plugin.capabilities.structured_prior
    assert isinstance(plugin.module, Encoder)


class _HalfStructured(torch.nn.Module):
    latent_dim = 2

    def decode(self, z):
        return torch.zeros(len(z), 1, 4, 4)

    def sample_prior(self, count, generator):
        return torch.zeros(count, 2)


def test_a_partial_structured_prior_or_a_non_generator_is_refused():
    with pytest.raises(ProbeError, match="has only sample_prior"):
        generator_capabilities(_HalfStructured())
    with pytest.raises(ProbeError, match="latent_dim >= 1 and a method decode"):
        generator_capabilities(torch.nn.Linear(2, 2))
