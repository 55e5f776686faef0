"""Defuse's correction step as a stored run: its request (:class:`CorrectRequest`), the plan chosen from the data's
size, and its job (the λ sweep of :mod:`probe_core.defuse.correction` beside a baseline; the corrected
classifier registered)."""

from __future__ import annotations

import logging
import math
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch

from probe_core.data import ImageDataset, is_real_size
from probe_core.data.classes import split_class_map
from probe_core.defuse.correction import (
    PAPER_LAMBDAS,
    PAPER_LEARNING_RATE,
    REAL_SIZE_LAMBDAS,
    REAL_SIZE_LEARNING_RATE,
    REAL_SIZE_SELECTION,
    REAL_SIZE_STEPS_PER_EPOCH,
    SELECTION_RULES,
    SMALL_IMAGE_SELECTION,
    VALIDATION_SOURCES,
    FailureRegion,
    LabelledImages,
    correction_splits,
    evaluate,
    finetune_sweep,
    sample_regions,
)
from probe_core.defuse.labels import DEFAULT_RHO, HUMAN, cluster_label_table
from probe_core.defuse.queries import distill_tau, labelled_failure_set, labelled_review_failures, load_run_models
from probe_core.defuse.results import CORRECT, DISTILL, CorrectionResult
from probe_core.errors import ProbeError
from probe_core.models.spec import MODEL_FILE_ARCHITECTURE, PLUGIN_ARCHITECTURE
from probe_core.progress import stage
from probe_core.runs.history import require_run
from probe_core.runs.lifecycle import JobContext, JobFunction, job_of, run_kind
from probe_core.runs.requests import BuiltFromSettings
from probe_core.runs.scaleout import parse_executor

log = logging.getLogger(__name__)
BASELINES = {
    "labelled-images": "finetune on the individually labelled failures: review images whose annotators' "
                       "majority class is not the classifier's prediction, each with its own label (the paper's)",
    "cluster-labels": "finetune on the identification failures in failure regions, each with its region's label "
                      "(Model Probe's earlier baseline; it inherits Defuse's clustering and labels)",
}


@run_kind(CorrectionResult)
@dataclass(frozen=True)
class CorrectRequest(BuiltFromSettings):
    """Correction settings; see :func:`finetune_sweep`. ``source`` picks whose labels are used.

    ``baseline`` is one of :data:`BASELINES` (default the paper's choice); ``selection`` one of
    :data:`~probe_core.defuse.correction.SELECTION_RULES`, None to choose it from the data's size
    (:func:`correction_plan`: the paper's rule below 32x32).
    ``lambdas`` and ``steps_per_epoch`` left as None are chosen from the data's size by
    :func:`correction_plan` (the paper's grid and full passes over D, or a smaller budget at real size), and so
    is ``validation``, one of :data:`~probe_core.defuse.correction.VALIDATION_SOURCES` (a slice of the training
    data, or at real size half of the test set as the paper's colour protocol), and so are ``learning_rate`` and
    ``keep_batch_statistics`` (:func:`finetuning_settings`).
    """

    setting_word: ClassVar[str] = "correction"
    ranges: ClassVar[dict] = {"rho": (0.0, 1.0), "epochs": (1, 1000), "samples_per_region": (1, 100_000),
                              "validation_fraction": (0.01, 0.9), "batch_size": (1, 4096),
                              "learning_rate": (1e-6, 1.0), "steps_per_epoch": (1, 1_000_000)}
    kind: ClassVar[str] = CORRECT
    follows_run: ClassVar[tuple[str, str]] = ("distill_run", DISTILL)

    distill_run: int
    source: str = HUMAN
    rho: float = DEFAULT_RHO
    lambdas: tuple[float, ...] | None = None
    epochs: int = 3
    samples_per_region: int = 256
    validation_fraction: float = 0.1
    batch_size: int = 64
    learning_rate: float | None = None
    steps_per_epoch: int | None = None
    seed: int = 0
    executor: str = "local"  # where the λ sweep runs (probe_core.runs.scaleout): local, or one Ray task per λ
    baseline: str = "labelled-images"
    selection: str | None = None
    validation: str | None = None
    keep_batch_statistics: bool | None = None

    def check_values(self) -> None:
        if self.lambdas is not None:
            self._check_lambdas()
        self.check_ranges()
        if self.baseline not in BASELINES:
            raise ProbeError(f"unknown baseline {self.baseline!r}; choose one of {', '.join(BASELINES)}")
        if self.selection is not None and self.selection not in SELECTION_RULES:
            raise ProbeError(f"unknown selection rule {self.selection!r}; choose one of "
                             f"{', '.join(SELECTION_RULES)}")
        if self.validation is not None and self.validation not in VALIDATION_SOURCES:
            raise ProbeError(f"unknown validation source {self.validation!r}; choose one of "
                             f"{', '.join(VALIDATION_SOURCES)}")

    def _check_lambdas(self) -> None:
        if not self.lambdas:
            raise ProbeError("give at least one λ")
        bad = [lam for lam in self.lambdas if not (isinstance(lam, (int, float)) and math.isfinite(lam) and lam >= 0)]
        if bad:
            raise ProbeError(f"every λ must be a finite number >= 0 (it weighs the failure loss), got "
                             f"{', '.join(map(str, bad))}")


