"""Typed run configurations: one frozen dataclass per run kind, with its kind and its job builder.

A run is started from its configuration alone, in either of two ways that share one lifecycle
(:mod:`probe_core.lifecycle`):

- :func:`run_now` runs it in the calling thread (the CLI, scripts);
- :func:`submit` records it and starts it on a :class:`~probe_core.jobs.JobManager`'s executor
  (the dashboard: a worker process rebuilds the job from the stored :class:`JobSpec`).

:func:`config_of` reads a stored run's configuration back as its dataclass, so pickers filter
on typed fields instead of slicing strings. The Defuse steps' settings
(:class:`~probe_core.defuse.pipeline.IdentifySettings`, ``DistillSettings``, ``CorrectSettings``,
``EmbeddingSettings``) carry their kind too and run through the same lifecycle with
:func:`~probe_core.defuse.pipeline.run_step` and :func:`~probe_core.defuse.pipeline.submit_step`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable, ClassVar, Protocol

from probe_core.data import DEFAULT_DATASET
from probe_core.defuse.steps import (
    CorrectSettings,
    DistillSettings,
    EmbeddingSettings,
    IdentifySettings,
)
from probe_core.errors import ProbeError
from probe_core.executors import JobSpec
from probe_core.lifecycle import run_inline
from probe_core.requests import SampleRequest, record
from probe_core.targets import DEFAULT_SIGMA


class RunConfig(Protocol):
    """What every run configuration has: its run kind, its job builder and the builder's arguments."""

    kind: ClassVar[str]
    builder: ClassVar[str]  # "module:function", called as function(registry, **job_arguments())

    def job_arguments(self) -> dict:
        ...


@dataclass(frozen=True)
class CompareConfig:
    """High-confidence samples of every class for two classifiers on one generator (paper Table 3)."""

    kind: ClassVar[str] = "compare"
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


@dataclass(frozen=True)
class TrainConfig:
    """Training zoo models in order: ``specs`` are :class:`~probe_core.models.ModelSpec` fields as dicts.

    ``purpose`` says why (``defaults`` of ``dataset``, or ``custom``); two configs with the same
    fields are the same training, so a second tab asking for it joins the first.
    """

    kind: ClassVar[str] = "train"
    builder: ClassVar[str] = "probe_core.models.jobs:training_job"

    dataset: str
    specs: tuple[dict, ...] = field(default_factory=tuple)
    purpose: str = "custom"
    device: str = "cpu"

    def job_arguments(self) -> dict:
        return {"specs": [dict(s) for s in self.specs], "device": self.device}


RUN_CONFIGS: dict[str, type] = {config.kind: config for config in (
    SampleRequest, CompareConfig, TrainConfig, IdentifySettings, DistillSettings, CorrectSettings, EmbeddingSettings)}


def config_of(run):
    """A stored run's configuration as its dataclass (a :class:`RunConfig` or Defuse settings).

    None for kinds without one, and for configurations stored by older versions that no longer fit.
    """
    config_type = RUN_CONFIGS.get(run.kind)
    if config_type is None:
        return None
    names = {f.name for f in dataclasses.fields(config_type)}
    values = {key: tuple(value) if isinstance(value, list) else value
              for key, value in run.config.items() if key in names}
    try:
        return config_type(**values)
    except (TypeError, ProbeError):
        return None


def job_spec(config: RunConfig, data_dir: str | None = None) -> JobSpec:
    """How any process rebuilds the run's job from the database."""
    return JobSpec(config.builder, config.job_arguments(), data_dir)


def submit(manager, config: RunConfig, data_dir: str | None = None, dedupe: bool = False) -> int:
    """Record a run of ``config`` and start it in the background; returns the run id."""
    return manager.submit(config.kind, record(config), job_spec(config, data_dir), dedupe=dedupe)


def run_now(registry, config: RunConfig,
            listener: Callable[[float | None, str | None], None] | None = None) -> tuple[int, dict]:
    """Run ``config`` in this thread, recorded like a background run; returns ``(run_id, result)``."""
    function = job_spec(config, registry.data_dir).build_for(registry)
    return run_inline(registry.store, config.kind, record(config), function, listener)


def submit_training(manager, registry, specs: list, dataset: str, purpose: str = "custom",
                    device: str = "cpu") -> int:
    """Train :class:`~probe_core.models.ModelSpec` s in the background; a second identical request joins the first."""
    config = TrainConfig(dataset=dataset, specs=tuple(dataclasses.asdict(s) for s in specs), purpose=purpose,
                         device=str(device))
    return submit(manager, config, registry.data_dir, dedupe=True)


def start_default_training(manager, registry, dataset: str = DEFAULT_DATASET, device: str = "cpu") -> int | None:
    """Start training a data set's missing default models; returns the run id, or None if all exist."""
    if not registry.missing_defaults(dataset):
        return None
    return submit_training(manager, registry, registry.default_specs(dataset), dataset, "defaults", device)
