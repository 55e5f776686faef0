"""The models a run uses prove themselves on its data before any result is shown.

A request's settings are checked once, when it is built (:meth:`~probe_core.runs.requests.SampleRequest.build`
and the other requests' ``build``), so bad input gets one clear :class:`~probe_core.errors.ProbeError` in
seconds on an empty workspace; then, inside the run, :func:`checked_models` refuses a classifier whose
classes look matched wrongly or that has not learned the data and flags a weak generator, and
:func:`check_record` is what every stored result carries of those checks.
"""

from __future__ import annotations

from probe_core.errors import ProbeError
from probe_core.models.checks import ClassifierCheck, GeneratorCheck, check_classifier, check_generator, require_usable


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
