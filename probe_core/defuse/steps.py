"""The Defuse steps as stored runs: settings, jobs, and running them (identify -> distill -> correct).

Each step is a job (``fn(context) -> result``) with typed settings that carry their run kind; the
CLI runs it inline (:func:`run_step`) and the dashboard submits it to a worker (:func:`submit_step`).
"""

from __future__ import annotations

import logging
import math
import re
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch

from probe_core.catalog import load_dataset
from probe_core.data import DEFAULT_DATASET, ImageDataset, is_real_size
from probe_core.data.classes import split_class_map
from probe_core.defuse.cluster import FailureClusterer, describe_clusters, review_tau
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
from probe_core.defuse.identification import (
    NOISE_MODES,
    FailureSet,
    concatenate_failures,
    default_noise,
    identify_failures,
)
from probe_core.defuse.labels import DEFAULT_RHO, HUMAN, cluster_label_table
from probe_core.defuse.queries import (
    distill_tau,
    failures_of,
    labelled_failure_set,
    labelled_review_failures,
    load_run_models,
    run_models,
)
from probe_core.defuse.results import (
    CORRECT,
    DISTILL,
    EMBEDDING,
    IDENTIFY,
    CorrectionResult,
    DistillationResult,
    EmbeddingResult,
    IdentificationResult,
)
from probe_core.defuse.review import embedding
from probe_core.errors import CancelledError, ProbeError
from probe_core.models.registry import MODEL_FILE_ARCHITECTURE, PLUGIN_ARCHITECTURE
from probe_core.runs.history import require_run
from probe_core.runs.lifecycle import (
    JobContext,
    JobFunction,
    job_of,
    run_inline,
    run_kind,
    run_now,
    submit,
    training_announcer,
)
from probe_core.runs.requests import BuiltFromSettings, classifier_class_names, record
from probe_core.runs.scaleout import (
    SHARDS_RANGE,
    Reporter,
    ShardTask,
    parse_executor,
    shard_count,
    shard_seed,
    split_evenly,
)
from probe_core.runs.validation import checked_models


@run_kind(IdentificationResult)
@dataclass(frozen=True)
class IdentifyRequest(BuiltFromSettings):
    """Identification settings (Defuse Algorithm 1); see :func:`identify_failures`.

    ``noise``, ``a`` and ``b`` left as None are chosen from the images' size when the request is checked or the
    run starts (:func:`~probe_core.defuse.identification.default_noise`): centred noise of sd ``noise_scale``
    below 32x32, the papers' Beta(75, 75) at real size.
    """

    setting_word: ClassVar[str] = "identification"
    ranges: ClassVar[dict] = {"samples_per_image": (1, 100_000), "max_per_image": (1, 100_000),
                              "noise_scale": (0.001, 10.0), "max_images": (1, 10_000_000), "shards": SHARDS_RANGE}
    kind: ClassVar[str] = IDENTIFY

    dataset: str = DEFAULT_DATASET
    classifier: str = "default"
    vae: str = "default"
    samples_per_image: int = 500  # DEFAULT_SAMPLES_PER_IMAGE
    max_per_image: int = 100
    noise: str | None = None
    a: float | None = None
    b: float | None = None
    noise_scale: float = 0.15
    seed: int = 0
    max_images: int | None = None
    executor: str = "local"  # where the image shards run (probe_core.runs.scaleout): local, ray or ray:ADDRESS
    shards: int | None = 1  # training images in this many shards, each with its own seed; None: one per worker
    allow_weak_classifier: bool = False  # identify with a classifier near chance (refused otherwise; flagged)
    # DistillRequest fields (all but identify_run) to distil with as soon as identification ends, as a
    # distillation run of its own (the Failures page's one button); None: identification only
    distill_after: dict | None = None

    def __post_init__(self) -> None:
        if self.distill_after is not None:
            if not isinstance(self.distill_after, dict) or "identify_run" in self.distill_after:
                raise ProbeError("distill_after holds distillation settings (not the identification run)")
            try:
                DistillRequest.build(identify_run=0, **self.distill_after)
            except ProbeError as exc:
                raise ProbeError(f"distill_after: {exc}") from None
        self.check_ranges()
        if self.noise is not None and self.noise not in NOISE_MODES:
            raise ProbeError(f"noise must be one of {', '.join(NOISE_MODES)}, got {self.noise!r}")
        if any(value is not None and not value > 0 for value in (self.a, self.b)):
            raise ProbeError(f"the Beta noise's a and b must be positive, got a={self.a}, b={self.b}")


