"""The Bayes-TrEx use cases as functions over a workspace, each also a ``probe recipe`` command.

Every function returns the :func:`probe_core.bayestrex.sample` result dict with extra
keys naming the models it used; pass ``store``/``run_id`` through ``sample_kwargs`` to
stream samples into the workspace.
"""

from __future__ import annotations

from collections import defaultdict

from probe_core.bayestrex import sample
from probe_core.catalog import load_dataset
from probe_core.errors import CancelledError, ProbeError
from probe_core.lifecycle import training_announcer
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


def compare_job(registry, dataset: str, classifier_a: str, classifier_b: str, generator: str | None = None,
                chains: int = 8, warmup: int = 100, samples: int = 50, keep_every: int = 10, **sample_kwargs):
    """The work of :func:`compare_classifiers` as a job (the dashboard runs it in the background)."""

    def run(context) -> dict:
        models = registry.announcing(training_announcer(context))
        data = load_dataset(dataset, models.data_dir)
        gen = models.get_or_train_reference(generator or "default", "generator", dataset)
        sides = [models.get_or_train_reference(ref, "classifier", dataset) for ref in (classifier_a, classifier_b)]
        names = tuple(sides[0].class_names or data.class_names)
        if tuple(sides[1].class_names or data.class_names) != names:
            raise ProbeError("both classifiers must have the same classes to be compared")
        spec = ";".join(f"high:{name}" for name in names)
        summaries = []
        for side, clf in enumerate(sides):
            def on_progress(progress, side=side) -> None:
                context.report((side + progress.iteration / max(progress.total, 1)) / 2,
                               f"classifier {'AB'[side]}: {progress.stage} {progress.iteration}/{progress.total}")

            result = sample(clf.module, gen.module, spec, class_names=names, chains=chains, warmup=warmup,
                            samples=samples, store=context.store, run_id=context.run_id, keep_every=keep_every,
                            target_index_offset=side * len(names), progress=on_progress, **sample_kwargs)
            summaries.append({"classifier": clf.id, "hit_rates": [t["hit_rate"] for t in result["targets"]]})
        return {"sides": summaries, "class_names": list(names), "classifiers": [s.id for s in sides],
                "generator": gen.id}

    return run


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


class LiveTrace:
    """What the dashboard draws while a run goes: per-chain traces, diagnostics and current images.

    Fed the sampler's :class:`~probe_core.sampling.Progress` reports; :meth:`details` is
    the JSON written to the run's ``details`` (bounded: at most ``max_chains`` chains and
    ``max_points`` points per trace).

    Parameters
    ----------
    targets : list of Target
        The run's targets, in batch order.
    chains_per_target : int
    """

    def __init__(self, targets: list, chains_per_target: int, max_chains: int = 16, max_points: int = 300) -> None:
        import torch

        self.targets = targets
        self.target_of_chain = torch.arange(len(targets)).repeat_interleave(chains_per_target)
        self.shown = torch.linspace(0, len(self.target_of_chain) - 1, min(max_chains, len(self.target_of_chain))).long()
        self.max_points = max_points
        self.iterations: list[int] = []
        self.logdensity: list[list[float]] = []
        self.confidence: list[list[float]] = []
        self.acceptance: list[float] = []
        self.step_size: list[float] = []
        self.sampling_positions: list = []
        self.latest: dict = {}

    def update(self, progress) -> None:
        """Record one report (tensors of shape (B, ...) over all chains)."""
        import torch

        from probe_core.diagnostics import effective_sample_size, split_rhat

        chains = self.shown
        watched = torch.tensor([self.targets[int(self.target_of_chain[c])].reported_classes[0] for c in chains])
        self.iterations.append(int(progress.iteration))
        self.logdensity.append([round(float(v), 3) for v in progress.logdensity[chains]])
        self.confidence.append([round(float(v), 4) for v in progress.probs[chains, watched]])
        self.acceptance.append(round(float(progress.acceptance.mean()), 4))
        self.step_size.append(float(progress.step_size.median()))
        if progress.stage == "sampling":
            self.sampling_positions.append(progress.position.detach().cpu().clone())
        for series in (self.iterations, self.logdensity, self.confidence, self.acceptance, self.step_size):
            del series[:-self.max_points]
        diagnostics = {}
        if len(self.sampling_positions) >= 4:
            positions = torch.stack(self.sampling_positions[-200:], dim=1)  # (B, S, D)
            diagnostics = {"rhat": split_rhat(positions), "ess": effective_sample_size(positions)}
        images = progress.images
        self.latest = {
            "stage": progress.stage, "iteration": int(progress.iteration), "total": int(progress.total),
            "sigma": float(progress.sigma), "divergences": int(progress.divergences.sum()), **diagnostics,
            "images": [] if images is None else images.cpu().numpy().round(3).tolist(),
            "image_confidences": [] if images is None else progress.probs[:len(images)].numpy().round(4).tolist(),
        }

    def details(self) -> dict:
        return {"trace": {"iteration": self.iterations, "logdensity": self.logdensity, "confidence": self.confidence,
                          "acceptance": self.acceptance, "step_size": self.step_size,
                          "chains": self.shown.tolist()},
                **self.latest}


def sampling_job(registry, dataset: str, spec: str, classifier: str | None = None, generator: str | None = None,
                 **sample_kwargs):
    """:func:`probe_target` as a background job that streams samples and a :class:`LiveTrace` to its run.

    The result is the sample result without the per-sample records (they are in the
    store), so it stays small enough for the runs table.
    """
    from probe_core.targets import parse_targets

    def run(context) -> dict:
        models = registry.announcing(training_announcer(context))
        clf = models.get_or_train_reference(classifier or "default", "classifier", dataset)
        targets = parse_targets(spec, clf.class_names or load_dataset(dataset, models.data_dir).class_names)
        chains = 1 if sample_kwargs.get("sampler") == "nuts" else sample_kwargs.get("chains", 64)
        trace = LiveTrace(targets, chains)
        stop = {"requested": False}

        def on_progress(progress) -> None:
            trace.update(progress)
            try:
                context.report(progress.iteration / max(progress.total, 1),
                               f"{progress.stage} {progress.iteration}/{progress.total}", trace.details())
            except CancelledError:  # stop at the next check and still summarise what was kept
                stop["requested"] = True

        context.report(0.0, "loading models and starting chains", force=True)
        result = probe_target(models, dataset, spec, classifier, generator, store=context.store,
                              run_id=context.run_id, progress=on_progress, should_stop=lambda: stop["requested"],
                              **sample_kwargs)
        for entry in result["targets"]:
            entry.pop("samples", None)
        # written directly: after a stop request, context.report would raise instead of recording the summary
        context.store.update_run(context.run_id, 1.0, "stopped early; summary of what was kept"
                                 if result["cancelled"] else "done", trace.details())
        return result

    return run
