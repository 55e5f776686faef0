"""Defuse as notebook verbs (``mp.defuse.identify``, ``distill``, ``label``, ``correct``): stored runs, result objects.

Each verb builds its step's settings (validated once, as they are made), runs it through the one lifecycle
(:func:`probe_core.runs.lifecycle.run_now`) in the workspace, so the dashboard shows it, and returns the run
read back as a result object.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from probe_core.catalog import load_dataset
from probe_core.data import DEFAULT_DATASET
from probe_core.defuse.labels import HUMAN, label_images
from probe_core.defuse.queries import distill_tau, failures_of, load_run_models, report, run_class_names
from probe_core.defuse.results import CorrectionResult
from probe_core.defuse.review import auto_label, review_images
from probe_core.defuse.steps import CorrectRequest, DistillRequest, IdentifyRequest
from probe_core.errors import ProbeError
from probe_core.models.devices import resolve_device
from probe_core.models.kept import references
from probe_core.reporting.figures import agreement_figure, confusion_figure, tradeoff_figure
from probe_core.runs.lifecycle import run_now
from probe_core.runs.workspace import open_workspace


def _run_id(value) -> int:
    return int(getattr(value, "run_id", value))


@dataclass
class IdentifyResult:
    """A Defuse identification run: the misclassified decodings of perturbed training codes.

    Attributes
    ----------
    run_id : int
    request : IdentifyRequest
        With the classifier's and VAE's stored references.
    failures : FailureSet
        ``latents`` (N, D), ``images`` (N, C, H, W) uint8, ``true_labels`` and ``predictions`` (N,),
        ``confidences`` (N, K), ``source_index`` (N,).
    outcome : IdentificationResult
        The run's result (counts, seconds, the models, the VAE's check).
    class_names : list of str
        The data set's K classes, in label order.
    """

    run_id: int
    request: object
    failures: object
    outcome: object = None
    class_names: list = field(default_factory=list)

    def summary(self) -> str:
        return (f"identification run {self.run_id}: {len(self.failures.latents)} failures of "
                f"{self.request.classifier} on {self.request.dataset}")

    def to_pandas(self):
        """One row per failure: the original's true label, the prediction and its confidence."""
        import pandas as pd

        return pd.DataFrame({"source_index": self.failures.source_index, "true_label": self.failures.true_labels,
                             "prediction": self.failures.predictions,
                             "confidence": self.failures.confidences.max(1)})

    def plot(self):
        """How the failures fall: true class (rows) against prediction (columns), counts (``go.Figure``)."""
        names = self.class_names or [str(k) for k in range(self.failures.confidences.shape[1])]
        return confusion_figure(self.failures.true_labels, self.failures.predictions, names)


    def __repr__(self) -> str:
        return f"IdentifyResult({self.summary()!r})"


@dataclass
class DefuseReport:
    """A distillation (and, after :func:`correct`, correction) run read back: its clusters and results.

    Attributes
    ----------
    run_id : int
        The distillation run (pass it, or this object, to :func:`label`, :func:`correct` and suites).
    report : dict
        :func:`probe_core.defuse.queries.report`: ``clusters`` (``id``, ``size``, ``weight``,
        ``majority_prediction``, ``is_failure``, ``label``, agreement), ``results`` (``before``, ``defuse``,
        ``baseline`` accuracies, once corrected), ``corrected_model``.
    source : str
        Whose labels the report aggregates (``human`` or ``oracle:MODEL``).
    """

    run_id: int
    report: dict
    source: str = HUMAN
    correct_run: int | None = None
    sweeps: dict = field(default_factory=dict)

    @property
    def corrected_model(self) -> str | None:
        """The finetuned classifier's model id, once corrected."""
        return self.report.get("corrected_model")

    def to_pandas(self):
        """The clusters, one row each (or, once corrected, the before / Defuse / baseline accuracies)."""
        import pandas as pd

        results = self.report.get("results") or {}
        if results:
            return pd.DataFrame([{"model": name, "test_accuracy": row.get("test_accuracy"),
                                  "failure_accuracy": row.get("failure_accuracy")} for name, row in results.items()])
        return pd.DataFrame(self.report["clusters"])

    def summary(self) -> str:
        regions = [c for c in self.report["clusters"] if c.get("is_failure")]
        text = (f"distillation run {self.run_id}: {len(self.report['clusters'])} clusters, {len(regions)} labelled "
                f"failure regions ({self.source})")
        results = self.report.get("results") or {}
        if results:
            text += "; " + ", ".join(f"{name}: test {row['test_accuracy']:.1%}, failures {row['failure_accuracy']:.1%}"
                                     for name, row in results.items() if row.get("test_accuracy") is not None)
        return text

    def plot(self):
        """Once corrected, the Finetune page's trade-off over λ; before, the Label page's annotator agreement
        (``go.Figure``; None while nothing is labelled)."""
        if self.sweeps.get("sweep"):
            return tradeoff_figure(self.sweeps["sweep"], self.sweeps.get("baseline_sweep", []))
        return agreement_figure(self.report.get("agreement") or {})

    def __repr__(self) -> str:
        return f"DefuseReport({self.summary()!r})"


def _report(space, distill_run: int, source: str, correct_run: int | None = None) -> DefuseReport:
    names = run_class_names(space.store, distill_run, space.registry.data_dir)
    corrected = space.store.get_run(correct_run) if correct_run is not None else None
    outcome = CorrectionResult.from_record(corrected.result) if corrected is not None and corrected.result else None
    sweeps = {"sweep": outcome.sweep, "baseline_sweep": outcome.baseline_sweep} if outcome is not None else {}
    return DefuseReport(distill_run, report(space.store, distill_run, names, source, correct_run=correct_run), source,
                        correct_run, sweeps)


