"""The paper's use cases as functions over a registry: misclassification, novel class, classifier comparison.

Each returns the :func:`~probe_core.bayestrex.sample.sample` result with keys naming the models it used;
the comparison is labelled by people (:func:`samples_to_label`, :func:`comparison_table`).
"""

from __future__ import annotations

from collections import defaultdict

from probe_core.bayestrex.run import sample
from probe_core.catalog import load_dataset
from probe_core.errors import ProbeError
from probe_core.models import ModelSpec


def _models(registry, dataset: str, classifier: str | None, generator: str | None):
    return (registry.get_or_train_reference(classifier or "default", "classifier", dataset),
            registry.get_or_train_reference(generator or "default", "generator", dataset))


def probe_target(registry, dataset: str, spec: str, classifier: str | None = None, generator: str | None = None,
                 **sample_kwargs) -> dict:
    """Any target spec (high confidence, ambiguous pair, ambiguity matrix, uniform, path) on chosen models."""
    clf, gen = _models(registry, dataset, classifier, generator)
    data = load_dataset(dataset, registry.data_dir)
    result = sample(clf.module, gen.module, spec, class_names=clf.class_names or data.class_names,
                    dataset=data if clf.kind == "classifier" else None, **sample_kwargs)
    result.update(dataset=dataset, classifier=clf.id, generator=gen.id)
    return result


def high_confidence_misclassification(registry, dataset: str, excluded_class: str | int,
                                      classifier: str | None = None, **sample_kwargs) -> dict:
    """Generator trained without class c, normal classifier, target high:c (paper Sec. 4.6).

    Every hit is an in-distribution image of some *other* class on which the classifier is
    at least 90 % confident that it shows c.
    """
    data = load_dataset(dataset, registry.data_dir)
    excluded = data.class_index(excluded_class)
    kept = tuple(c for c in range(data.num_classes) if c != excluded)
    generator = registry.get_or_train(ModelSpec(dataset=dataset, kind="vae", classes=kept))
    result = probe_target(registry, dataset, f"high:{excluded}", classifier, generator.id, **sample_kwargs)
    result["use_case"] = {"name": "misclassification", "excluded_class": data.class_names[excluded]}
    return result


def novel_class_extrapolation(registry, dataset: str, classifier_classes: tuple[int, ...] = (0, 1, 3, 6, 9),
                              **sample_kwargs) -> dict:
    """Classifier trained on some classes, generator on the others; target high confidence in each
    classifier class (paper Sec. 4.7). Hits show how confidently the classifier labels classes it
    never saw."""
    data = load_dataset(dataset, registry.data_dir)
    seen = tuple(sorted(data.class_index(c) for c in classifier_classes))
    unseen = tuple(c for c in range(data.num_classes) if c not in seen)
    if not seen or not unseen:
        raise ProbeError("novel-class extrapolation needs a non-empty class subset and a non-empty rest")
    classifier = registry.get_or_train(ModelSpec(dataset=dataset, kind="classifier", classes=seen))
    generator = registry.get_or_train(ModelSpec(dataset=dataset, kind="vae", classes=unseen))
    spec = ";".join(f"high:{name}" for name in classifier.class_names)  # names win over indices in specs
    result = sample(classifier.module, generator.module, spec, class_names=classifier.class_names, **sample_kwargs)
    result.update(dataset=dataset, classifier=classifier.id, generator=generator.id,
                  use_case={"name": "novel-class", "classifier_classes": [data.class_names[c] for c in seen],
                            "generator_classes": [data.class_names[c] for c in unseen]})
    return result


def compare_classifiers(registry, store, dataset: str, classifier_a: str, classifier_b: str,
                        generator: str | None = None, chains: int = 8, warmup: int = 100, samples: int = 50,
                        keep_every: int = 10, **sample_kwargs) -> int:
    """High-confidence samples per class for two classifiers on one generator (paper Table 3).

    Runs ``high:c`` for every class with each classifier and streams the samples into one
    ``compare`` run (``target_index = side * K + c``, side 0 for A and 1 for B). People then
    label a few per class (:func:`samples_to_label`, :meth:`Store.set_label` with
    ``sample_id``; the label is the class they see), and :func:`comparison_table` gives
    each classifier's accuracy on its own confident samples. A run that fails or is
    interrupted is finished as such; its stored samples are kept.

    Returns
    -------
    int
        The run id.
    """
    from probe_core.runconfig import CompareConfig, run_now

    # the run stores resolved references (trained first if they are missing defaults)
    first, second = (registry.get_or_train_reference(ref, "classifier", dataset).id for ref in (classifier_a, classifier_b))
    generator = registry.get_or_train_reference(generator or "default", "generator", dataset).id
    run_id, _ = run_now(registry, CompareConfig(dataset=dataset, classifier_a=first, classifier_b=second,
                                                generator=generator, chains=chains, warmup=warmup, samples=samples,
                                                keep_every=keep_every, **sample_kwargs))
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
    if run is None or run.kind != "compare":
        raise ProbeError(f"run {run_id} is not a classifier comparison")
    names = run.result["class_names"] if run.result else None
    if names is None:
        raise ProbeError(f"run {run_id} has not finished")
    k = len(names)
    table = {}
    for side, classifier in enumerate(run.result["classifiers"]):
        per_class = defaultdict(lambda: [0, 0])
        for s in store.get_samples(run_id):
            if s["target_index"] // k != side:
                continue
            labels = [l["label"] for l in store.get_labels(sample_id=s["id"], source=source)]
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
