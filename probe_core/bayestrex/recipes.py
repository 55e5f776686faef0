"""The paper's use cases as functions over a registry: misclassification, novel class, always ambiguous,
classifier comparison. :func:`plan_use_case` says which models and targets a use case needs without
training anything (the Probe page trains the missing ones as a job, then samples).

Each returns a :class:`~probe_core.bayestrex.results.SamplingResult` naming the models it used and the use
case; the comparison is labelled by people (:func:`samples_to_label`, :func:`comparison_table`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from probe_core.bayestrex.compare import CompareRequest
from probe_core.bayestrex.request import SAMPLE_SETTINGS, SampleRequest
from probe_core.bayestrex.results import ComparisonResult, SamplingResult
from probe_core.bayestrex.run import sample
from probe_core.catalog import load_dataset
from probe_core.data.provenance import ProvenanceMeter, training_index
from probe_core.errors import ProbeError
from probe_core.models import ModelSpec
from probe_core.runs.lifecycle import run_now
from probe_core.runs.validation import better_generator, check_record, checked_judge, checked_models, judge_warning
from probe_core.sampling.targets import TargetSpec


@dataclass(frozen=True)
class PreparedSample:
    """A sample request with its models loaded and checked on the data: what :func:`probe_target` samples.

    Attributes
    ----------
    request : SampleRequest
        With the models' stored ids and the classifier's class names (in the data set's order).
    classifier, generator : LoadedModel
    data : ImageDataset
    checks : dict
        :func:`~probe_core.runs.validation.check_record` of the checks, stored with the result.
    warning : str or None
        Why the generator is weak; with ``suggest_generator``, naming a trained generator that passes.
    judge : LoadedModel or None
        The request's judge, checked on the data (:func:`~probe_core.runs.validation.checked_judge`).
    """

    request: object
    classifier: object
    generator: object
    data: object
    checks: dict
    warning: str | None
    judge: object = None


def prepare_sample(registry, request, device="cpu", suggest_generator: bool = True) -> PreparedSample:
    """The one place a sample request's models are got ready: a missing default is trained (announced,
    with progress), both models are loaded once and checked on the data, and the stored ids and the
    classifier's class names are pinned in the request.

    Parameters
    ----------
    registry : ModelRegistry
    request : SampleRequest
    device : str
    suggest_generator : bool
        Look among the workspace's trained generators for one that passes where a weak one did not
        (where a person waits: the CLI, the API); a worker only flags the weak one.

    Raises
    ------
    ModelCheckError
        If the classifier's classes look matched wrongly on the data (nothing is sampled).
    ProbeError
        If the classifier's classes are no longer the ones the request was built for.
    """
    classifier = registry.get_or_train_reference(request.classifier, "classifier", request.dataset, device=device)
    generator = registry.get_or_train_reference(request.generator, "generator", request.dataset, device=device)
    data = load_dataset(request.dataset, registry.data_dir)
    # a request prepared where it is made (the CLI, the API) and then run here is checked once
    classifier_check, generator_check = registry.remembered(
        ("checks", classifier.id, generator.id, request.dataset, request.allow_weak_classifier),
        lambda: checked_models(classifier, data, generator, allow_weak_classifier=request.allow_weak_classifier))
    names = tuple(classifier.class_names)
    if request.class_names and names != tuple(request.class_names):
        raise ProbeError(f"classifier {classifier.id} now has the classes {', '.join(names)}, not the "
                         f"{', '.join(request.class_names)} this run was requested with; start it again")
    warning = generator_check.warning if generator_check.weak else None
    if warning and suggest_generator and not classifier_check.near_chance:
        better = better_generator(registry, classifier, data, generator.id)
        warning += f"; generator {better} passes the check: use it instead" if better else ""
    if classifier_check.near_chance:
        warning = "; ".join(filter(None, [f"WEAK CLASSIFIER (sampling anyway, as asked): {classifier_check.message}",
                                          warning]))
    judge = None
    checks = check_record(classifier_check, generator_check)
    if request.judge is not None:
        judge = checked_judge(registry.resolve(request.judge, "classifier", request.dataset, device=device),
                              classifier, data, class_names=names)  # as build matched it: the targets' classes
        checks["judge_warning"] = judge_warning(judge, classifier)
    request = request.derived(classifier=classifier.id, generator=generator.id, class_names=names)
    return PreparedSample(request, classifier, generator, data, checks, warning, judge)


def probe_target(prepared: PreparedSample, **runtime) -> SamplingResult:
    """Sample a prepared request (:func:`prepare_sample`): any target spec (high confidence, ambiguous
    pair, ambiguity matrix, uniform, path); the paper's use case it is (``request.use_case``) is named in the
    result.

    ``runtime``: :func:`~probe_core.bayestrex.run.sample`'s ``store``, ``run_id`` and ``reporter``.
    """
    request, data = prepared.request, prepared.data
    names = request.class_names
    # the test-set baseline needs the classifier's classes to be the data set's (not a class-subset classifier)
    baseline_data = data if names == tuple(data.class_names) else None
    judge = None if prepared.judge is None else prepared.judge.module
    # every hit placed against the training images (is it new, or a copy of one?), in the data's class order
    provenance = ProvenanceMeter.for_classes(training_index(data), names)
    result = sample(prepared.classifier.module, prepared.generator.module, request.targets, class_names=names,
                    settings=request.sampler_settings(), executor=request.executor, shards=request.shards,
                    dataset=baseline_data, judge=judge, provenance=provenance, **runtime)
    return SamplingResult.from_record({
        **result, "dataset": request.dataset, "classifier": prepared.classifier.id, "judge": request.judge,
        "generator": prepared.generator.id, "model_checks": prepared.checks,
        "generator_weak": prepared.checks.get("generator_weak", False), "use_case": request.use_case})


USE_CASES = {
    "misclassification": "a generator trained without class c, the normal classifier, target high:c (Sec. 4.6)",
    "novel-class": "a classifier trained on some classes, a generator on the others, high confidence in each "
                   "classifier class (Sec. 4.7)",
    "always-ambiguous": "a classifier trained to be ambiguous between y and y+1, a generator on all classes, "
                        "targets ambiguous:i,i+1 for every i (Sec. 4.4)",
}
GENERATOR_KINDS_OF_USE_CASES = ("gan", "vae")  # the paper used GANs for these use cases


@dataclass(frozen=True)
class UseCasePlan:
    """What a use case samples with: models (a :class:`ModelSpec` to train, or a stored reference) and targets.

    ``classifier`` and ``generator`` are either a :class:`ModelSpec` (trained when it is missing,
    explicitly) or a reference string (a model id, ``default`` or a plugin path) resolved as given.
    """

    name: str
    classifier: ModelSpec | str
    generator: ModelSpec | str
    target: TargetSpec
    use_case: dict

    def model_specs(self) -> list[ModelSpec]:
        """The zoo models this plan trains when they are missing."""
        return [m for m in (self.classifier, self.generator) if isinstance(m, ModelSpec)]


def plan_use_case(registry, dataset: str, name: str, *, excluded_class: str | int | None = None,
                  classifier_classes: tuple | None = None, classifier: str | None = None,
                  generator: str | None = None) -> UseCasePlan:
    """The models and targets of one of the paper's use cases (:data:`USE_CASES`); trains nothing.

    Parameters
    ----------
    excluded_class
        misclassification: the class the generator never sees.
    classifier_classes
        novel-class: the classifier's classes (default 0, 1, 3, 6, 9 as in the paper).
    classifier
        misclassification: the classifier under test (default: the data set's default).
    generator
        ``gan`` (default, as in the paper) or ``vae`` to train the generator the use case needs, or a
        stored model id or plugin; a zoo generator that saw classes the use case must hide is refused.

    Raises
    ------
    ProbeError
        For an unknown use case, missing or bad classes, or a generator trained on the wrong classes.
    """
    if name not in USE_CASES:
        raise ProbeError(f"unknown use case {name!r}; choose one of {', '.join(USE_CASES)}")
    data = load_dataset(dataset, registry.data_dir)
    everything = tuple(range(data.num_classes))
    if name == "misclassification":
        if excluded_class is None:
            raise ProbeError("the misclassification use case needs the class the generator is trained without")
        excluded = data.class_index(excluded_class)
        kept = tuple(c for c in everything if c != excluded)
        return UseCasePlan(name, classifier or "default", _generator(registry, dataset, data, kept, generator),
                           TargetSpec.high(data.class_names, excluded),
                           {"name": name, "excluded_class": data.class_names[excluded]})
    if name == "novel-class":
        seen = tuple(sorted({data.class_index(c) for c in (classifier_classes or (0, 1, 3, 6, 9))}))
        unseen = tuple(c for c in everything if c not in seen)
        if not seen or not unseen:
            raise ProbeError("novel-class extrapolation needs a non-empty class subset and a non-empty rest")
        # the classifier's class k is the data set's class seen[k]
        seen_names = tuple(data.class_names[c] for c in seen)
        target = TargetSpec.join([TargetSpec.high(seen_names, k) for k in range(len(seen))])
        return UseCasePlan(name, ModelSpec(dataset=dataset, kind="classifier", classes=seen),
                           _generator(registry, dataset, data, unseen, generator), target,
                           {"name": name, "classifier_classes": [data.class_names[c] for c in seen],
                            "generator_classes": [data.class_names[c] for c in unseen]})
    names = data.class_names
    target = TargetSpec.join([TargetSpec.ambiguous(names, i, (i + 1) % len(names)) for i in everything])
    return UseCasePlan(name, ModelSpec(dataset=dataset, kind="classifier", ambiguous=True),
                       _generator(registry, dataset, data, everything, generator), target,
                       {"name": name, "pairs": [[names[i], names[(i + 1) % len(names)]] for i in everything]})


def _generator(registry, dataset: str, data, classes: tuple[int, ...], reference: str | None) -> ModelSpec | str:
    """A zoo generator spec trained on ``classes`` only, or a given reference checked against them."""
    if reference in (None, *GENERATOR_KINDS_OF_USE_CASES):
        return ModelSpec(dataset=dataset, kind=reference or "gan",
                         classes=None if len(classes) == data.num_classes else classes)
    if len(classes) < data.num_classes:
        stored_id = registry.default_id(dataset, "generator") if reference == "default" else reference
        record = registry.store.get_model(stored_id)
        trained_on = None if record is None else (record["spec"].get("classes") or list(range(data.num_classes)))
        if trained_on is not None and set(trained_on) - set(classes):
            shown = ", ".join(data.class_names[c] for c in sorted(set(trained_on) - set(classes)))
            raise ProbeError(f"generator {reference} was trained on classes this use case must keep from it "
                             f"({shown}); give --generator gan or vae to train one on "
                             f"{', '.join(data.class_names[c] for c in classes)} only")
    return reference


def prepare_use_case(registry, plan: UseCasePlan, dataset: str, device: str = "cpu", **settings) -> PreparedSample:
    """Train what the plan names and is missing (explicitly, with progress announced), then prepare the
    sample request of its targets on those models: a use case runs as the same
    :class:`~probe_core.bayestrex.request.SampleRequest` as ``probe sample`` and the Probe page.

    ``settings``: the request's settings (:data:`~probe_core.bayestrex.request.SAMPLE_SETTINGS`; None or left out
    takes the target's default).
    """
    registry = registry.remembering()  # the models trained or loaded here are the ones sampled
    kinds = {"classifier": plan.classifier, "generator": plan.generator}
    models = {kind: registry.get_or_train(model, device=device) if isinstance(model, ModelSpec)
              else registry.get_or_train_reference(model, kind, dataset, device=device)
              for kind, model in kinds.items()}
    request = SampleRequest.build(registry, dataset=dataset, target=plan.target, classifier=models["classifier"],
                                  generator=models["generator"], **settings)
    return prepare_sample(registry, request.derived(use_case=plan.use_case), device, suggest_generator=False)


def run_use_case(registry, plan: UseCasePlan, dataset: str, **settings) -> SamplingResult:
    """:func:`prepare_use_case`, then sample; the result names the use case (``use_case``).

    ``settings``: the sample request's settings (:data:`~probe_core.bayestrex.request.SAMPLE_SETTINGS`) and
    :func:`probe_target`'s runtime arguments.
    """
    prepared = prepare_use_case(registry, plan, dataset,
                                **{key: value for key, value in settings.items() if key in SAMPLE_SETTINGS})
    return probe_target(prepared, **{key: value for key, value in settings.items() if key not in SAMPLE_SETTINGS})


def high_confidence_misclassification(registry, dataset: str, excluded_class: str | int,
                                      classifier: str | None = None, generator: str | None = None,
                                      **sample_kwargs) -> SamplingResult:
    """Generator trained without class c (a GAN by default, as in the paper), normal classifier, target
    high:c (paper Sec. 4.6).

    Every hit is an in-distribution image of some *other* class on which the classifier is
    at least 90 % confident that it shows c.
    """
    plan = plan_use_case(registry, dataset, "misclassification", excluded_class=excluded_class,
                         classifier=classifier, generator=generator)
    return run_use_case(registry, plan, dataset, **sample_kwargs)


def novel_class_extrapolation(registry, dataset: str, classifier_classes: tuple = (0, 1, 3, 6, 9),
                              generator: str | None = None, **sample_kwargs) -> SamplingResult:
    """Classifier trained on some classes, generator (a GAN by default) on the others; target high
    confidence in each classifier class (paper Sec. 4.7). Hits show how confidently the classifier
    labels classes it never saw."""
    plan = plan_use_case(registry, dataset, "novel-class", classifier_classes=classifier_classes,
                         generator=generator)
    return run_use_case(registry, plan, dataset, **sample_kwargs)


def always_ambiguous(registry, dataset: str, generator: str | None = None, **sample_kwargs) -> SamplingResult:
    """The paper's control experiment (Sec. 4.4): a classifier trained to be ambiguous between y and
    y+1 on every image of y, a GAN on all classes, targets ambiguous:i,i+1 for every i. Sampling
    succeeds for all pairs when the classifier really is ambiguous on realistic images."""
    plan = plan_use_case(registry, dataset, "always-ambiguous", generator=generator)
    return run_use_case(registry, plan, dataset, **sample_kwargs)


def compare_classifiers(registry, store, dataset: str, classifier_a: str, classifier_b: str,
                        generator: str | None = None, **settings) -> int:
    """High-confidence samples per class for two classifiers on one generator (paper Table 3).

    Runs ``high:c`` for every class with each classifier and streams the samples into one
    ``compare`` run (``target_index = side * K + c``, side 0 for A and 1 for B). People then
    label a few per class (:func:`samples_to_label`, :meth:`Store.set_label` with
    ``sample_id``; the label is the class they see), and :func:`comparison_table` gives
    each classifier's accuracy on its own confident samples. A run that fails or is
    interrupted is finished as such; its stored samples are kept.

    ``settings``: any of :data:`~probe_core.bayestrex.compare.COMPARE_SETTINGS` (defaults and checks:
    :meth:`~probe_core.bayestrex.compare.CompareRequest.build`).

    Returns
    -------
    int
        The run id.
    """
    request = CompareRequest.build(registry, dataset=dataset, classifier_a=classifier_a, classifier_b=classifier_b,
                                   generator=generator, **settings)  # before any training
    # the run stores resolved references (trained first if they are missing defaults)
    first, second = (registry.get_or_train_reference(ref, "classifier", dataset).id for ref in request.classifiers)
    generator = registry.get_or_train_reference(request.generator, "generator", dataset).id
    if first == second:
        raise ProbeError(f"both references name the classifier {first}: pick two different classifiers to compare")
    run_id, _ = run_now(registry, request.derived(classifier_a=first, classifier_b=second, generator=generator))
    return run_id


def samples_to_label(store, run_id: int, per_class: int = 5) -> list[dict]:
    """A few stored hits per class and classifier of a comparison run (evenly spread over the run)."""
    chosen = []
    groups = defaultdict(list)
    for s in store.get_samples(run_id):
        groups[s["target_index"]].append(s)
    for target_index in sorted(groups):
        pool = [s for s in groups[target_index] if s["hit"]] or groups[target_index]
        stride = max(1, len(pool) // per_class)
        chosen.extend(pool[::stride][:per_class])
    return chosen


def comparison_table(store, run_id: int, source: str = "human") -> dict:
    """Accuracy of each classifier on its labelled high-confidence samples, per class and overall.

    A sample counts as correct when the majority of its labels equals the class the
    classifier was confident in. Samples without labels are left out.
    """
    run = store.get_run(run_id)
    if run is None or run.kind != ComparisonResult.kind:
        raise ProbeError(f"run {run_id} is not a classifier comparison")
    if not run.result:
        raise ProbeError(f"run {run_id} has not finished")
    compared = ComparisonResult.from_record(run.result)
    names = compared.class_names
    k = len(names)
    table = {}
    samples = store.get_samples(run_id)
    labels_by_sample = store.sample_labels(run_id, source)
    for side, classifier in enumerate(compared.classifiers):
        per_class = defaultdict(lambda: [0, 0])
        for s in samples:
            if s["target_index"] // k != side:
                continue
            labels = labels_by_sample.get(s["id"], [])
            if not labels:
                continue
            majority = max(set(labels), key=labels.count)
            c = s["target_index"] % k
            per_class[names[c]][0] += int(majority == names[c])
            per_class[names[c]][1] += 1
        correct = sum(v[0] for v in per_class.values())
        total = sum(v[1] for v in per_class.values())
        table[classifier] = {
            "per_class": {name: (v[0] / v[1], v[1]) for name, v in per_class.items()},
            "overall": correct / total if total else None,
            "labelled": total,
        }
    return table