def identify(classifier="default", dataset=DEFAULT_DATASET, vae="default", *, class_names=None, input_shape=None,
             class_map: str | None = None, workspace=None, device: str = "auto", progress: bool = True,
             **settings) -> IdentifyResult:
    """Find failures: perturb the VAE codes of training images and keep the misclassified decodings.

    ``classifier`` and ``vae`` are references or in-memory modules, ``dataset`` a name or ``(x, y)`` arrays,
    as in :func:`probe_core.api.sample` (``class_names``, ``input_shape``). ``settings`` are
    :class:`~probe_core.defuse.steps.IdentifyRequest` fields (``samples_per_image``, ``max_per_image``,
    ``noise``, ``noise_scale``, ``max_images``, ``seed``, ``executor``, ``shards``, ``judge``, ``judge_sure``: a
    classifier other than the probed one that must still see the source class in a failure). A missing default model
    is trained first (announced); the classifier is checked on the data first.
    """
    space = open_workspace(workspace)

    device = str(resolve_device(device))  # "auto": CUDA when present
    dataset, classifier, vae = references(space, dataset, classifier, vae, class_names, input_shape)
    request = IdentifyRequest.build(space.registry, device=device, train_missing=True, dataset=dataset,
                                    classifier=classifier, class_map=class_map, vae=vae, **settings)
    run_id, outcome = run_now(space.registry, request, device=device,
                             progress_bar="identifying failures" if progress else None)
    names = list(load_dataset(request.dataset, space.registry.data_dir).class_names)
    return IdentifyResult(run_id, request, failures_of(space.store, run_id), outcome, names)


def distill(identified, *, workspace=None, device: str = "auto", progress: bool = True, **settings) -> DefuseReport:
    """Cluster an identification's failures (Dirichlet-process GMM) into failure regions to label.

    ``identified``: an :class:`IdentifyResult` or its run id; ``settings``:
    :class:`~probe_core.defuse.steps.DistillRequest` fields (``n_components``, ``weight_threshold``, ``tau``...).
    """
    space = open_workspace(workspace)

    device = str(resolve_device(device))  # "auto": CUDA when present
    request = DistillRequest.build(space.registry, identify_run=_run_id(identified), **settings)
    run_id, _ = run_now(space.registry, request, device=device, progress_bar="distilling" if progress else None)
    return _report(space, run_id, HUMAN)


def label(distilled, labels: dict | None = None, *, annotator: str | None = None, oracle: str | None = None,
          workspace=None, device: str = "auto") -> DefuseReport:
    """Label every image of clusters' review sets, as the Label page does; returns the aggregated report.

    Parameters
    ----------
    distilled : DefuseReport or int
    labels : dict, optional
        ``{cluster id: the class its review images show, or "none"}``, stored under ``annotator``.
    oracle : str, optional
        Instead of people: a classifier reference that labels each review image with its prediction
        (stored as ``oracle:MODEL``, never mixed with people's labels; for demos and tests).
    """
    space = open_workspace(workspace)

    device = str(resolve_device(device))  # "auto": CUDA when present
    distill_run = _run_id(distilled)
    if (labels is None) == (oracle is None):
        raise ProbeError("give either labels ({cluster id: class}) with an annotator, or an oracle classifier")
    if oracle is not None:
        source, _ = auto_label(space.registry, space.store, distill_run, oracle, device=device)
        return _report(space, distill_run, source)
    if not annotator:
        raise ProbeError("labels need the annotator's name")
    dataset, classifier, vae = load_run_models(space.registry, space.store, distill_run, device)
    clusters = {cluster["id"]: cluster for cluster in space.store.get_clusters(distill_run)}
    unknown = sorted(set(labels) - set(clusters))
    if unknown:
        raise ProbeError(f"run {distill_run} has no cluster {', '.join(map(str, unknown))}; its clusters are "
                         f"{', '.join(map(str, sorted(clusters)))}")
    tau = distill_tau(space.store, distill_run)
    for cluster_id, shown_class in labels.items():
        shown = review_images(space.store, vae, classifier, clusters[cluster_id], tau)
        label_images(space.store, shown["ids"], annotator, shown_class, dataset.class_names)
    return _report(space, distill_run, HUMAN)


def correct(distilled, *, source: str | None = None, workspace=None, device: str = "auto", progress: bool = True,
            **settings) -> DefuseReport:
    """Finetune the classifier with L(D) + λ·CE(D_f) over a λ sweep; the report's ``results`` hold before,
    Defuse and baseline accuracies and ``corrected_model`` the new classifier's id.

    ``source``: whose labels (default: those of the report passed in, else ``human``); ``settings``:
    :class:`~probe_core.defuse.steps.CorrectRequest` fields (``lambdas``, ``epochs``, ``selection``...).
    """
    space = open_workspace(workspace)

    device = str(resolve_device(device))  # "auto": CUDA when present
    source = source or getattr(distilled, "source", HUMAN)
    distill_run = _run_id(distilled)
    request = CorrectRequest.build(space.registry, distill_run=distill_run, source=source, **settings)
    correct_run, _ = run_now(space.registry, request, device=device, progress_bar="finetuning" if progress else None)
    return _report(space, distill_run, source, correct_run)
