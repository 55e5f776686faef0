"""Regression suites: failures that stay found.

A suite is a named, versioned collection of checks for one data set, stored in the workspace.
Each check keeps the evidence it came from (decoded images, latent codes, human labels), so it
can always be shown as images and stays valid when the run or the generator behind it is gone:

- ``defuse-region``: a labelled Defuse failure region. Its held-out samples are
  :data:`REGION_SAMPLES` fresh draws of N(μ, τΣ) (another seed than the review images),
  decoded by the run's VAE and labelled with the region's label, which the annotators gave.
- ``bayestrex-finding``: Bayes-TrEx samples a person labelled (a confident sample that is a
  true mistake, an ambiguous sample with its true class, Compare's labelled confident
  samples). Each sample keeps the majority of its labels; a tie leaves it out. A sample
  labelled ``none`` (none of the classifier's classes: a novel class) counts as right when
  the classifier is less than :data:`NOVEL_CONFIDENCE` sure of any class.

Scoring a classifier on a suite gives per check the accuracy against the human labels, the
mean confidence on the labelled class and, where the check's classifier was wrong, the mean
confidence the scored classifier still gives that wrong answer (calibration: "still 99 % sure
of a wrong answer?"). The classifier a check was found on is scored when the check is added,
so every check has that column to compare with. :func:`regressions` turns a score into a gate
(``probe suite score ... --min-accuracy``, exit 1).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import torch

from probe_core.catalog import generator_dataset, load_dataset
from probe_core.defuse.cluster import sample_cluster_latents
from probe_core.defuse.labels import DEFAULT_RHO, HUMAN, NONE_OF_THE_ABOVE, cluster_label_table, strict_majority
from probe_core.defuse.queries import DISTILL, distill_tau, load_run_models
from probe_core.errors import ProbeError
from probe_core.reporting.reports import suite_html_report
from probe_core.runs.history import require_run
from probe_core.runs.lifecycle import JobContext, JobFunction, StoredResult, job_of, run_kind, run_now, submit
from probe_core.team.accounts import Actor, Permission, local_owner, require

REGION = "defuse-region"
FINDING = "bayestrex-finding"
CHECK_KINDS = {REGION: "a labelled Defuse failure region (held-out samples with the region's label)",
               FINDING: "Bayes-TrEx samples labelled by people"}
REGION_SAMPLES = 100
REGION_SEED = 1  # the review images use seed 0: the held-out samples are other draws of the same region
NOVEL_CONFIDENCE = 0.5
NOVEL = -1  # label index of "none of the classifier's classes"
DEFAULT_MIN_ACCURACY = 0.8
SCORE_KIND = "suite-score"
_BATCH = 256


@dataclass(frozen=True)
class CheckScore:
    """One classifier on one check (fractions; None where nothing was there to average)."""

    check_id: int
    accuracy: float
    confidence: float | None
    wrong_confidence: float | None
    count: int
    predictions: np.ndarray

    def as_row(self) -> dict:
        return {"check_id": self.check_id, "accuracy": self.accuracy, "confidence": self.confidence,
                "wrong_confidence": self.wrong_confidence, "count": self.count, "predictions": self.predictions}


# -- scoring ---------------------------------------------------------------------------------------
@torch.no_grad()
def classify(classifier, images: np.ndarray) -> np.ndarray:
    """Class probabilities (N, K) of a loaded classifier for images (N, C, H, W) in [0, 1]."""
    device = next(iter(classifier.module.parameters()), torch.zeros(0)).device
    batches = [classifier.module(torch.from_numpy(np.ascontiguousarray(images[start:start + _BATCH]))
                                 .float().to(device)).cpu()
               for start in range(0, len(images), _BATCH)]
    return torch.cat(batches).numpy() if batches else np.zeros((0, 0), np.float32)


def score_check(check: dict, probs: np.ndarray) -> CheckScore:
    """Score class probabilities (N, K) of a check's images against its labels (see the module docstring)."""
    labels = check["data"]["labels"]
    found = check["data"]["found_predictions"]
    predictions = probs.argmax(1)
    known = labels != NOVEL
    correct = np.where(known, predictions == labels, probs.max(1) < NOVEL_CONFIDENCE)
    rows = np.arange(len(labels))
    wrong = found != labels
    return CheckScore(
        check_id=check["id"], accuracy=float(correct.mean()) if len(labels) else 0.0,
        confidence=float(probs[rows[known], labels[known]].mean()) if known.any() else None,
        wrong_confidence=float(probs[rows[wrong], found[wrong]].mean()) if wrong.any() else None,
        count=len(labels), predictions=predictions)