# Real-size data (32x32 and up): identification over every training image with Q = 500 took about an hour on
# 2 cores (8,000 SVHN-like images). Unless the user names --max-images, it decodes and classifies about this many
# perturbations (Q per image over the first images), which takes minutes at 32x32 (benchmarks/real_size.py).
REAL_SIZE_SAMPLES_PER_IMAGE = 100
REAL_SIZE_PERTURBATIONS = 100_000
DEFAULT_SAMPLES_PER_IMAGE = 500


def with_data_noise(settings: IdentifyRequest, image_shape: tuple[int, int, int]) -> IdentifyRequest:
    """The settings with the noise they leave open (``noise``, ``a``, ``b`` as None) chosen for images of
    ``image_shape`` (C, H, W) by :func:`~probe_core.defuse.identification.default_noise`."""
    chosen = default_noise(image_shape)
    return replace(settings, **{name: value for name, value in chosen.items() if getattr(settings, name) is None})


def sized_identification(settings: IdentifyRequest, dataset: ImageDataset) -> tuple[IdentifyRequest, str | None]:
    """The settings with the noise, images and perturbations chosen from the data's size, and a note saying so.

    The noise they leave open: :func:`with_data_noise`. Images of 32x32 and up, with no ``max_images`` given: at
    most :data:`REAL_SIZE_PERTURBATIONS` decodings, Q lowered to :data:`REAL_SIZE_SAMPLES_PER_IMAGE` where it
    was left at its default. Smaller images, or a ``max_images`` the user gave, keep their images (note None).
    """
    settings = with_data_noise(settings, dataset.image_shape)
    if settings.max_images is not None or not is_real_size(dataset.image_shape):
        return settings, None
    per_image = (REAL_SIZE_SAMPLES_PER_IMAGE if settings.samples_per_image == DEFAULT_SAMPLES_PER_IMAGE
                 else settings.samples_per_image)
    available = len(dataset.train_labels)
    images = max(1, min(available, REAL_SIZE_PERTURBATIONS // per_image))
    noise = (f"Beta({settings.a:g}, {settings.b:g}) noise as the papers add it" if settings.noise == "paper" else
             f"centred noise of sd {settings.noise_scale:g}")
    note = (f"real-size images ({dataset.image_shape[1]}x{dataset.image_shape[2]}): identifying on {images:,} of "
            f"{available:,} training images with {per_image} perturbations each ({noise}), chosen from the data's "
            f"size (--max-images, --samples-per-image and --noise choose otherwise)")
    return replace(settings, samples_per_image=per_image, max_images=images), note


def checked_identify_request(registry, settings: IdentifyRequest, device: str = "cpu",
                              train_missing: bool = False) -> IdentifyRequest:
    """The settings with the classifier and VAE resolved to stored references, loading both first.

    Bad models (a plugin that fails, a missing id) fail here, before a run is stored; the run
    then records references that resolve again in any process (never ``default`` or a relative path).
    With ``train_missing`` (the CLI), untrained defaults are trained first, announced.
    """
    registry = registry.remembering()  # the classes are matched and the models checked on one load of each
    classifier_class_names(registry, settings.classifier, settings.dataset)  # classes matched before any training
    lookup = registry.get_or_train_reference if train_missing else registry.resolve
    classifier = lookup(settings.classifier, "classifier", settings.dataset, device=device)
    vae = lookup(settings.vae, "generator", settings.dataset, device=device)
    if not vae.capabilities.encoder:
        raise ProbeError(f"Defuse needs a generator with an encoder (a VAE); {vae.id} has no encode()")
    data = load_dataset(settings.dataset, registry.data_dir)
    checked_models(classifier, data, allow_weak_classifier=settings.allow_weak_classifier)  # refused: see there
    settings, note = sized_identification(settings, data)
    if note:
        log.warning(note)
    return replace(settings, classifier=classifier.id, vae=vae.id)


@run_kind(DistillationResult)
@dataclass(frozen=True)
class DistillRequest(BuiltFromSettings):
    """Distillation settings; see :class:`FailureClusterer`. ``tau`` scales review and correction samples'
    covariance; None chooses it from the data's image size when the run starts (:func:`review_tau`: the papers'
    0.01 on colour images of 32x32 and up) and the result records it."""

    setting_word: ClassVar[str] = "distillation"
    ranges: ClassVar[dict] = {"n_components": (1, 1000), "weight_threshold": (0.0, 0.99),
                              "max_samples": (2, 1_000_000), "tau": (0.001, 10.0)}
    kind: ClassVar[str] = DISTILL

    identify_run: int
    n_components: int = 100
    weight_threshold: float = 0.01
    max_samples: int = 10_000
    tau: float | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        self.check_ranges()


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

    def __post_init__(self) -> None:
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


@job_of(IdentifyRequest)
def identify_job(registry, settings: IdentifyRequest, device: str = "cpu") -> JobFunction:
    """Identification as a job: failures are streamed into the run as each batch is done.

    With ``settings.distill_after``, a distillation of the failures follows as its own ``defuse-distill`` run
    when identification ends (with at least two failures); its id is in this run's result (``distill_run``).
    """
    identify = _identification(registry, settings, device)
    if settings.distill_after is None:
        return identify

    def run(context: JobContext) -> IdentificationResult:
        result = identify(context)
        if result.failures < 2:
            return result
        distill = DistillRequest(identify_run=context.run_id, **settings.distill_after)
        # identification is finished; the distillation run's progress is its own
        context.store.update_run(context.run_id, 1.0, "identified; distilling",
                                 {**result.to_record(), "distilling": True})
        distill_run, _ = run_inline(context.store, DISTILL, record(distill), distill_job(registry, distill, device))
        return replace(result, distill_run=distill_run)

    return run


def _identification(registry, settings: IdentifyRequest, device: str) -> JobFunction:
    def run(context: JobContext) -> IdentificationResult:
        started = time.perf_counter()
        store = context.store
        dataset = load_dataset(settings.dataset, registry.data_dir)
        resolved = with_data_noise(settings, dataset.image_shape)  # a request stored unchecked leaves it open
        context.report(0.0, "loading models", force=True)
        models = registry.announcing(training_announcer(context))
        classifier = models.get_or_train_reference(settings.classifier, "classifier", settings.dataset, device=device)
        vae = models.get_or_train_reference(settings.vae, "generator", settings.dataset, device=device)
        classifier_check, vae_check = checked_models(classifier, dataset, vae,
                                                     allow_weak_classifier=settings.allow_weak_classifier)
        ids = {"dataset": settings.dataset, "classifier": classifier.id, "vae": vae.id,
               "generator_weak": vae_check.weak, "generator_warning": vae_check.warning,
               "generator_check": vae_check.to_dict(),
               "noise": {"noise": resolved.noise, "a": resolved.a, "b": resolved.b,
                         "noise_scale": resolved.noise_scale}}
        if vae_check.weak:
            context.report(0.0, f"warning: {vae_check.warning}", force=True)
        if classifier_check.near_chance:
            ids["classifier_warning"] = classifier_check.message
            context.report(0.0, f"warning: {classifier_check.message}", force=True)
        images, labels = dataset.train_images, dataset.train_labels
        if settings.max_images is not None:
            images, labels = images[:settings.max_images], labels[:settings.max_images]

        def on_batch(batch_index: int, found: FailureSet) -> None:
            store.put_arrays(context.run_id, f"failures/{batch_index:06d}", found.as_arrays())

        def on_progress(p) -> None:
            context.report(p.fraction, f"{p.images_done}/{p.images_total} images, {p.failures} failures",
                           {**ids, "failures": p.failures, "images_with_failures": p.images_with_failures},
                           force=p.images_done == p.images_total)

        context.report(0.0, "identifying", ids, force=True)
        executor = parse_executor(settings.executor)
        shards = shard_count(executor, settings.shards)
        if shards > 1 or executor.distributed:
            found, not_done = _identify_in_shards(context, executor, shards, resolved, classifier.module,
                                                  vae.module, images, labels, ids)
            return _identify_result(ids, images, found, dataset, started, not_done)
        found = identify_failures(
            classifier.module, vae.module, images, labels, samples_per_image=settings.samples_per_image,
            max_per_image=settings.max_per_image, noise=resolved.noise, a=resolved.a, b=resolved.b,
            noise_scale=settings.noise_scale, seed=settings.seed, progress=on_progress, on_batch=on_batch)
        return _identify_result(ids, images, found, dataset, started)

    return run


def _identify_result(ids: dict, images, found: FailureSet, dataset: ImageDataset, started: float,
                     not_done: list[dict] | None = None) -> IdentificationResult:
    return IdentificationResult(
        **ids, images=len(images), failures=len(found),
        images_with_failures=int(len(np.unique(found.source_index))),
        failures_by_prediction=np.bincount(found.predictions, minlength=dataset.num_classes).tolist(),
        seconds=round(time.perf_counter() - started, 2), not_done=not_done or [])


def identify_shard(models: dict, reporter: Reporter, *, images: torch.Tensor, labels: torch.Tensor, start: int,
                   **settings) -> dict:
    """Identification over one shard of training images (a :mod:`probe_core.runs.scaleout` shard function).

    Returns the shard's failures as arrays, with ``source_index`` counted in the whole training set.
    """
    found = identify_failures(models["classifier"], models["vae"], images, labels,
                              progress=lambda progress: reporter.report(progress.fraction), **settings)
    found.source_index = found.source_index + start
    return found.as_arrays()


def _identify_in_shards(context: JobContext, executor, shards: int, settings: IdentifyRequest, classifier, vae,
                        images, labels, ids: dict):
    """Identification with the training images split into shards run by ``executor``; each shard's failures are
    stored as it ends. A result with ``not_done`` lists the image ranges of shards that failed."""
    pieces = split_evenly(len(images), shards)
    options = {"samples_per_image": settings.samples_per_image, "max_per_image": settings.max_per_image,
               "noise": settings.noise, "a": settings.a, "b": settings.b, "noise_scale": settings.noise_scale}
    models = {"classifier": classifier, "vae": vae}
    tasks = [ShardTask("probe_core.defuse.steps:identify_shard",
                       {"images": images[piece.start:piece.stop], "labels": labels[piece.start:piece.stop],
                        "start": piece.start, "seed": shard_seed(settings.seed, index), **options},
                       models, f"images {piece.start}-{piece.stop - 1}")
               for index, piece in enumerate(pieces)]
    parts: dict[int, FailureSet] = {}

    def on_result(index: int, arrays: dict) -> None:
        if len(arrays["source_index"]):
            context.store.put_arrays(context.run_id, f"failures/{index:04d}-000000", arrays)
        parts[index] = FailureSet(**{name: arrays[name] for name in FailureSet.FIELDS})

    def on_progress(progress) -> None:
        failures = sum(len(p) for p in parts.values())
        try:
            context.report(progress.fraction, f"{progress.done}/{progress.total} shards, {failures} failures so far",
                           {**ids, "failures": failures, "shards_done": progress.done, "shards": progress.total})
        except CancelledError:  # Stop: the outstanding shards are cancelled, what was stored is kept
            pass

    outcome = executor.map(tasks, on_result, on_progress, lambda: context.cancelled)
    if outcome.cancelled:
        raise CancelledError(f"run {context.run_id} cancelled")
    found = concatenate_failures([parts[i] for i in sorted(parts)], vae.latent_dim, tuple(images.shape[1:]))
    return found, outcome.not_done(tasks)


@job_of(DistillRequest)
def distill_job(registry, settings: DistillRequest, device: str = "cpu") -> JobFunction:
    """Distillation as a job: clusters to the store with their description and review statistics."""

    def run(context: JobContext) -> DistillationResult:
        started = time.perf_counter()
        store = context.store
        require_run(store, settings.identify_run, IDENTIFY)
        failures = failures_of(store, settings.identify_run)
        tau = settings.tau if settings.tau is not None else review_tau(failures.images.shape[1:])
        context.report(0.05, f"clustering {len(failures)} failures", force=True)
        clusterer = FailureClusterer(n_components=settings.n_components, weight_threshold=settings.weight_threshold,
                                     max_samples=settings.max_samples, random_state=settings.seed)
        clusterer.fit(failures.latents)
        context.report(0.8, f"{clusterer.n_clusters_} clusters kept", force=True)
        # a kept component that wins no failure has nothing to show or label
        described = [d for d in describe_clusters(clusterer, failures.predictions, failures.true_labels) if d["size"]]
        store.add_clusters(context.run_id, [
            {"cluster_index": d["cluster_index"], "weight": d["weight"], "size": d["size"], "mean": d["mean"],
             "covariance": d["covariance"],
             "info": {k: d[k] for k in ("component", "majority_prediction", "prediction_share",
                                        "majority_true_label", "true_label_share")}}
            for d in described
        ])
        store.put_arrays(context.run_id, "assignments", {"cluster_index": clusterer.labels_})
        return DistillationResult(
            **run_models(store, settings.identify_run), identify_run=settings.identify_run,
            failures=len(failures), clusters=len(described), converged=bool(clusterer.converged_),
            failures_in_kept_clusters=int((clusterer.labels_ >= 0).sum()),
            seconds=round(time.perf_counter() - started, 2), tau=tau)

    return run


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

        def on_progress(p, offset: float) -> None:
            context.report(offset + p.fraction / 2, f"{p.phase}: λ={p.lam:g} epoch {p.epoch}/{p.epochs}",
                           {"phase": p.phase, "lambda": p.lam, "score": p.score})

        defuse_model, selected, sweep = finetune_sweep(
            classifier.module, train, validation, sets["finetune"], sets["validation"], test, sets["test"],
            phase="defuse", progress=lambda p: on_progress(p, 0.0), **sweep_args)
        baseline_model, baseline_selected, baseline_sweep = finetune_sweep(
            classifier.module, train, validation, baseline_set, sets["validation"], test, sets["test"],
            phase="baseline", progress=lambda p: on_progress(p, 0.5), **sweep_args)
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
            regions=[{"cluster_id": r.cluster_id, "label": dataset.class_names[r.label]} for r in regions],
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


def run_step(registry, store, settings, device: str = "cpu", listener=None, progress_bar: str | None = None
             ) -> tuple[int, IdentificationResult | DistillationResult | CorrectionResult]:
    """Run one step now in this thread (CLI, scripts): :func:`probe_core.runs.lifecycle.run_now`; returns the run id
    and the step's typed result (:mod:`probe_core.defuse.results`).

    ``store`` must be ``registry.store``; ``listener(progress, message)`` sees every progress report, and a
    bar described ``progress_bar`` shows them.
    """
    if store is not registry.store:
        raise ProbeError("run_step records the run in the registry's own store")
    return run_now(registry, _step(settings), listener, device, progress_bar)


def submit_step(manager, registry, settings, device: str = "cpu") -> int:
    """Start one step as a background job (dashboard: a worker process): :func:`probe_core.runs.lifecycle.submit`.

    An :class:`IdentifyRequest` with ``distill_after`` runs distillation after it in the same job (the
    Failures page's one button).
    """
    return submit(manager, _step(settings), registry.data_dir, dedupe=True, device=device)  # a 2nd click joins


def _step(settings):
    if not isinstance(settings, (IdentifyRequest, DistillRequest, CorrectRequest)):
        raise ProbeError(f"not a Defuse step's settings: {type(settings).__name__}")
    return settings


@run_kind(EmbeddingResult)
@dataclass(frozen=True)
class EmbeddingRequest:
    """The 2-D failure map of a distillation run (UMAP, cached in the workspace)."""

    kind: ClassVar[str] = EMBEDDING

    distill_run: int

    @classmethod
    def build(cls, store, distill_run: int) -> "EmbeddingRequest":
        """The request for a stored distillation run; a :class:`ProbeError` if there is none of that id."""
        require_run(store, distill_run, DISTILL)
        return cls(distill_run)


def submit_embedding(manager, registry, distill_run: int) -> int:
    """Compute (and cache) a distillation run's failure map in the background."""
    return submit(manager, EmbeddingRequest.build(registry.store, distill_run), registry.data_dir)


@job_of(EmbeddingRequest)
def embedding_job(registry, request: EmbeddingRequest, device: str = "cpu") -> JobFunction:
    """:func:`embedding` as a job (its result is cached in the workspace)."""

    def run(context: JobContext) -> EmbeddingResult:
        context.report(0.05, "fitting UMAP", force=True)
        return EmbeddingResult(points=len(embedding(registry, context.store, request.distill_run)["failure_xy"]),
                               distill_run=request.distill_run)

    return run
