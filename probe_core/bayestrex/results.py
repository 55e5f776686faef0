"""What Bayes-TrEx runs return and store: :class:`SamplingResult` (one :class:`TargetReport` per target),
:class:`ComparisonResult` and :class:`LatentMapResult`.

The kept samples themselves are in the store (:func:`probe_core.bayestrex.queries.samples`); the result
is their summary, small enough for the runs table. :func:`probe_core.runs.runconfig.result_of` reads a stored
run's result back as this type.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import ClassVar, TypedDict

from probe_core.bayestrex.request import SampleRequest
from probe_core.data.provenance import memorisation_reasons
from probe_core.runs.lifecycle import StoredResult

COMPARE, LATENT_MAP = "compare", "latent-map"  # run kinds whose requests live above this module


class TargetReport(TypedDict, total=False):
    """One target of a sampling run.

    ``summary`` (:func:`~probe_core.bayestrex.summary.summarise_target`): ``achieved`` (class name ->
    mean and sd of the achieved confidence), ``hits``, ``kept``, ``chains``, ``chains_with_hits``, ESS,
    R-hat, acceptance and divergences. ``test_set_baseline``: how many test images meet the same
    constraint (only when the classifier's classes are the data set's). ``judge_agreement``: with a judge,
    :func:`~probe_core.bayestrex.run.judged_hits` of a high or ambiguous target. ``samples``: up to 2,000 kept
    samples as records, present only in a result returned in the process that sampled.
    """

    spec: str
    classes: list
    description: str
    failed: bool
    hit_rate: float
    summary: dict
    target_index: int
    test_set_baseline: dict
    independence_acceptance: float
    judge_agreement: dict
    provenance: dict
    samples: list


def copying_warnings(targets: list[dict]) -> list[str]:
    """One line per target (a sampling result's ``targets``) whose hits' ``provenance`` looks copied."""
    lines = []
    for target in targets:
        placed = target.get("provenance") or {}
        reasons = memorisation_reasons(placed)
        if reasons:
            lines.append(f"{target['spec']}: its hits look like copies of training images, not new images: of "
                         f"{placed['measured']:,} hits, {'; '.join(reasons)}. They show what the data set already "
                         f"holds (the generator reproduces its training images; see each hit beside its nearest "
                         f"training image)")
    return lines


@dataclass(frozen=True)
class SamplingResult(StoredResult):
    """A finished (or stopped) sampling run's outcome.

    Attributes
    ----------
    targets : list of TargetReport
        In request order.
    sampler : str
    seed : int
    sigma : float
    chains_per_target, warmup, samples_per_chain : int
    wall_seconds : float
    cancelled : bool
        Stopped early: the summaries cover what was kept.
    dataset, classifier, generator : str
        The stored references of the models sampled.
    model_checks : dict
        :func:`~probe_core.runs.validation.check_record` of the model checks made before sampling.
    generator_weak : bool
        The generator failed its check: results about its samples are not to be trusted.
    executor : str
    shards : int
    not_done : list of dict
        Shards that gave no result (``shard``, ``covers``, ``error``).
    use_case : dict or None
        The paper's use case this run is (:func:`~probe_core.bayestrex.recipes.run_use_case`).
    judge : str or None
        The classifier that judged the hits (each high or ambiguous target's ``judge_agreement``).
    """

    kind: ClassVar[str] = SampleRequest.kind

    targets: list[TargetReport]
    sampler: str = "hmc"
    seed: int = 0
    sigma: float | None = None
    chains_per_target: int | None = None
    warmup: int | None = None
    samples_per_chain: int | None = None
    wall_seconds: float = 0.0
    cancelled: bool = False
    dataset: str = ""
    classifier: str = ""
    generator: str = ""
    model_checks: dict = field(default_factory=dict)
    generator_weak: bool = False
    executor: str = "local"
    shards: int = 1
    not_done: list[dict] = field(default_factory=list)
    use_case: dict | None = None
    judge: str | None = None

    @property
    def generator_warning(self) -> str | None:
        """Why the generator is weak; None when it passed its check."""
        return self.model_checks.get("generator_warning") if self.generator_weak else None

    @property
    def judge_warnings(self) -> list[str]:
        """What the judge flags, one line each: a judge trained on the probed classifier's data, and every
        target whose hits it mostly puts outside the target's classes."""
        lines = [self.model_checks["judge_warning"]] if self.model_checks.get("judge_warning") else []
        for target in self.targets:
            judged = target.get("judge_agreement") or {}
            if judged.get("flagged"):
                lines.append(f"{target['spec']}: the judge {self.judge} puts only {judged['agreed']} of "
                             f"{judged['judged']} hits ({judged['share']:.0%}) in the target's classes: most "
                             "hits fool the probed classifier without looking like the class")
        return lines

    @property
    def provenance_warnings(self) -> list[str]:
        """Every target whose hits look copied from the training set, one line each, in words."""
        return copying_warnings(self.targets)

    @property
    def reached(self) -> int:
        """How many targets a chain reached."""
        return sum(not target["failed"] for target in self.targets)

    @classmethod
    def from_record(cls, record: dict) -> "SamplingResult":
        """The result from what :func:`~probe_core.bayestrex.run.sample` and the run store (keys it does
        not know, e.g. from an older version, are left out)."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{key: value for key, value in record.items() if key in names and value is not None})

    def to_record(self, with_samples: bool = False) -> dict:
        """JSON-ready, as the run stores it: without the per-target ``samples`` (they are in the store)
        unless ``with_samples`` (``probe sample --out``)."""
        record = dataclasses.asdict(self)
        if not with_samples:
            record["targets"] = [{key: value for key, value in target.items() if key != "samples"}
                                 for target in record["targets"]]
        return record


@dataclass(frozen=True)
class ComparisonResult(StoredResult):
    """Two classifiers' high-confidence samples of every class on one generator (paper Table 3).

    The samples are stored with target index ``side * K + class`` (side 0 is ``classifiers[0]``);
    people label them (:func:`~probe_core.bayestrex.recipes.comparison_table`).

    Attributes
    ----------
    sides : list of dict
        Per classifier: ``classifier`` and ``hit_rates`` (K,).
    class_names : list of str
    classifiers : list of str
        The two stored references, in side order.
    generator : str
    generator_weak : bool
    model_checks : dict
    """

    kind: ClassVar[str] = COMPARE

    sides: list[dict]
    class_names: list[str]
    classifiers: list[str]
    generator: str
    generator_weak: bool = False
    model_checks: dict = field(default_factory=dict)


@dataclass(frozen=True)
class LatentMapResult(StoredResult):
    """A run's hits mapped among prior draws (the arrays are cached with the sampling run ``run``)."""

    kind: ClassVar[str] = LATENT_MAP

    hits: int
    run: int