def _class_names_of(classifier, dataset: str, data_dir) -> tuple[str, ...]:
    return tuple(classifier.class_names or load_dataset(dataset, data_dir).class_names)


def load_classifier(registry, suite: dict, reference: str, device: str = "cpu"):
    """A classifier for scoring a suite: a model id, ``default`` or a plugin; never trains.

    Raises
    ------
    ProbeError
        If the classifier belongs to another data set.
    """
    classifier = registry.resolve(reference, "classifier", suite["dataset"], device)
    trained_on = classifier.record.get("dataset")
    if trained_on is not None and generator_dataset(trained_on) != suite["dataset"]:
        raise ProbeError(f"classifier {classifier.id} is for {trained_on}; suite {suite['name']!r} is for "
                         f"{suite['dataset']}")
    return classifier


@dataclass(frozen=True)
class ScoreResult(StoredResult):
    """A classifier's scores on a suite's checks (each also stored with the suite's version).

    Attributes
    ----------
    suite, dataset : str
    version : int
        The suite's version scored.
    classifier : str
        The classifier's stored id.
    checks : list of dict
        Per check: ``id``, ``name``, ``kind``, ``found_on``, ``count``, ``accuracy``, ``confidence``,
        ``wrong_confidence`` and ``found_on_accuracy`` (the check's own classifier's).
    skipped : list of dict
        The checks about other classes than the classifier's (``id``, ``name``, ``classes``).
    """

    kind: ClassVar[str] = SCORE_KIND

    suite: str
    dataset: str
    version: int
    classifier: str
    checks: list[dict]
    skipped: list[dict] = field(default_factory=list)


def score_suite(registry, store, suite_name: str, classifier_ref: str, device: str = "cpu",
                checks: list[dict] | None = None) -> ScoreResult:
    """Score a classifier on every check of a suite and store the scores."""
    suite = require_suite(store, suite_name)
    checks = store.get_suite_checks(suite_name) if checks is None else checks
    if not checks:
        raise ProbeError(f"suite {suite_name!r} has no checks yet: add one with `probe suite add`")
    classifier = load_classifier(registry, suite, classifier_ref, device)
    names = _class_names_of(classifier, suite["dataset"], registry.data_dir)
    # a check found on a classifier of other classes (e.g. a novel-class finding on a class-subset
    # classifier) cannot be scored on this one: it is skipped and named, not failed
    comparable = [check for check in checks if tuple(check["evidence"]["class_names"]) == names]
    skipped = [{"id": check["id"], "name": check["name"], "classes": check["evidence"]["class_names"]}
               for check in checks if tuple(check["evidence"]["class_names"]) != names]
    if not comparable:
        raise ProbeError(f"classifier {classifier.id} has the classes {', '.join(names)}; no check of suite "
                         f"{suite_name!r} is about those classes")
    scores = [score_check(check, classify(classifier, check["data"]["images"])) for check in comparable]
    store.put_suite_scores(classifier.id, suite["version"], [s.as_row() for s in scores])
    found_on = {(s["check_id"], s["classifier"]): s for s in store.get_suite_scores(suite_name)}
    rows = []
    for check, score in zip(comparable, scores):
        own = found_on.get((check["id"], check["found_on"]))
        rows.append({"id": check["id"], "name": check["name"], "kind": check["kind"], "found_on": check["found_on"],
                     "count": score.count, "accuracy": score.accuracy, "confidence": score.confidence,
                     "wrong_confidence": score.wrong_confidence,
                     "found_on_accuracy": None if own is None else own["accuracy"]})
    return ScoreResult(suite_name, suite["dataset"], suite["version"], classifier.id, rows, skipped)