@dataclass(frozen=True)
class CorrectionPlan:
    """What a correction runs with once the request's open settings are chosen from the data's size
    (:func:`correction_plan`).

    Attributes
    ----------
    lambdas : tuple of float
        The λ grid.
    steps_per_epoch : int or None
        Batches of D per epoch; None: a full pass over D.
    validation : str
        Where λ and the epoch are selected (:data:`~probe_core.defuse.correction.VALIDATION_SOURCES`).
    selection : str
        How they are selected (:data:`~probe_core.defuse.correction.SELECTION_RULES`).
    learning_rate : float
    keep_batch_statistics : bool
        Whether finetuning keeps BatchNorm's running statistics.
    note : str
        One line saying all of the above and which of it was chosen for the data.
    """

    lambdas: tuple[float, ...]
    steps_per_epoch: int | None
    validation: str
    selection: str
    learning_rate: float
    keep_batch_statistics: bool
    note: str


def correction_plan(settings: CorrectRequest, image_shape: tuple[int, int, int]) -> CorrectionPlan:
    """The λ grid, batches of D per epoch, validation source and finetuning settings a correction runs with,
    and a note saying where they come from.

    What the request gives is kept. Left as None, they are chosen from the data's size: the paper's 17 λ with
    full passes over D for images below 32x32; at real size (:func:`~probe_core.data.is_real_size`)
    :data:`~probe_core.defuse.correction.REAL_SIZE_LAMBDAS` and
    :data:`~probe_core.defuse.correction.REAL_SIZE_STEPS_PER_EPOCH` batches per epoch and the selection rule
    :data:`~probe_core.defuse.correction.REAL_SIZE_SELECTION` (the paper's below); the validation source by
    :func:`correction_validation` and the learning rate and BatchNorm statistics by :func:`finetuning_settings`.

    Parameters
    ----------
    settings : CorrectRequest
    image_shape : tuple of int
        The data set's (C, H, W).
    """
    real_size = is_real_size(image_shape)
    lambdas = tuple(settings.lambdas or (REAL_SIZE_LAMBDAS if real_size else PAPER_LAMBDAS))
    steps_per_epoch = settings.steps_per_epoch or (REAL_SIZE_STEPS_PER_EPOCH if real_size else None)
    validation = correction_validation(settings, image_shape)
    selection = settings.selection or (REAL_SIZE_SELECTION if real_size else SMALL_IMAGE_SELECTION)
    learning_rate, keep_batch_statistics = finetuning_settings(settings, image_shape)
    chosen = [what for what, given in (("λ grid", settings.lambdas), ("batches per epoch", settings.steps_per_epoch),
                                       ("selection rule", settings.selection)) if given is None]
    selected_by = ("validation accuracy" if selection == "data" else
                   "the mean of validation accuracy and accuracy on held-out failure-region samples")
    note = (f"{len(lambdas)} λ ({', '.join(f'{lam:g}' for lam in lambdas)}), {settings.epochs} epochs of "
            f"{'a full pass over D' if steps_per_epoch is None else f'{steps_per_epoch} batches of D'}, "
            f"selected by {selected_by} on {VALIDATION_SOURCES[validation].split(',')[0]}")
    note += f"; learning rate {learning_rate:g}" + (", BatchNorm statistics kept" if keep_batch_statistics else "")
    if chosen and real_size:
        why = []
        if settings.lambdas is None or settings.steps_per_epoch is None:
            why.append("the paper's 17 λ over full passes would take over half an hour on CPU")
        if settings.selection is None:
            why.append("the paper's selection rule left the SVHN-like stand-in's region of dark 3s unfixed")
        note += (f"; {', '.join(chosen)} chosen for real-size images ({image_shape[1]}x{image_shape[2]}): "
                 f"{' and '.join(why)} (--lambdas, --steps-per-epoch and --selection choose otherwise)")
    return CorrectionPlan(lambdas, steps_per_epoch, validation, selection, learning_rate, keep_batch_statistics,
                          note)


