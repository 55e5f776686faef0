"""What a model reference names, apart from the stored models: the data set's ``default`` specs, and the models
that come from outside the workspace (a built generator such as ``scene:novel``, a model file, a plugin).

The registry (:class:`~probe_core.models.registry.ModelRegistry`) checks who may resolve a reference
(:mod:`probe_core.models.access`) before it asks this module to load it.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from probe_core.catalog import classifier_dataset, dataset_entry, generator_dataset, generator_source, load_dataset
from probe_core.data import DEFAULT_DATASET, split_view
from probe_core.data.classes import split_class_map, with_class_map
from probe_core.errors import ModelNotFoundError, ProbeError
from probe_core.models.access import check_model_reference, pin_model_references
from probe_core.models.devices import resolve_device
from probe_core.models.files import is_model_file_reference, load_model_file
from probe_core.models.loaded import LoadedModel, align_classifier
from probe_core.models.neighbours import NEIGHBOURS_PREFIX, neighbour_judge
from probe_core.models.plugins import PluginError, is_plugin_reference, load_plugin_reference
from probe_core.models.recipes import _ARCHITECTURES, _real_size_generators, default_architecture, default_generator_kind
from probe_core.models.resized import seen_at
from probe_core.models.spec import FEATURES_PREFIX, GENERATOR_KINDS, MODEL_FILE_ARCHITECTURE, ModelSpec
from probe_core.progress import Reporter
from probe_core.sampling.protocols import ClassConditionalPrior


def default_spec(dataset: str, kind: str, seed: int | None = None) -> ModelSpec | None:
    """The zoo spec behind ``default`` for a kind (``classifier`` or ``generator``) of a data set.

    None when the data set's default generator is built rather than trained (the scene renderer).
    """
    if kind == "classifier":
        return ModelSpec(dataset=classifier_dataset(dataset), kind="classifier", seed=seed)
    if kind != "generator":
        raise ProbeError(f"a default is a 'classifier' or a 'generator', got {kind!r}")
    if dataset_entry(dataset).default_generator is not None:
        return None
    return ModelSpec(dataset=generator_dataset(dataset), kind=default_generator_kind(dataset), seed=seed)


def default_specs(dataset: str = DEFAULT_DATASET, seed: int | None = None) -> list[ModelSpec]:
    """What the data set's defaults train: its classifier first (it scores generators), then its zoo generators.

    A user's real-size data (a folder or ``.npz`` of 32x32 images and up: an entry with ``sized_defaults``) trains
    only one generator, chosen from its size (:func:`~probe_core.models.recipes._real_size_generators`); its images
    are read to know their size.
    """
    kinds = _real_size_generators(dataset) or dataset_entry(dataset).zoo_generators
    generators = [ModelSpec(dataset=generator_dataset(dataset), kind=kind, seed=seed) for kind in kinds]
    return [ModelSpec(dataset=classifier_dataset(dataset), kind="classifier", seed=seed), *generators]


def load_outside_model(reference: str, kind: str, image_shape: Callable[[], tuple[int, int, int]],
                       device: str | torch.device | None) -> LoadedModel | None:
    """A built generator, model file or plugin that ``reference`` names, loaded; None for any other reference
    (a stored model's id).

    Parameters
    ----------
    reference : str
        ``scene:...``, ``modelfile:...``, ``plugin:...`` or a ``.py`` path.
    kind : {"classifier", "generator"}
    image_shape : callable
        The data set's (C, H, W), read only for a classifier (to check it with).
    device : str or torch.device, optional
    """
    source = generator_source(reference)
    if source is not None:
        if kind != "generator":
            raise ProbeError(f"{reference!r} is a generator, not a {kind}")
        if reference not in source.choices:
            raise ProbeError(f"unknown generator {reference!r}; use one of {', '.join(source.choices)}")
        module = source.build(reference).to(resolve_device(device))
        return LoadedModel(reference, "built-generator", module, (), {"metrics": {}})
    if is_model_file_reference(reference):
        model_file = load_model_file(reference, kind, image_shape() if kind == "classifier" else None)
        return LoadedModel(model_file.reference, f"file-{kind}", model_file.module.to(resolve_device(device)),
                           model_file.class_names, {"path": str(model_file.path), "sha256": model_file.sha256,
                                                    "metrics": {}, "class_map": model_file.class_map,
                                                    "image_shape": model_file.image_shape})
    if is_plugin_reference(reference) or Path(reference).is_file():
        plugin = load_plugin_reference(reference, image_shape=image_shape() if kind == "classifier" else None)
        module = plugin.classifier if kind == "classifier" else plugin.generator
        if module is None:
            raise PluginError(f"plugin {plugin.path} defines no {kind}() function")
        return LoadedModel(plugin.reference, f"plugin-{kind}", module.to(resolve_device(device)),
                           plugin.class_names or (), {"path": str(plugin.path), "sha256": plugin.sha256,
                                                      "metrics": {}, "class_map": plugin.class_map})
    return None


def finetuned_module_of(architecture: dict, kind: str, image_shape: tuple[int, int, int] | None,
                        model_id: str) -> nn.Module:
    """The module a stored finetune of a plugin or model file classifier loads its weights into: the plugin's or
    the file's own (its ``architecture`` record names the reference)."""
    reference = architecture["args"]["reference"]
    if architecture["class"] == MODEL_FILE_ARCHITECTURE:
        return load_model_file(reference, kind, image_shape).module
    plugin = load_plugin_reference(reference, image_shape=image_shape)
    module = plugin.classifier if kind == "classifier" else plugin.generator
    if module is None:
        raise PluginError(f"plugin {plugin.path} no longer defines the {kind} of model {model_id!r}")
    return module


class ReferenceResolver:
    """The part of :class:`~probe_core.models.registry.ModelRegistry` that turns references into loaded models:
    ``default``, stored ids, ``features:GENERATOR``, class maps (``ID#map=...``), built generators, model files and
    plugins. It reads the registry's store, actor and data folder, and its ``load``, ``exists``, ``model_id``,
    ``dataset``, ``get_or_train`` and memory of what it resolved."""

    def default_id(self, dataset: str, kind: str) -> str:
        """The reference ``default`` stands for: a model id (trained or not) or a built generator's reference.

        ``kind`` is ``classifier``, ``generator``, or a zoo kind (``vae``, ``gan``).
        """
        if kind in GENERATOR_KINDS:
            return self.model_id(ModelSpec(dataset=generator_dataset(dataset), kind=kind))
        spec = self.default_spec(dataset, kind)
        return dataset_entry(dataset).default_generator if spec is None else self.model_id(spec)

    def generator_choices(self, dataset: str) -> list[str]:
        """Generator references for a data set: what its entry offers, then the workspace's trained generators."""
        trained = [m["id"] for m in self.list(dataset=generator_dataset(dataset)) if m["kind"] in GENERATOR_KINDS]
        return [*dataset_entry(dataset).generator_choices, *trained]

    def classifier_choices(self, dataset: str) -> list[str]:
        """The workspace's trained classifiers of a data set, views of it included (a classifier trained on
        ``digits[mislabel=9->8:0.4]`` is one of digits')."""
        base = split_view(dataset)[0]
        return [m["id"] for m in self.list(kind="classifier") if split_view(m["dataset"])[0] == base]

    def can_start_in_classes(self, generator, dataset: str) -> bool:
        """Whether chains may start in a generator's class components (``init="classes"``), without training it:
        a loaded generator (a :class:`LoadedModel`) or a stored one says so in its capabilities, a ``default`` not
        trained yet by the architecture its spec trains."""
        if not isinstance(generator, str):
            return generator.capabilities.class_starts
        spec = self.default_spec(dataset, "generator") if generator == "default" else None
        if spec is None or self.exists(self.model_id(spec)):
            return self.resolve(generator, "generator", dataset).capabilities.class_starts
        data = load_dataset(spec.dataset_view(), self.data_dir)
        architecture = spec.resolved(data).architecture or default_architecture(spec.kind, data.image_shape)
        return issubclass(_ARCHITECTURES[architecture], ClassConditionalPrior)

    def resolve(self, reference: str | None, kind: str, dataset: str = DEFAULT_DATASET,
                device: str | torch.device | None = "cpu") -> LoadedModel:
        """A classifier or generator from a reference; never trains.

        Parameters
        ----------
        reference : str or None
            Model id; ``default`` / None (the data set's default, see :meth:`default_id`); a plugin
            reference or ``.py`` path; for classifiers ``features:GENERATOR``, a generator's feature network
            (:meth:`feature_network_id`), or ``neighbours:CLASSIFIER``, the data's training images' vote in
            that classifier's features (:mod:`probe_core.models.neighbours`); or for generators a built
            generator's reference such as ``scene:novel``.
        kind : {"classifier", "generator"}
            What is wanted; a generator reference may name a VAE or a GAN.
        dataset : str
            The data set it is used on (for ``default`` and a plugin classifier's input shape).

        Raises
        ------
        ModelNotFoundError
            If the reference names a model that is not trained; the message says how to train it.
        """
        if kind not in ("classifier", "generator"):
            raise ProbeError(f"resolve() wants kind 'classifier' or 'generator', got {kind!r}")
        key = (reference, kind, dataset, str(device))
        if self._resolved is not None and key in self._resolved:
            return self._resolved[key]
        data = self.dataset(dataset)  # refused before anything is resolved, as the reference below
        if kind == "classifier":
            base, class_map = split_class_map(reference or "default")
            if base.startswith(NEIGHBOURS_PREFIX):
                loaded = self._neighbour_vote(base[len(NEIGHBOURS_PREFIX):], class_map, data, dataset, device)
            else:
                if base.startswith(FEATURES_PREFIX):
                    base = self.feature_network_id(base[len(FEATURES_PREFIX):] or "default", dataset, device)
                check_model_reference(self.store, self.actor, base)
                loaded = self._resolve_unmatched(base, kind, dataset, device)
                if self._trusted():
                    pin_model_references(self.store, base, loaded.id)
                aligned = align_classifier(loaded, data, class_map)
                loaded = replace(aligned, id=with_class_map(aligned.id, class_map))
        else:
            check_model_reference(self.store, self.actor, reference)
            loaded = self._resolve_unmatched(reference, kind, dataset, device)
            if self._trusted():
                pin_model_references(self.store, reference, loaded.id)
            served = seen_at(loaded.module, data.image_shape)  # a smaller generator, resized to the data's size
            if served is not loaded.module:
                loaded = replace(loaded, module=served, capabilities=None)
        if self._resolved is not None:
            self._resolved[key] = self._resolved[(loaded.id, kind, dataset, str(device))] = loaded
        return loaded

    def _neighbour_vote(self, voters_in: str, class_map, data, dataset: str, device) -> LoadedModel:
        """``neighbours:CLASSIFIER``: the data's training images' vote in CLASSIFIER's features
        (:func:`~probe_core.models.neighbours.neighbour_judge`; ``neighbours:`` alone: the default generator's
        feature network's)."""
        if class_map:
            raise ProbeError("a neighbour vote is on the data's own classes: it takes no class map")
        voters_in = voters_in or f"{FEATURES_PREFIX}default"
        if voters_in.startswith(NEIGHBOURS_PREFIX):
            raise ProbeError(f"{NEIGHBOURS_PREFIX}{voters_in}: a vote is taken in a classifier's features, not in "
                             "another vote's")
        return neighbour_judge(self.resolve(voters_in, "classifier", dataset, device), data)

    def feature_network_id(self, generator: str, dataset: str = DEFAULT_DATASET,
                           device: str | torch.device | None = "cpu") -> str:
        """The id of the stored feature network of ``generator`` (a reference, ``default`` included): the classifier
        its perceptual term was trained with (:meth:`ModelSpec.feature_network_spec`), of another seed than the
        data's default classifier, so a judge that costs no training; ``features:GENERATOR`` names it wherever a
        classifier is.

        Raises
        ------
        ModelNotFoundError
            When the generator keeps none: trained before generators stored it, without a trained feature network,
            or smaller than the data.
        """
        loaded = self.resolve(generator, "generator", dataset, device)
        feature = loaded.feature_network
        if not feature or not self.exists(feature):
            raise ModelNotFoundError(
                f"the generator {loaded.id} keeps no feature network to judge with: only zoo generators with a "
                "trained perceptual network at the data's own size store one (real-size defaults trained since "
                "they began to); give another classifier trained on data you trust")
        return feature

    def _resolve_unmatched(self, reference: str | None, kind: str, dataset: str,
                           device: str | torch.device | None) -> LoadedModel:
        if reference is None or reference == "default":
            reference = self.default_id(dataset, kind)
            if generator_source(reference) is None and not self.exists(reference):
                raise ModelNotFoundError(
                    f"the default {kind} of {dataset} ({reference}) is not trained yet: train it with "
                    f"`probe models defaults --dataset {dataset}` or the Train button on the Home page")
        outside = load_outside_model(reference, kind, lambda: load_dataset(dataset, self.data_dir).image_shape,
                                     device)
        if outside is not None:
            return outside
        loaded = self.load(reference, device)
        if (kind == "classifier") != (loaded.kind == "classifier"):
            raise ProbeError(f"model {reference!r} is a {loaded.kind}, not a {kind}")
        return loaded

    def get_or_train_reference(self, reference: str | None, kind: str, dataset: str = DEFAULT_DATASET,
                               device: str | torch.device | None = "cpu",
                               reporter: Reporter | None = None) -> LoadedModel:
        """Like :meth:`resolve`, but a ``default`` that is not trained yet is trained first.

        The training is announced (``on_training``) unless ``reporter`` is given; used by jobs and
        commands that promise to train what they need.
        """
        base, _ = split_class_map(reference or "default")
        if base == "default":
            spec = self.default_spec(dataset, kind)
            if spec is not None and not self.exists(self.model_id(spec)):
                self.get_or_train(spec, reporter=reporter, device=device)
        return self.resolve(reference, kind, dataset, device)