def check_min_accuracy(min_accuracy: float) -> float:
    """The gate's threshold, refused unless a fraction in [0, 1] (before any work)."""
    if not 0.0 <= min_accuracy <= 1.0:
        raise ProbeError(f"--min-accuracy is a fraction in [0, 1], got {min_accuracy}")
    return min_accuracy


def regressions(score: ScoreResult, min_accuracy: float = DEFAULT_MIN_ACCURACY, baseline: ScoreResult | None = None,
                max_drop: float = 0.0) -> list[dict]:
    """The checks a scored classifier fails: accuracy below ``min_accuracy``, or (with ``baseline``,
    another classifier's score of the same suite) more than ``max_drop`` below the baseline's.

    Returns one ``{"id", "name", "accuracy", "reason"}`` per failed check.
    """
    check_min_accuracy(min_accuracy)
    before = {row["id"]: row["accuracy"] for row in (baseline.checks if baseline is not None else [])}
    failed = []
    for row in score.checks:
        reasons = []
        if row["accuracy"] < min_accuracy:
            reasons.append(f"accuracy {row['accuracy'] * 100:.0f} % < {min_accuracy * 100:.0f} %")
        if row["id"] in before and row["accuracy"] < before[row["id"]] - max_drop:
            reasons.append(f"{(before[row['id']] - row['accuracy']) * 100:.0f} points below {baseline.classifier}")
        if reasons:
            failed.append({"id": row["id"], "name": row["name"], "accuracy": row["accuracy"],
                           "reason": "; ".join(reasons)})
    return failed


@run_kind(ScoreResult)
@dataclass(frozen=True)
class ScoreRequest:
    """Score a classifier on a regression suite: its scores are stored with the suite's version.

    Build it with :meth:`build`; ``probe suite score``, the Finetune and Regressions pages and
    :func:`probe_core.api.suite` run it through the one lifecycle.

    Parameters
    ----------
    suite : str
    classifier : str
        A stored reference (model id, plugin or model file with its sha256).
    """

    kind: ClassVar[str] = SCORE_KIND

    suite: str
    classifier: str

    @classmethod
    def build(cls, registry, suite: str, classifier: str) -> "ScoreRequest":
        """The one way to make a score request: the suite must exist and the classifier resolve on its data set
        (never trained); the request holds the classifier's stored id.

        Raises
        ------
        ProbeError
            Before any run is stored.
        """
        stored = require_suite(registry.store, suite)
        if not isinstance(classifier, str) or not classifier.strip():
            raise ProbeError("name the classifier to score (a model id, a plugin or a model file)")
        return cls(suite, load_classifier(registry, stored, classifier.strip()).id)


@job_of(ScoreRequest)
def score_job(registry, request: ScoreRequest, device: str = "cpu") -> JobFunction:
    """:func:`score_suite` as a background job (the page's "Score" button)."""

    def run(context: JobContext) -> ScoreResult:
        context.report(0.05, f"scoring {request.classifier} on {request.suite}", force=True)
        return score_suite(registry, context.store, request.suite, request.classifier, device)

    return run


def score_now(registry, suite: str, classifier: str, device: str = "cpu") -> ScoreResult:
    """Score a classifier on a suite in this process, recorded as a run like the page's; returns
    :func:`score_suite`'s result (``probe suite score`` and :func:`probe_core.api.suite`)."""
    registry = registry.remembering()  # checked and scored on one load
    return run_now(registry, ScoreRequest.build(registry, suite, classifier), device=device)[1]