def correction_validation(settings: CorrectRequest, image_shape: tuple[int, int, int]) -> str:
    """Where the images selecting λ and the epoch come from (:data:`~probe_core.defuse.correction.VALIDATION_SOURCES`):
    the request's choice, else half of the test set for real-size images (the paper's SVHN and German-signs
    protocol) and a slice of the training data for smaller ones."""
    if settings.validation is not None:
        return settings.validation
    return "test-half" if is_real_size(image_shape) else "training"


def finetuning_settings(settings: CorrectRequest, image_shape: tuple[int, int, int]) -> tuple[float, bool]:
    """The finetuning's learning rate and whether BatchNorm statistics are kept: the request's choices, else the
    paper's Adam at 1e-3 below 32x32 and, on real-size images, 1e-4 with the statistics kept
    (:data:`~probe_core.defuse.correction.REAL_SIZE_LEARNING_RATE`)."""
    real_size = is_real_size(image_shape)
    learning_rate = settings.learning_rate
    if learning_rate is None:
        learning_rate = REAL_SIZE_LEARNING_RATE if real_size else PAPER_LEARNING_RATE
    keep = settings.keep_batch_statistics
    return learning_rate, real_size if keep is None else bool(keep)


@job_of(CorrectRequest)
def correct_job(registry, settings: CorrectRequest, device: str = "cpu") -> JobFunction:
    """Correction as a job: Defuse and baseline λ sweeps, results table, corrected model registered."""

    def run(context: JobContext) -> CorrectionResult:
        started = time.perf_counter()
        store = context.store
        require_run(store, settings.distill_run, DISTILL)
        dataset, classifier, vae = load_run_models(registry, store, settings.distill_run, device)
        table = cluster_label_table(store, settings.distill_run, dataset.class_names, settings.source, settings.rho)
        usable = [r for r in table if r["usable"]]
        if not usable:
            raise ProbeError(
                f"no cluster of run {settings.distill_run} is labelled ({settings.source}) as a failure with a "
                f"class; label clusters first (Label page, `probe defuse label`, or --auto-label oracle:MODEL)")
        clusters = {c["id"]: c for c in store.get_clusters(settings.distill_run)}
        regions = [FailureRegion(r["id"], clusters[r["id"]]["mean"], clusters[r["id"]]["covariance"],
                                 dataset.class_names.index(r["label"])) for r in usable]
        plan = correction_plan(settings, dataset.image_shape)
        log.info("correction: %s", plan.note)
        rng = np.random.default_rng(settings.seed)
        context.report(0.0, f"sampling {len(regions)} failure regions; {plan.note}", force=True)
        sets = sample_regions(vae.module, regions, distill_tau(store, settings.distill_run),
                              settings.samples_per_region, rng)
        train, validation, test = correction_splits(dataset.train_images, dataset.train_labels, dataset.test_images,
                                                    dataset.test_labels, plan.validation,
                                                    settings.validation_fraction, settings.seed)
        before = evaluate(classifier.module, test, sets["test"])
        baseline_set = _baseline_failures(store, vae, settings, dataset)
        executor = parse_executor(settings.executor)
        sweep_args = {"lambdas": plan.lambdas, "epochs": settings.epochs, "batch_size": settings.batch_size,
                      "learning_rate": plan.learning_rate, "keep_batch_statistics": plan.keep_batch_statistics,
                      "steps_per_epoch": plan.steps_per_epoch,
                      "seed": settings.seed, "selection": plan.selection,
                      "executor": executor if executor.distributed else None}

        defuse_model, selected, sweep = finetune_sweep(
            classifier.module, train, validation, sets["finetune"], sets["validation"], test, sets["test"],
            phase="defuse", reporter=stage(context, 0.0, 0.5), **sweep_args)
        baseline_model, baseline_selected, baseline_sweep = finetune_sweep(
            classifier.module, train, validation, baseline_set, sets["validation"], test, sets["test"],
            phase="baseline", reporter=stage(context, 0.5, 1.0), **sweep_args)
        after = evaluate(defuse_model, test, sets["test"])
        baseline = evaluate(baseline_model, test, sets["test"])
        record = corrected_model_record(classifier, dataset)
        corrected_id = f"{record.pop('id_stem')}-defuse-r{context.run_id}"
        record.update(parent=classifier.id, defuse={"distill_run": settings.distill_run, "correct_run": context.run_id,
                                                    "lambda": selected["lambda"], "source": settings.source})
        registry.register(defuse_model.net, record,
                          {"test_accuracy": after["test_accuracy"], "failure_accuracy": after["failure_accuracy"]},
                          corrected_id)
        return CorrectionResult(
            distill_run=settings.distill_run, source=settings.source,
            regions=[{"cluster_id": r.cluster_id, "label": dataset.class_names[r.label],
                      **({"recognisable": clusters[r.cluster_id]["info"]["recognisable"]}
                         if "recognisable" in clusters[r.cluster_id]["info"] else {})} for r in regions],
            results={"before": before, "defuse": {**after, **selected},
                     "baseline": {**baseline, **baseline_selected, "kind": settings.baseline,
                                  "description": BASELINES[settings.baseline]}},
            selection={"rule": plan.selection, "description": SELECTION_RULES[plan.selection],
                       "validation": plan.validation,
                       "validation_description": VALIDATION_SOURCES[plan.validation]},
            sweep=sweep, baseline_sweep=baseline_sweep, baseline_failures=len(baseline_set),
            lambdas_not_done={phase: sorted(set(plan.lambdas) - {entry["lambda"] for entry in entries})
                              for phase, entries in (("defuse", sweep), ("baseline", baseline_sweep))},
            corrected_model=corrected_id, original_model=classifier.id,
            seconds=round(time.perf_counter() - started, 2), steps_per_epoch=plan.steps_per_epoch, budget=plan.note)

    return run


