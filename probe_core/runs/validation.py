"""The models a run uses prove themselves on its data before any result is shown.

A request's settings are checked once, when it is built (:meth:`~probe_core.bayestrex.request.SampleRequest.build`
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


def checked_judge(judge, classifier, dataset, class_names=None):
    """A judge (a classifier that is not the probed one, resolved for ``dataset``) after the checks every run
    that takes one makes: it is another model than ``classifier``, on ``class_names`` in their order (default
    the data's: its outputs are read by those class indices; sampling passes the probed classifier's, whose
    targets index them), and not near chance on the data (a judge that knows nothing would vouch for nothing,
    or for everything). Returns ``judge``.

    Raises
    ------
    ProbeError
        For the probed classifier itself or other classes; a near-chance judge as
        :func:`~probe_core.models.checks.require_usable`.
    """
    if judge.id == classifier.id:
        raise ProbeError(f"the judge must be a classifier other than the probed one ({classifier.id}): it says "
                         "what a model that was never probed sees in the images")
    expected = tuple(dataset.class_names if class_names is None else class_names)
    if tuple(judge.class_names) != expected:
        raise ProbeError(f"the judge's classes {list(judge.class_names)} are not the "
                         f"{'data' if class_names is None else 'probed classifier'}'s {list(expected)}")
    checked_models(judge, dataset)
    return judge


def judge_warning(judge, classifier) -> str | None:
    """What to flag when ``judge`` was trained on the same data as ``classifier`` (both stored models; a plugin's
    data is not known): a judge that learnt the same labels shares their flaws, and may hide the failures they cause
    (on the 64x64 stand-in it kept none of a planted mislabelling's; the 32x32 stand-in's dark 3s left out of training
    it still confirmed; docs/real-size.md). A judge whose record carries a ``judge_note`` (a neighbour vote, which
    reads the data's labels rather than learning them) says it in its own words."""
    if judge.record.get("judge_note"):  # a judge that says for itself how it may share a flaw (a neighbour vote)
        return judge.record["judge_note"]
    trained_on = [(model.record.get("spec") or {}).get("dataset") for model in (judge, classifier)]
    if None in trained_on or trained_on[0] != trained_on[1]:
        return None
    return (f"the judge {judge.id} was trained on the same data as the classifier ({trained_on[0]}): it shares "
            "whatever is wrong with those labels and may hide the failures it causes (a mislabelled class's, "
            "for one); judge with a classifier trained on data you trust")


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