def submit_score(manager, registry, suite: str, classifier: str, device: str = "cpu") -> int:
    """Score a classifier on a suite in the background; returns the job's run id."""
    return submit(manager, ScoreRequest.build(registry, suite, classifier), registry.data_dir, device=device)


# -- adding checks ---------------------------------------------------------------------------------
def require_suite(store, name: str) -> dict:
    suite = store.get_suite(name)
    if suite is None:
        known = ", ".join(s["name"] for s in store.list_suites()) or "none yet"
        raise ProbeError(f"no suite {name!r} (suites: {known}); `probe suite add --suite {name} ...` makes it")
    return suite


def _add(registry, store, suite: str, dataset: str, *, kind: str, name: str, classifier, class_names, evidence: dict,
         latents: np.ndarray, images: np.ndarray, labels: np.ndarray) -> int:
    """Store a check and score the classifier it was found on, for the registry's actor (who must manage suites)."""
    require(registry.actor or local_owner(), Permission.SUITES)
    if not len(labels):
        raise ProbeError("nothing to add: the check would hold no labelled images")
    images = np.asarray(images, dtype=np.float32)
    probs = classify(classifier, images)
    check_id = store.add_suite_check(
        suite, generator_dataset(dataset), kind=kind, name=name, found_on=classifier.id,
        evidence={**evidence, "class_names": list(class_names)},
        arrays={"images": images, "latents": np.asarray(latents, dtype=np.float32),
                "labels": np.asarray(labels, dtype=np.int64), "found_predictions": probs.argmax(1)})
    score = score_check(store.get_suite_check(check_id), probs)
    store.put_suite_scores(classifier.id, require_suite(store, suite)["version"], [score.as_row()])
    return check_id


def region_evidence(registry, store, distill_run: int, cluster_id: int, *, source: str = HUMAN,
                    rho: float = DEFAULT_RHO, samples: int = REGION_SAMPLES, device: str = "cpu") -> dict:
    """A labelled failure region's held-out samples, before they become a check.

    Returns ``latents`` (S, D), ``images`` (S, C, H, W), ``labels`` (S,) class indices (the
    region's label), ``classifier`` and ``vae`` (loaded), ``dataset``, ``class_names`` and the
    cluster's ``row`` of :func:`~probe_core.defuse.labels.cluster_label_table`.

    Raises
    ------
    ProbeError
        If the cluster is not in the run, or its labels (of ``source``) do not make it a failure
        region with a label.
    """
    context = _RegionContext(registry, store, distill_run, source, rho, device)
    return context.evidence(context.row(cluster_id), samples)


class _RegionContext:
    """What every region of one distillation run shares: its models and its label table, loaded once."""

    def __init__(self, registry, store, distill_run: int, source: str, rho: float, device: str) -> None:
        require_run(store, distill_run, DISTILL)
        self.store, self.distill_run, self.source, self.device = store, distill_run, source, device
        self.dataset, self.classifier, self.vae = load_run_models(registry, store, distill_run, device)
        self.names = tuple(self.classifier.class_names or self.dataset.class_names)
        self.rows = {row["id"]: row for row in cluster_label_table(store, distill_run, self.names, source, rho)}

    def usable_ids(self) -> list[int]:
        """Cluster ids of the run's labelled failure regions."""
        return [cluster_id for cluster_id, row in self.rows.items() if row["usable"]]

    def row(self, cluster_id: int) -> dict:
        """The cluster's label-table row; a :class:`ProbeError` if it is not a labelled failure region of the run."""
        regions = f"the run's labelled failure regions: {', '.join(map(str, self.usable_ids())) or 'none yet'}"
        if cluster_id not in self.rows:
            raise ProbeError(f"cluster {cluster_id} is not in Defuse run {self.distill_run}; {regions}")
        row = self.rows[cluster_id]
        if not row["usable"]:
            raise ProbeError(f"cluster {cluster_id} is not a labelled failure region ({row['images_labelled']} "
                             f"images labelled by {self.source}): label its images first (Label page or "
                             f"`probe defuse label`); {regions}")
        return row

    def evidence(self, row: dict, samples: int) -> dict:
        """The region's held-out samples (seeded by the cluster, so the same on every call)."""
        cluster = self.store.get_cluster(row["id"])
        rng = np.random.default_rng([REGION_SEED, row["id"]])
        latents = sample_cluster_latents(cluster["mean"], cluster["covariance"], samples,
                                         distill_tau(self.store, self.distill_run), rng)
        with torch.no_grad():
            images = self.vae.module.decode(torch.from_numpy(latents).float().to(self.device)).cpu().numpy()
        return {"latents": latents, "images": images, "labels": np.full(samples, self.names.index(row["label"])),
                "classifier": self.classifier, "vae": self.vae, "dataset": self.dataset.name,
                "class_names": self.names, "row": row}


