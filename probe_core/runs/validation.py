"""Every setting of a run checked once, here, before any work: no model is trained and no run is stored.

The CLI, the dashboard and the API call these before they start a run, so bad input gets one clear
:class:`~probe_core.errors.ProbeError` in seconds on an empty workspace, and then the models a run
uses prove themselves on the data (:func:`checked_models`).
"""

from __future__ import annotations

from probe_core.data.catalog import classifier_dataset, dataset_entry, load_dataset
from probe_core.data.classes import split_class_map, with_class_map
from probe_core.errors import ProbeError
from probe_core.models.checks import ClassifierCheck, GeneratorCheck, check_classifier, check_generator, require_usable
from probe_core.runs.requests import (
    SAMPLE_SETTINGS,
    SampleRequest,
    check_sampler_settings,
    refuse_unknown,
    sampler_defaults,
)
from probe_core.runs.scaleout import check_executor, check_shards
from probe_core.sampling.targets import TargetSpec


def _resolved(registry, reference, role: str, dataset: str) -> tuple[str, tuple[str, ...]]:
    """``(stored reference, class names)`` of a model on ``dataset``, without training anything.

    A model already resolved for ``dataset`` (a ``LoadedModel``, as the dashboard holds) is taken as it
    is. A ``default`` that is not trained yet keeps its name (the run trains it, announced); a classifier's
    names are then the data set's, which it will be trained on. Anything else is resolved, so a
    classifier's classes are matched to the data set's by name here, and its id is what is stored.

    Raises
    ------
    ClassMismatchError, ModelNotFoundError, PluginError
    """
    if not isinstance(reference, str):
        return reference.id, tuple(reference.class_names)
    base, _ = split_class_map(reference)
    if base == "default":
        spec = registry.default_spec(dataset, role)
        if spec is not None and not registry.exists(registry.default_id(dataset, role)):
            if role != "classifier":
                return reference, ()
            return reference, tuple(load_dataset(classifier_dataset(dataset), registry.data_dir).class_names)
    loaded = registry.resolve(reference, role, dataset)
    return loaded.id, tuple(loaded.class_names)


def classifier_class_names(registry, reference: str | None, dataset: str) -> tuple[str, ...]:
    """The class names a classifier's targets are written in on ``dataset``, without training anything."""
    return _resolved(registry, reference or "default", "classifier", dataset)[1]


def sample_request(registry, dataset: str, target: str | TargetSpec, classifier: str = "default",
                   generator: str = "default",
                   *, class_map: str | None = None, **settings) -> SampleRequest:
    """The one way to make a :class:`~probe_core.runs.requests.SampleRequest`: defaults, checks, references, targets.

    Settings left out (or None) take the target's defaults (the ambiguity matrix has its own, by image
    size). Every setting, the executor and shards, the data set, the classifier's classes (matched to
    the data set's by name; ``class_map`` gives ``MODEL=DATA,...`` where the names differ) and the
    target are checked before any work: nothing is trained, stored or connected to.

    Parameters
    ----------
    registry : ModelRegistry
    dataset : str
    target : str or TargetSpec
        Spec text (parsed here, once, in the classifier's class names) or a spec already made in them.
    classifier, generator : str or LoadedModel
        References as the user gave them (``default``, a model id, a plugin or model file path), or
        models already resolved for ``dataset`` (:meth:`ModelRegistry.resolve`; not loaded again).
    class_map : str, optional
    **settings
        Any of :data:`~probe_core.runs.requests.SAMPLE_SETTINGS`.

    Raises
    ------
    ProbeError
        For an unknown setting or any value a run cannot use (one clear message).
    """
    refuse_unknown(settings, SAMPLE_SETTINGS, "sampler")
    if not isinstance(target, TargetSpec) and (not isinstance(target, str) or not target.strip()):
        raise ProbeError("a target spec is needed, e.g. high:3 or ambiguous:4,9")
    data = load_dataset(dataset, registry.data_dir)
    classifier = classifier or "default"
    if class_map:
        if not isinstance(classifier, str):
            raise ProbeError("a class map goes with a classifier reference, not an already resolved classifier")
        classifier = with_class_map(classifier, class_map)
    classifier_id, names = _resolved(registry, classifier, "classifier", dataset)
    if isinstance(target, str):
        spec = TargetSpec.parse(target, names)  # the one parse: a bad target stops here, in the classifier's words
    elif target.class_names != names:  # made in other names (a plan's): its text read in the classifier's
        spec = TargetSpec.parse(target.text, names)
    else:
        spec = target
    given = {key: value for key, value in settings.items() if value is not None or key in ("shards",
                                                                                          "anneal_sigma_from")}
    given = {**sampler_defaults(spec, data.image_shape, dataset_entry(dataset).sized_defaults), **given}
    allow_weak = given.pop("allow_weak_classifier", False)
    check_sampler_settings(**given)
    given["allow_weak_classifier"] = bool(allow_weak)
    given["executor"] = check_executor(given.get("executor", "local"), connect=False)
    if given.get("shards", 1) is None and given["executor"] == "local":
        given["shards"] = 1  # one shard here; None means one per worker of a cluster
    check_shards(given.get("shards", 1))
    generator_id, _ = _resolved(registry, generator or "default", "generator", dataset)
    return SampleRequest(dataset=dataset, target=spec, classifier=classifier_id, generator=generator_id,
                         class_names=names, **given)


def checked_models(classifier, dataset, generator=None,
                   allow_weak_classifier: bool = False) -> tuple[ClassifierCheck, GeneratorCheck | None]:
    """Check the models a run is about to use on its data: a classifier whose classes look matched wrongly
    is refused (:class:`~probe_core.models.checks.ModelCheckError`), and so is one near chance unless
    ``allow_weak_classifier`` (then the record flags it); a weak generator is returned flagged.

    Parameters
    ----------
    classifier : LoadedModel
        Resolved for ``dataset``.
    dataset : ImageDataset
    generator : LoadedModel, optional
    """
    classifier_check = require_usable(check_classifier(classifier, dataset), allow_weak_classifier)
    generator_check = check_generator(generator, classifier, dataset) if generator is not None else None
    return classifier_check, generator_check


def check_record(classifier_check: ClassifierCheck, generator_check: GeneratorCheck | None) -> dict:
    """What a stored result carries of the checks (JSON-ready): the class map, accuracy and the generator's verdict."""
    record = {"classifier": {"accuracy": classifier_check.accuracy, "class_map": classifier_check.class_map,
                             "message": classifier_check.message, "near_chance": classifier_check.near_chance}}
    if classifier_check.near_chance:  # the user insisted: every result says so
        record["classifier_warning"] = classifier_check.message
    if generator_check is not None:
        record["generator"] = generator_check.to_dict()
        record["generator_weak"] = generator_check.weak
        record["generator_warning"] = generator_check.warning
    return record


def better_generator(registry, classifier, dataset, weak_id: str) -> str | None:
    """Another trained generator of the data set that passes the check where ``weak_id`` did not; None if none does.

    Only generators already in the workspace are looked at (a lookup never trains).
    """
    for reference in registry.generator_choices(dataset.name):
        if reference in (weak_id, "default"):
            continue
        try:
            candidate = registry.resolve(reference, "generator", dataset.name)
        except ProbeError:
            continue
        if not check_generator(candidate, classifier, dataset).weak:
            return candidate.id
    return None