def corrected_model_record(classifier, dataset: ImageDataset) -> dict:
    """Registry metadata for a finetuned copy of ``classifier`` (a zoo model or a plugin).

    A plugin classifier's copy is registered with the plugin's reference as its architecture:
    it loads back through the same plugin file (checked by its sha256) with the finetuned weights.
    ``id_stem`` is what the corrected model's id starts with.
    """
    reference, _ = split_class_map(classifier.id)
    class_map = classifier.class_match.given_map if classifier.class_match is not None else {}
    if "spec" in classifier.record:
        return {**classifier.record["spec"], "class_map": class_map or classifier.record["spec"].get("class_map"),
                "id_stem": reference}
    source_name = Path(classifier.record["path"]).stem
    architecture = MODEL_FILE_ARCHITECTURE if classifier.kind.startswith("file-") else PLUGIN_ARCHITECTURE
    return {"dataset": dataset.name, "kind": "classifier", "class_names": list(classifier.native_class_names),
            "image_shape": list(dataset.image_shape), "dataset_view": dataset.name, "class_map": class_map or None,
            "architecture": {"class": architecture, "args": {"reference": reference}},
            "id_stem": f"{architecture}-{re.sub(r'[^A-Za-z0-9]+', '-', source_name).strip('-')}-"
                       f"{classifier.record['sha256'][:8]}"}


@torch.no_grad()
def _baseline_failures(store, vae, settings: CorrectRequest, dataset: ImageDataset) -> LabelledImages:
    """D_f of the baseline (:data:`BASELINES`)."""
    if settings.baseline == "labelled-images":
        chosen = labelled_review_failures(store, settings.distill_run, dataset.class_names, settings.source,
                                          settings.rho)
        if not len(chosen["labels"]):
            raise ProbeError(
                f"the paper's baseline finetunes on individually labelled failures, and run {settings.distill_run} "
                f"has none ({settings.source}): no review image is labelled with a class other than the classifier's "
                f"prediction. Label review images, or choose the baseline 'cluster-labels'")
        images = torch.from_numpy(chosen["images"])
        return LabelledImages(images, torch.from_numpy(chosen["labels"]), torch.full((len(images),), -1))
    chosen = labelled_failure_set(store, settings.distill_run, dataset.class_names, settings.source, settings.rho)
    device = next(vae.module.parameters()).device
    latents = torch.from_numpy(chosen["latents"]).to(device)
    images = torch.cat([vae.module.decode(latents[s:s + 4096]).cpu() for s in range(0, len(latents), 4096)])
    return LabelledImages(images, torch.from_numpy(chosen["labels"]), torch.full((len(images),), -1))