def add_region_check(registry, store, suite: str, distill_run: int, cluster_id: int, *, source: str = HUMAN,
                     rho: float = DEFAULT_RHO, samples: int = REGION_SAMPLES, name: str | None = None,
                     device: str = "cpu") -> int:
    """Add a labelled Defuse failure region to a suite (created when it does not exist); returns the check id.

    The check holds :func:`region_evidence`'s held-out samples; errors are that function's.
    """
    return add_region_checks(registry, store, suite, distill_run, [cluster_id], source=source, rho=rho,
                             samples=samples, name=name, device=device)[0]


def labelled_region_ids(registry, store, distill_run: int, source: str = HUMAN, rho: float = DEFAULT_RHO,
                        device: str = "cpu") -> list[int]:
    """The cluster ids of a Defuse run's labelled failure regions (those a suite check can be made of)."""
    return list(_RegionContext(registry, store, distill_run, source, rho, device).usable_ids())


def add_region_checks(registry, store, suite: str, distill_run: int, cluster_ids: list[int], *,
                      all_regions: bool = False, source: str = HUMAN, rho: float = DEFAULT_RHO,
                      samples: int = REGION_SAMPLES, name: str | None = None, device: str = "cpu") -> list[int]:
    """Add several labelled failure regions of one run to a suite, one check each; returns the check ids.

    ``all_regions`` adds every labelled failure region of the run besides ``cluster_ids``. The
    run's models and label table are loaded once, and every cluster is checked before anything is
    stored, so a bad cluster id leaves the suite as it was.

    Raises
    ------
    ProbeError
        If a cluster is not a labelled failure region of the run (the message lists those that
        are), or there is nothing to add.
    """
    context = _RegionContext(registry, store, distill_run, source, rho, device)
    cluster_ids = list(dict.fromkeys([*cluster_ids, *(context.usable_ids() if all_regions else [])]))
    if not cluster_ids:
        raise ProbeError(f"Defuse run {distill_run} has no labelled failure regions ({source} labels) yet: "
                         f"label its clusters' images first (Label page or `probe defuse label`)")
    rows = [context.row(cluster_id) for cluster_id in cluster_ids]
    added = []
    for row in rows:
        region = context.evidence(row, samples)
        added.append(_add(
            registry, store, suite, region["dataset"], kind=REGION, classifier=region["classifier"],
            class_names=region["class_names"],
            name=name or f"Defuse run {distill_run}, region {row['cluster_index'] + 1}: {row['label']}",
            evidence={"distill_run": distill_run, "cluster_id": row["id"], "label": row["label"],
                      "label_source": source, "annotators": row["annotators"], "agreement": row["agreement"],
                      "generator": region["vae"].id},
            latents=region["latents"], images=region["images"], labels=region["labels"]))
    return added


