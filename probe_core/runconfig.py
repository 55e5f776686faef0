"""The run requests by kind, and reading a stored run's request back.

Every run kind has a frozen request dataclass with its kind and its job builder:
:class:`~probe_core.requests.SampleRequest`, :class:`CompareRequest`, :class:`TrainRequest` here,
:class:`~probe_core.suites.ScoreRequest`, and the Defuse steps' settings (:class:`~probe_core.defuse.steps.IdentifyRequest`, ``DistillRequest``,
``CorrectRequest``, ``EmbeddingRequest``). All of them start through one lifecycle,
:func:`probe_core.lifecycle.run_now` or :func:`probe_core.lifecycle.submit`.

:func:`config_of` reads a stored run's request back as its dataclass, so pickers filter on typed
fields instead of slicing strings; :func:`result_of` reads a run's result back as its typed result.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import ClassVar

from probe_core.bayestrex.latent_map import LatentMapRequest
from probe_core.bayestrex.results import COMPARE, ComparisonResult, LatentMapResult, SamplingResult
from probe_core.data import DEFAULT_DATASET
from probe_core.defuse.steps import (
    CorrectRequest,
    DistillRequest,
    EmbeddingRequest,
    IdentifyRequest,
)
from probe_core.defuse.results import CorrectionResult, DistillationResult, EmbeddingResult, IdentificationResult
from probe_core.errors import ProbeError
from probe_core.lifecycle import submit
from probe_core.models.jobs import TrainingResult
from probe_core.requests import SampleRequest, from_record
from probe_core.suites import ScoreRequest, ScoreResult
from probe_core.targets import DEFAULT_SIGMA


@dataclass(frozen=True)
class CompareRequest:
    """High-confidence samples of every class for two classifiers on one generator (paper Table 3)."""

    kind: ClassVar[str] = COMPARE
    builder: ClassVar[str] = "probe_core.bayestrex.jobs:compare_job"

    dataset: str
    classifier_a: str
    classifier_b: str
    generator: str = "default"
    chains: int = 8
    warmup: int = 100
    samples: int = 50
    keep_every: int = 10
    seed: int = 0
    sigma: float = DEFAULT_SIGMA

    @property
    def classifiers(self) -> list[str]:
        return [self.classifier_a, self.classifier_b]

    def job_arguments(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def build(cls, dataset: str, classifier_a: str, classifier_b: str, generator: str | None = None,
              **settings) -> "CompareRequest":
        """The one way to make a comparison request: settings not given (or None) take this type's defaults,
        and all are checked once, here, before any work; the job trusts them.

        Parameters
        ----------
        dataset, classifier_a, classifier_b, generator : str
            The models as references (resolved, and trained if they are missing defaults, by the run).
        **settings
            Any of :data:`COMPARE_SETTINGS`.

        Raises
        ------
        ProbeError
            For a missing classifier, an unknown setting or a value the sampler cannot use.
        """
        from probe_core.bayestrex.run import check_sampler_settings

        if not classifier_a or not classifier_b:
            raise ProbeError("a comparison needs two classifiers (classifier A and classifier B)")
        if classifier_a == classifier_b:
            raise ProbeError("pick two different classifiers to compare")
        unknown = sorted(set(settings) - set(COMPARE_SETTINGS))
        if unknown:
            raise ProbeError(f"unknown comparison setting(s) {', '.join(unknown)}; use {', '.join(COMPARE_SETTINGS)}")
        request = cls(dataset=dataset, classifier_a=classifier_a, classifier_b=classifier_b,
                      generator=generator or "default",
                      **{key: value for key, value in settings.items() if value is not None})
        check_sampler_settings(chains=request.chains, warmup=request.warmup, samples=request.samples,
                               keep_every=request.keep_every, sigma=request.sigma)
        if isinstance(request.seed, bool) or not isinstance(request.seed, int):
            raise ProbeError(f"the seed must be a whole number, got {request.seed!r}")
        return request


COMPARE_SETTINGS = ("chains", "warmup", "samples", "keep_every", "seed", "sigma")


@dataclass(frozen=True)
class TrainRequest:
    """Training zoo models in order: ``specs`` are :class:`~probe_core.models.ModelSpec` fields as dicts.

    ``purpose`` says why (``defaults`` of ``dataset``, or ``custom``); two configs with the same
    fields are the same training, so a second tab asking for it joins the first.
    """

    kind: ClassVar[str] = TrainingResult.kind
    builder: ClassVar[str] = "probe_core.models.jobs:training_job"

    dataset: str
    specs: tuple[dict, ...] = field(default_factory=tuple)
    purpose: str = "custom"
    device: str = "cpu"

    def job_arguments(self) -> dict:
        return {"specs": [dict(s) for s in self.specs], "device": self.device}


RUN_CONFIGS: dict[str, type] = {config.kind: config for config in (
    SampleRequest, CompareRequest, TrainRequest, IdentifyRequest, DistillRequest, CorrectRequest, EmbeddingRequest,
    ScoreRequest, LatentMapRequest)}


def config_of(run):
    """A stored run's request as its dataclass (a :class:`~probe_core.lifecycle.RunRequest`).

    None for kinds without one, and for configurations stored by older versions that no longer fit.
    """
    config_type = RUN_CONFIGS.get(run.kind)
    if config_type is None:
        return None
    try:
        return from_record(config_type, run.config)
    except (TypeError, ProbeError):
        return None


RESULT_TYPES: dict[str, type] = {result.kind: result for result in (
    SamplingResult, ComparisonResult, LatentMapResult, IdentificationResult, DistillationResult, CorrectionResult,
    EmbeddingResult, TrainingResult, ScoreResult)}


def result_of(run):
    """A finished run's result as its typed result (:class:`~probe_core.lifecycle.RunResult`), read back from
    the store; None while it has none, for kinds whose results are plain records (``run.result``), and for
    a result stored by an older version that no longer fits."""
    result_type = RESULT_TYPES.get(run.kind)
    if result_type is None or not run.result:
        return None
    try:
        return result_type.from_record(run.result)
    except TypeError:  # stored by an older version, without a field this one needs
        return None


def submit_training(manager, registry, specs: list, dataset: str, purpose: str = "custom",
                    device: str = "cpu") -> int:
    """Train :class:`~probe_core.models.ModelSpec` s in the background; a second identical request joins the first."""
    config = TrainRequest(dataset=dataset, specs=tuple(dataclasses.asdict(s) for s in specs), purpose=purpose,
                         device=str(device))
    return submit(manager, config, registry.data_dir, dedupe=True)


def start_default_training(manager, registry, dataset: str = DEFAULT_DATASET, device: str = "cpu") -> int | None:
    """Start training a data set's missing default models; returns the run id, or None if all exist."""
    if not registry.missing_defaults(dataset):
        return None
    return submit_training(manager, registry, registry.default_specs(dataset), dataset, "defaults", device)
