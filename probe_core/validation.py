"""Every setting of a run checked once, here, before any work: no model is trained and no run is stored.

The CLI, the dashboard and the API call these before they start a run, so bad input gets one clear
:class:`~probe_core.errors.ProbeError` in seconds on an empty workspace, and then the models a run
uses prove themselves on the data (:func:`checked_models`).
"""

from __future__ import annotations

from probe_core.catalog import classifier_dataset, load_dataset
from probe_core.checks import ClassifierCheck, GeneratorCheck, check_classifier, check_generator, require_usable
from probe_core.classes import split_class_map
from probe_core.errors import ProbeError
from probe_core.scaleout import check_executor
from probe_core.targets import parse_targets


def classifier_class_names(registry, reference: str | None, dataset: str) -> tuple[str, ...]:
    """The class names a classifier's targets are written in on ``dataset``, without training anything.

    A ``default`` that is not trained yet is named by its data set (it will be trained on it); any
    other reference is resolved, so its classes are matched to the data set's by name first.

    Raises
    ------
    ClassMismatchError, ModelNotFoundError, PluginError
    """
    base, _ = split_class_map(reference or "default")
    if base == "default":
        spec = registry.default_spec(dataset, "classifier")
        if spec is not None and not registry.exists(registry.default_id(dataset, "classifier")):
            return load_dataset(classifier_dataset(dataset), registry.data_dir).class_names
    return registry.resolve(reference or "default", "classifier", dataset).class_names


def validate_sample(registry, config):
    """Check a :class:`~probe_core.runconfig.SampleConfig` before any work; returns it unchanged.

    Sampler settings, the executor and shards, the data set, the classifier's classes (matched to
    the data set's) and the target spec. Never trains and never connects to a cluster.
    """
    from probe_core.bayestrex.run import check_sampler_settings  # the bayestrex package imports this module

    check_sampler_settings(**config.sampler_settings())
    check_executor(config.executor, connect=False)
    if config.shards is not None and (not isinstance(config.shards, int) or config.shards < 1):
        raise ProbeError(f"shards must be a whole number >= 1, got {config.shards!r}")
    load_dataset(config.dataset, registry.data_dir)
    parse_targets(config.target, classifier_class_names(registry, config.classifier, config.dataset))
    return config


def checked_models(classifier, dataset, generator=None) -> tuple[ClassifierCheck, GeneratorCheck | None]:
    """Check the models a run is about to use on its data: a classifier whose classes look matched wrongly
    is refused (:class:`~probe_core.checks.ModelCheckError`); a weak generator is returned flagged.

    Parameters
    ----------
    classifier : LoadedModel
        Resolved for ``dataset``.
    dataset : ImageDataset
    generator : LoadedModel, optional
    """
    classifier_check = require_usable(check_classifier(classifier, dataset))
    generator_check = check_generator(generator, classifier, dataset) if generator is not None else None
    return classifier_check, generator_check


def check_record(classifier_check: ClassifierCheck, generator_check: GeneratorCheck | None) -> dict:
    """What a stored result carries of the checks (JSON-ready): the class map, accuracy and the generator's verdict."""
    record = {"classifier": {"accuracy": classifier_check.accuracy, "class_map": classifier_check.class_map,
                             "message": classifier_check.message}}
    if generator_check is not None:
        record["generator"] = generator_check.to_dict()
        record["generator_weak"] = generator_check.weak
        record["generator_warning"] = generator_check.warning
    return record


def better_generator(registry, classifier, dataset, weak_id: str) -> str | None:
    """Another trained generator of the data set that passes the check where ``weak_id`` did not; None if none does.

    Only generators already in the workspace are looked at (a lookup never trains).
    """
    from probe_core.errors import ProbeError as _Error

    for reference in registry.generator_choices(dataset.name):
        if reference in (weak_id, "default"):
            continue
        try:
            candidate = registry.resolve(reference, "generator", dataset.name)
        except _Error:
            continue
        if not check_generator(candidate, classifier, dataset).weak:
            return candidate.id
    return None