def labelled_samples(store, run_id: int, sample_ids: list[int] | None = None, source: str = HUMAN,
                     require_all: bool = True, samples: list[dict] | None = None) -> list[dict]:
    """A run's samples with a majority label of ``source`` (``label``), optionally only ``sample_ids``.

    With ``sample_ids`` and ``require_all``, a sample without a majority label is an error.
    ``samples``: the run's samples when the caller has them already (a page), else they are read.
    """
    wanted = None if sample_ids is None else set(sample_ids)
    labels = store.sample_labels(run_id, source)
    chosen = []
    for sample in store.get_samples(run_id) if samples is None else samples:
        if wanted is not None and sample["id"] not in wanted:
            continue
        label, _ = strict_majority([vote for vote in labels.get(sample["id"], []) if vote])
        if label is not None:
            chosen.append({**sample, "label": label})
    if wanted is not None and require_all:
        missing = wanted - {s["id"] for s in chosen}
        if missing:
            raise ProbeError(f"samples {', '.join(map(str, sorted(missing)))} are not labelled samples of run "
                             f"{run_id} (label them first: Probe page, Compare, or `probe label sample`)")
    return chosen


def add_finding_checks(registry, store, suite: str, run_id: int, sample_ids: list[int] | None = None, *,
                       source: str = HUMAN, name: str | None = None, device: str = "cpu") -> list[int]:
    """Add the labelled samples of a Bayes-TrEx run (probe or compare) to a suite; returns the check ids.

    One check per classifier the samples were found on (a comparison run has two). Without
    ``sample_ids``, every sample of the run with a majority label is taken.
    """
    run = store.get_run(run_id)
    if run is None or run.kind not in ("sample", "compare"):
        raise ProbeError(f"run {run_id} is not a Bayes-TrEx run (probe or compare)")
    if not run.result:
        raise ProbeError(f"run {run_id} has not finished ({run.status})")
    chosen = labelled_samples(store, run_id, sample_ids, source)
    if not chosen:
        raise ProbeError(f"run {run_id} has no labelled samples yet: label some (Probe page, Compare, or "
                         f"`probe label sample ID --annotator A --label C`)")
    if run.kind == "compare":
        classifiers, per_side = run.result["classifiers"], len(run.result["class_names"])
        side_of = lambda sample: sample["target_index"] // per_side  # noqa: E731
    else:
        classifiers, side_of = [run.result["classifier"]], (lambda sample: 0)
    dataset = run.result.get("dataset") or run.config["dataset"]
    descriptions = {index: entry.get("description", entry.get("spec", "")) for index, entry in
                    enumerate(run.result.get("targets", []))}
    planned = []  # every side is checked before anything is stored
    for side, classifier_id in enumerate(classifiers):
        mine = [sample for sample in chosen if side_of(sample) == side]
        if not mine:
            continue
        classifier = registry.resolve(classifier_id, "classifier", dataset, device)
        names = _class_names_of(classifier, dataset, registry.data_dir)
        unknown = sorted({s["label"] for s in mine} - set(names) - {NONE_OF_THE_ABOVE})
        if unknown:
            raise ProbeError(f"labels {', '.join(unknown)} are not classes of {classifier.id} ({', '.join(names)})")
        planned.append((classifier, names, mine))
    check_ids = []
    for classifier, names, mine in planned:
        targets = sorted({descriptions.get(s["target_index"], str(s["target_index"])) for s in mine})
        check_ids.append(_add(
            registry, store, suite, dataset, kind=FINDING, classifier=classifier, class_names=names,
            name=name or f"run {run_id} ({'; '.join(targets)[:80]}): {len(mine)} labelled samples",
            evidence={"run": run_id, "run_kind": run.kind, "targets": targets, "sample_ids": [s["id"] for s in mine],
                      "label_source": source, "generator": run.result.get("generator")},
            latents=np.stack([s["z"] for s in mine]), images=np.stack([s["image"] for s in mine]),
            labels=np.array([NOVEL if s["label"] == NONE_OF_THE_ABOVE else names.index(s["label"]) for s in mine])))
    return check_ids


