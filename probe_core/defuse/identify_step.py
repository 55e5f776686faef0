"""Defuse's identification step as a stored run: its request (:class:`IdentifyRequest`), the settings chosen from
the data's size, the models checked before a run is stored, and its job (Algorithm 1,
:mod:`probe_core.defuse.identification`, streamed into the run and sharded over workers)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np
import torch

from probe_core.catalog import load_dataset
from probe_core.data import DEFAULT_DATASET, REAL_SIZE_LABEL, ImageDataset, is_real_size
from probe_core.defuse.distill_step import DistillRequest, distill_job
from probe_core.defuse.identification import (
    NOISE_MODES,
    FailureSet,
    concatenate_failures,
    default_noise,
    identify_failures,
    judge_sure_of,
)
from probe_core.defuse.results import DISTILL, IDENTIFY, IdentificationResult
from probe_core.errors import CancelledError, ProbeError
from probe_core.models.spec import FEATURES_PREFIX
from probe_core.progress import Reporter, rewritten
from probe_core.runs.lifecycle import JobContext, JobFunction, job_of, run_inline, run_kind, training_announcer
from probe_core.runs.requests import (
    BuiltFromSettings,
    already_checked,
    classifier_class_names,
    mapped_classifier,
    record,
)
from probe_core.runs.scaleout import (
    SHARDS_RANGE,
    ShardTask,
    parse_executor,
    shard_count,
    shard_seed,
    split_evenly,
)
from probe_core.runs.validation import checked_judge, checked_models, judge_warning

log = logging.getLogger(__name__)


NO_JUDGE = "none"  # IdentifyRequest.judge: no judge, whatever the data's size


@run_kind(IdentificationResult)
@dataclass(frozen=True)
class IdentifyRequest(BuiltFromSettings):
    """Identification settings (Defuse Algorithm 1); see :func:`identify_failures`.

    ``noise``, ``a``, ``b`` and ``noise_scale`` left as None are chosen when the request is checked or the run
    starts (:func:`~probe_core.defuse.identification.default_noise`): the noise the generator declares (a flow's
    N(0, I) noise or a density's whitened codes: centred, sd 0.15), else centred noise of sd 0.15 below 32x32
    and the papers' Beta(75, 75) at real size.
    """

    setting_word: ClassVar[str] = "identification"
    ranges: ClassVar[dict] = {"samples_per_image": (1, 100_000), "max_per_image": (1, 100_000),
                              "noise_scale": (0.001, 10.0), "max_images": (1, 10_000_000), "shards": SHARDS_RANGE,
                              "judge_sure": (0.01, 1.0)}
    kind: ClassVar[str] = IDENTIFY

    dataset: str = DEFAULT_DATASET
    classifier: str = "default"
    vae: str = "default"
    samples_per_image: int = 500  # DEFAULT_SAMPLES_PER_IMAGE
    max_per_image: int = 100
    noise: str | None = None
    a: float | None = None
    b: float | None = None
    noise_scale: float | None = None
    seed: int = 0
    max_images: int | None = None
    executor: str = "local"  # where the image shards run (probe_core.runs.scaleout): local, ray or ray:ADDRESS
    shards: int | None = 1  # training images in this many shards, each with its own seed; None: one per worker
    allow_weak_classifier: bool = False  # identify with a classifier near chance (refused otherwise; flagged)
    # a classifier other than the probed one (a reference, as classifier): a misclassified decoding is a failure
    # only if the judge gives its source label at least judge_sure (identify_failures). None: chosen from the data's
    # size when the request is built (default_judge; a stored request's None: no judge); "none": no judge at any size
    judge: str | None = None
    # None: the judge's own threshold (judge_sure_of: 0.9 for a classifier, a majority for a neighbour vote)
    judge_sure: float | None = None
    # why the judge is the one it is (given, chosen from the data's size, or none), set when the request is built
    judge_reason: str | None = None
    # DistillRequest fields (all but identify_run) to distil with as soon as identification ends, as a
    # distillation run of its own (the Failures page's one button); None: identification only
    distill_after: dict | None = None

    def check_values(self) -> None:
        if self.distill_after is not None:
            if not isinstance(self.distill_after, dict) or "identify_run" in self.distill_after:
                raise ProbeError("distill_after holds distillation settings (not the identification run)")
            try:
                DistillRequest.from_settings(identify_run=0, **self.distill_after)
            except ProbeError as exc:
                raise ProbeError(f"distill_after: {exc}") from None
        self.check_ranges()
        if self.noise is not None and self.noise not in NOISE_MODES:
            raise ProbeError(f"noise must be one of {', '.join(NOISE_MODES)}, got {self.noise!r}")
        if any(value is not None and not value > 0 for value in (self.a, self.b)):
            raise ProbeError(f"the Beta noise's a and b must be positive, got a={self.a}, b={self.b}")

    @classmethod
    def build(cls, registry, *, device: str = "cpu", train_missing: bool = False, class_map: str | None = None,
              **settings) -> "IdentifyRequest":
        """The request made from ``settings`` (:meth:`from_settings`) and checked against the workspace in one step,
        before a run is stored: ``class_map`` (``MODEL=DATA,...``) applied to the classifier's reference as
        :class:`~probe_core.bayestrex.request.SampleRequest` does (:func:`~probe_core.runs.requests.mapped_classifier`),
        the classifier's classes matched to the data's, both models loaded (a plugin that fails or a missing id fails
        here) and the classifier checked on the data, the settings the request leaves open chosen from the data's
        size (:func:`sized_identification`; the note is logged), and the models resolved to stored references that
        load again in any process (never ``default`` or a relative path).

        Every front end (CLI, Failures page, API verb) starts identification from this request. With
        ``train_missing`` (CLI and API), untrained defaults are trained first, announced.

        Raises
        ------
        ProbeError
            For bad settings, models that do not load or match the data, or a generator without an encoder.
        """
        if class_map:
            settings = {**settings, "classifier": mapped_classifier(settings.get("classifier"), class_map)}
        request = cls.from_settings(**settings)
        registry = registry.remembering()  # the classes are matched and the models checked on one load of each
        classifier_class_names(registry, request.classifier, request.dataset)  # classes matched before any training
        lookup = registry.get_or_train_reference if train_missing else registry.resolve
        classifier = lookup(request.classifier, "classifier", request.dataset, device=device)
        vae = lookup(request.vae, "generator", request.dataset, device=device)
        if not vae.capabilities.encoder:
            raise ProbeError(f"Defuse needs a generator with an encoder (a VAE); {vae.id} has no encode()")
        data = load_dataset(request.dataset, registry.data_dir)
        checked_models(classifier, data, allow_weak_classifier=request.allow_weak_classifier)  # refused: see there
        judge_reference, reason = _judge_choice(request, vae, data.image_shape)
        try:
            judge = (None if judge_reference is None else
                     _checked_judge(registry, lookup, judge_reference, request.dataset, classifier, data, device))
        except ProbeError as exc:
            if request.judge is not None:  # the user's judge: refused, with its reason
                raise
            # the default judge cannot vouch (its feature network near chance, say): no judge, and the result says so
            judge, reason = None, f"no judge: the default one ({judge_reference}) cannot judge this data ({exc})"
        request, note = sized_identification(request, data, vae.capabilities)
        for advice in (note, None if judge else judge_advice(data.image_shape)):
            if advice:
                log.warning(advice)
        judge_sure = request.judge_sure if judge is None else judge_sure_of(judge.module, request.judge_sure)
        if judge is not None and request.judge is not None and judge.record.get("judge_note"):
            reason = f"the judge given ({request.judge}): {judge.record['judge_note']}"  # it says how it may err
        return request.derived(classifier=classifier.id, vae=vae.id, judge=None if judge is None else judge.id,
                               judge_sure=judge_sure, judge_reason=reason)


def _judge_choice(request: IdentifyRequest, vae, image_shape) -> tuple[str | None, str]:
    """The judge's reference (None: no judge) and why: the user's, :data:`NO_JUDGE`, or :func:`default_judge`."""
    if request.judge == NO_JUDGE:
        return None, "no judge (asked for): every misclassified decoding counts as a failure"
    if request.judge is not None:
        return request.judge, (f"the judge given ({request.judge}); if it learned the same labels as the probed "
                               "classifier it may share a flaw of them (a mislabelled class) and hide it")
    return default_judge(vae, image_shape)


def default_judge(vae, image_shape: tuple[int, int, int]) -> tuple[str | None, str]:
    """The judge identification uses when none is named, and why, in words.

    From real size up (32x32, :func:`~probe_core.data.is_real_size`) the generator's own feature network
    (``features:GENERATOR``; :attr:`~probe_core.models.loaded.LoadedModel.feature_network`), where it has one: a
    classifier of the generator's data of another seed, stored with it, so it costs no training. Without a judge
    at that size most misclassified decodings are the generator's blurs, images that lost their class, and Defuse
    "fixed" regions of them while a planted flaw went unfound (issue 100); with it the 64x64 stand-in's mislabelled
    class was found and fixed. Below real size, and for a generator without one, no judge.

    Parameters
    ----------
    vae : LoadedModel
        The identification's generator.
    image_shape : tuple of int
        (C, H, W) of the data.
    """
    if not is_real_size(tuple(image_shape)):
        return None, f"no judge: below {REAL_SIZE_LABEL} a misclassified decoding still shows its class"
    if not getattr(vae, "feature_network", None):
        return None, (f"no judge: the generator {vae.id} has no feature network of its own to judge with; give "
                      "--judge MODEL (a classifier trained on data you trust)")
    return f"{FEATURES_PREFIX}{vae.id}", (
        f"the generator's own feature network, chosen at {image_shape[1]}x{image_shape[2]} (a classifier of the "
        "generator's data of another seed, no training): a misclassified decoding is a failure only if it still "
        "shows its source class to it. It learned the generator's data's labels, so a flaw of those labels (a "
        "mislabelled class) may be its flaw too: give --judge MODEL trained on data you trust, or --judge none")


def judge_advice(image_shape: tuple[int, int, int]) -> str | None:
    """What to say when images of ``image_shape`` (C, H, W) are identified without a judge (None below real size,
    :func:`~probe_core.data.is_real_size`).

    At real size, identification without a judge kept mostly decodings that had lost their class, and Defuse
    missed a planted flaw that a judge found: on the 64x64 sign-like stand-in the clean classifier was 90 % sure of
    4-6 % of them; on the 32x32 SVHN-like one, over every training image x 12, an independent judge confirmed 591 of
    about 7,400, and only then were the dark 3s left out of training found (docs/real-size.md).
    """
    if not is_real_size(tuple(image_shape)):
        return None
    return (f"{image_shape[1]}x{image_shape[2]} images without a judge: at this size most misclassified decodings "
            "may be the generator's, images that lost their class; give a judge (--judge, a classifier trained on "
            "data you trust, or features:default, the default generator's own feature network, which costs no "
            "training) to keep only failures that still show their class (docs/defuse.md)")


def _checked_judge(registry, lookup, reference: str, dataset: str, classifier, data: ImageDataset,
                   device: str):
    """The judge (its id is the stored reference), after :func:`~probe_core.runs.validation.checked_judge` (its
    classes are matched before it is loaded, so a judge of other classes trains nothing)."""
    names = classifier_class_names(registry, reference, dataset)
    if tuple(names) != tuple(data.class_names):
        raise ProbeError(f"the judge's classes {list(names)} are not the data's {list(data.class_names)}")
    return checked_judge(lookup(reference, "classifier", dataset, device=device), classifier, data)


# Real-size data (32x32 and up): identification over every training image with Q = 500 took about an hour on
# 2 cores (8,000 SVHN-like images). Unless the user names --max-images, it decodes and classifies about this many
# perturbations (Q per image over the first images), which takes minutes at 32x32 (benchmarks/real_size.py).
REAL_SIZE_SAMPLES_PER_IMAGE = 100


REAL_SIZE_PERTURBATIONS = 100_000
DEFAULT_SAMPLES_PER_IMAGE = 500
# From this side up the same budget is spread over every training image (Q = budget / N, at least
# MIN_SAMPLES_PER_IMAGE): on the 64x64 sign-like stand-in the first 1,000 images held 23 of a flawed class's 90,
# and its failures came from 4 images; 3,870 images x 25 found them in 22 images, in less time. On the 32x32
# SVHN-like one with the flow autoencoder, the first 1,000 x 100 missed the dark 3s left out of training (no
# failure of a 3) where every image x 13 found them (2 regions labelled 3), and it found the mislabelled 7s in 25
# of 28 regions rather than 9 of 16 (benchmarks/defuse_real_size.py --sizes 32 --noises default --every-image 13).
EVERY_IMAGE_FROM_SIDE = 32
MIN_SAMPLES_PER_IMAGE = 10


def with_data_noise(settings: IdentifyRequest, image_shape: tuple[int, int, int], capabilities=None) -> IdentifyRequest:
    """The settings with the noise they leave open (``noise``, ``a``, ``b`` as None) chosen for images of
    ``image_shape`` (C, H, W) and a generator of ``capabilities`` by
    :func:`~probe_core.defuse.identification.default_noise`."""
    chosen = default_noise(image_shape, capabilities)
    return settings.derived(**{name: value for name, value in chosen.items() if getattr(settings, name) is None})


def sized_identification(settings: IdentifyRequest, dataset: ImageDataset,
                         capabilities=None) -> tuple[IdentifyRequest, str | None]:
    """The settings with the noise, images and perturbations chosen from the data's size, and a note saying so.

    The noise they leave open: :func:`with_data_noise`. Images of 32x32 and up, with no ``max_images`` given: at
    most :data:`REAL_SIZE_PERTURBATIONS` decodings, Q lowered to :data:`REAL_SIZE_SAMPLES_PER_IMAGE` where it
    was left at its default, and from :data:`EVERY_IMAGE_FROM_SIDE` (32: all real-size data) up to what lets
    every training image in
    (at least :data:`MIN_SAMPLES_PER_IMAGE`). Smaller images, or a ``max_images`` the user gave, keep their
    images (note None).
    """
    noise_left_open = settings.noise is None
    settings = with_data_noise(settings, dataset.image_shape, capabilities)
    if settings.max_images is not None or not is_real_size(dataset.image_shape):
        return settings, None
    available = len(dataset.train_labels)
    per_image = settings.samples_per_image
    if per_image == DEFAULT_SAMPLES_PER_IMAGE:  # left at its default: chosen from the data's size
        per_image = REAL_SIZE_SAMPLES_PER_IMAGE
        if min(dataset.image_shape[1:]) >= EVERY_IMAGE_FROM_SIDE:
            per_image = max(MIN_SAMPLES_PER_IMAGE, min(per_image, REAL_SIZE_PERTURBATIONS // available))
    images = max(1, min(available, REAL_SIZE_PERTURBATIONS // per_image))
    noise = (f"Beta({settings.a:g}, {settings.b:g}) noise as the papers add it" if settings.noise == "paper" else
             f"centred noise of sd {settings.noise_scale:g}")
    if noise_left_open and getattr(capabilities, "perturbation_noise", None):
        noise += ", which the generator's codes ask for"
    note = (f"real-size images ({dataset.image_shape[1]}x{dataset.image_shape[2]}): identifying on {images:,} of "
            f"{available:,} training images with {per_image} perturbations each ({noise}), chosen from the data's "
            f"size (--max-images, --samples-per-image and --noise choose otherwise)")
    return settings.derived(samples_per_image=per_image, max_images=images), note


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
        with already_checked():  # distill_after was checked with the identification's request
            distill = DistillRequest(identify_run=context.run_id, **settings.distill_after)
        # identification is finished; the distillation run's progress is its own (a stop asked by now ends here)
        context.report(1.0, "identified; distilling", {**result.to_record(), "distilling": True}, force=True)
        distill_run, _ = run_inline(context.store, DISTILL, record(distill), distill_job(registry, distill, device))
        return replace(result, distill_run=distill_run)

    return run


def _identification(registry, settings: IdentifyRequest, device: str) -> JobFunction:
    def run(context: JobContext) -> IdentificationResult:
        started = time.perf_counter()
        store = context.store
        dataset = load_dataset(settings.dataset, registry.data_dir)
        context.report(0.0, "loading models", force=True)
        models = registry.announcing(training_announcer(context))
        classifier = models.get_or_train_reference(settings.classifier, "classifier", settings.dataset, device=device)
        vae = models.get_or_train_reference(settings.vae, "generator", settings.dataset, device=device)
        judge = (None if settings.judge in (None, NO_JUDGE) else
                 models.get_or_train_reference(settings.judge, "classifier", settings.dataset, device=device))
        # a request stored unchecked leaves the threshold open
        judge_sure = settings.judge_sure if judge is None else judge_sure_of(judge.module, settings.judge_sure)
        # a request stored unchecked leaves the noise open
        resolved = with_data_noise(settings, dataset.image_shape, vae.capabilities).derived(judge_sure=judge_sure)
        classifier_check, vae_check = checked_models(classifier, dataset, vae,
                                                     allow_weak_classifier=settings.allow_weak_classifier)
        ids = {"dataset": settings.dataset, "classifier": classifier.id, "vae": vae.id,
               "generator_weak": vae_check.weak, "generator_warning": vae_check.warning,
               "generator_check": vae_check.to_dict(),
               "noise": {"noise": resolved.noise, "a": resolved.a, "b": resolved.b,
                         "noise_scale": resolved.noise_scale},
               "judge": None if judge is None else judge.id, "judge_sure": judge_sure,
               "judge_reason": settings.judge_reason,
               "judge_warning": None if judge is None else judge_warning(judge, classifier)}
        if vae_check.weak:
            context.report(0.0, f"warning: {vae_check.warning}", force=True)
        if ids["judge_warning"]:
            context.report(0.0, f"warning: {ids['judge_warning']}", force=True)
        if classifier_check.near_chance:
            ids["classifier_warning"] = classifier_check.message
            context.report(0.0, f"warning: {classifier_check.message}", force=True)
        images, labels = dataset.train_images, dataset.train_labels
        if settings.max_images is not None:
            images, labels = images[:settings.max_images], labels[:settings.max_images]

        def on_batch(batch_index: int, found: FailureSet) -> None:
            store.put_arrays(context.run_id, f"failures/{batch_index:06d}", found.as_arrays())

        def with_run_ids(fraction, message, found, force):
            return (fraction, message, {**ids, "failures": found["failures"],
                                        "images_with_failures": found["images_with_failures"]},
                    force or found["images_done"] == found["images_total"])

        context.report(0.0, "identifying", ids, force=True)
        executor = parse_executor(settings.executor)
        shards = shard_count(executor, settings.shards)
        if shards > 1 or executor.distributed:
            found, not_done = _identify_in_shards(context, executor, shards, resolved, classifier.module,
                                                  vae.module, images, labels, ids,
                                                  None if judge is None else judge.module)
            return _identify_result(ids, images, found, dataset, started, not_done)
        found = identify_failures(
            classifier.module, vae.module, images, labels, samples_per_image=settings.samples_per_image,
            max_per_image=settings.max_per_image, noise=resolved.noise, a=resolved.a, b=resolved.b,
            noise_scale=resolved.noise_scale, seed=settings.seed,
            reporter=rewritten(context, with_run_ids), on_batch=on_batch,
            judge=None if judge is None else judge.module, judge_sure=judge_sure)
        return _identify_result(ids, images, found, dataset, started)

    return run


def _identify_result(ids: dict, images, found: FailureSet, dataset: ImageDataset, started: float,
                     not_done: list[dict] | None = None) -> IdentificationResult:
    return IdentificationResult(
        **ids, images=len(images), failures=len(found), misclassified=found.misclassified, confirmed=found.confirmed,
        images_with_failures=int(len(np.unique(found.source_index))),
        failures_by_prediction=np.bincount(found.predictions, minlength=dataset.num_classes).tolist(),
        class_names=list(dataset.class_names),
        seconds=round(time.perf_counter() - started, 2), not_done=not_done or [])


def identify_shard(models: dict, reporter: Reporter, *, images: torch.Tensor, labels: torch.Tensor, start: int,
                   **settings) -> dict:
    """Identification over one shard of training images (a :mod:`probe_core.runs.scaleout` shard function).

    ``models``: the ``classifier``, the ``vae`` and, where the run has one, the ``judge``. Returns the shard's
    failures as arrays, with ``source_index`` counted in the whole training set.
    """
    found = identify_failures(models["classifier"], models["vae"], images, labels, judge=models.get("judge"),
                              reporter=reporter, **settings)
    found.source_index = found.source_index + start
    return {**found.as_arrays(), "misclassified": found.misclassified, "confirmed": found.confirmed}


def _identify_in_shards(context: JobContext, executor, shards: int, settings: IdentifyRequest, classifier, vae,
                        images, labels, ids: dict, judge=None):
    """Identification with the training images split into shards run by ``executor``; each shard's failures are
    stored as it ends. A result with ``not_done`` lists the image ranges of shards that failed."""
    pieces = split_evenly(len(images), shards)
    options = {"samples_per_image": settings.samples_per_image, "max_per_image": settings.max_per_image,
               "noise": settings.noise, "a": settings.a, "b": settings.b, "noise_scale": settings.noise_scale,
               "judge_sure": settings.judge_sure}
    models = {"classifier": classifier, "vae": vae, **({} if judge is None else {"judge": judge})}
    tasks = [ShardTask(identify_shard,
                       {"images": images[piece.start:piece.stop], "labels": labels[piece.start:piece.stop],
                        "start": piece.start, "seed": shard_seed(settings.seed, index), **options},
                       models, f"images {piece.start}-{piece.stop - 1}")
               for index, piece in enumerate(pieces)]
    parts: dict[int, FailureSet] = {}

    def on_result(index: int, arrays: dict) -> None:
        counts = {name: int(arrays.pop(name, 0)) for name in ("misclassified", "confirmed")}
        if len(arrays["source_index"]):
            context.store.put_arrays(context.run_id, f"failures/{index:04d}-000000", arrays)
        parts[index] = FailureSet(**{name: arrays[name] for name in FailureSet.FIELDS}, **counts)

    def with_failures_so_far(fraction, message, shards, force):
        failures = sum(len(p) for p in parts.values())
        return (fraction, f"{shards['shards_done']}/{shards['shards']} shards, {failures} failures so far",
                {**ids, "failures": failures, "shards_done": shards["shards_done"], "shards": shards["shards"]}, force)

    # after a stop the context's report raises: the executor cancels the outstanding shards, what was stored is kept
    outcome = executor.map(tasks, on_result, rewritten(context, with_failures_so_far))
    if outcome.cancelled:
        raise CancelledError(f"run {context.run_id} cancelled")
    found = concatenate_failures([parts[i] for i in sorted(parts)], vae.latent_dim, tuple(images.shape[1:]))
    return found, outcome.not_done(tasks)