def retire_check(store, suite_name: str, check_id: int, *, actor: Actor | None = None) -> int:
    """Take a check out of a suite from its next version on (its evidence and scores are kept); returns
    the suite's new version.

    Raises
    ------
    ProbeError
        If the suite has no such check.
    PermissionDenied
        Unless ``actor`` (default the local owner) manages suites.
    """
    require(actor or local_owner(), Permission.SUITES)
    check = store.get_suite_check(check_id, with_data=False)
    suite = store.get_suite(suite_name)
    if check is None or suite is None or check["suite_id"] != suite["id"]:
        raise ProbeError(f"suite {suite_name!r} has no check {check_id}")
    store.retire_suite_check(check_id)
    return int(store.get_suite(suite_name)["version"])


# -- reading a suite -------------------------------------------------------------------------------
def suite_names(store, dataset: str | None = None) -> list[str]:
    """The suites of a data set (every suite when None), oldest first."""
    return [suite["name"] for suite in store.list_suites(dataset)]


def suite_check(store, check_id: int, with_data: bool = True) -> dict | None:
    """One check with its evidence (and its arrays when ``with_data``); None if there is none."""
    return store.get_suite_check(check_id, with_data=with_data)


def scored_classifiers(store, suite_name: str) -> list[str]:
    """The classifiers scored on a suite, in the order they were first scored."""
    return list(dict.fromkeys(score["classifier"] for score in store.get_suite_scores(suite_name)))


def suite_matrix(store, suite_name: str) -> dict:
    """Checks × classifiers: ``suite``, ``checks`` (without their arrays), ``classifiers`` (in the order
    they were first scored) and ``cells`` ``{(check_id, classifier): score}``."""
    suite = require_suite(store, suite_name)
    checks = store.get_suite_checks(suite_name, with_data=False)
    scores = store.get_suite_scores(suite_name)
    classifiers = list(dict.fromkeys(score["classifier"] for score in scores))
    active = {check["id"] for check in checks}
    return {"suite": suite, "checks": checks, "classifiers": classifiers,
            "cells": {(s["check_id"], s["classifier"]): s for s in scores if s["check_id"] in active}}


def label_names(check: dict) -> list[str]:
    """The human label of each of a check's images, as class names (``none`` for a novel class)."""
    names = check["evidence"]["class_names"]
    return [NONE_OF_THE_ABOVE if label == NOVEL else names[label] for label in check["data"]["labels"]]


def suite_report(store, suite_name: str, images_per_check: int = 20, *, actor: Actor | None = None) -> str:
    """The self-contained HTML report of a suite: every check's images, labels and scores across versions
    (an export: ``actor``, default the local owner, must be allowed to download exports)."""
    require(actor or local_owner(), Permission.EXPORT)
    matrix = suite_matrix(store, suite_name)
    sections = []
    for summary in matrix["checks"]:
        check = store.get_suite_check(summary["id"])
        shown = slice(0, images_per_check)
        labels = label_names(check)
        sections.append({
            "title": f"Check {check['id']}: {check['name']}",
            "facts": {"kind": CHECK_KINDS.get(check["kind"], check["kind"]), "found on": check["found_on"],
                      "images": len(labels), "labels": ", ".join(sorted(set(labels))),
                      "added in suite version": check["added_version"]},
            "images": check["data"]["images"][shown],
            "scores": [{"classifier": classifier, "accuracy": f"{cell['accuracy'] * 100:.0f} %",
                        "confidence on the label": "–" if cell["confidence"] is None else f"{cell['confidence']:.2f}",
                        "confidence in the wrong answer": "–" if cell["wrong_confidence"] is None
                        else f"{cell['wrong_confidence']:.2f}",
                        "suite version": cell["suite_version"]}
                       for classifier in matrix["classifiers"]
                       if (cell := matrix["cells"].get((check["id"], classifier))) is not None],
        })
    grid = [[matrix["cells"].get((check["id"], classifier), {}).get("accuracy") for classifier in matrix["classifiers"]]
            for check in matrix["checks"]]
    return suite_html_report(f"Regression suite {suite_name}", matrix["suite"], [c["name"] for c in matrix["checks"]],
                             matrix["classifiers"], grid, sections)
