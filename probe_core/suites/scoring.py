"""A suite's checks scored on a classifier: per check the accuracy against the human labels, the confidence on
the labelled class and on a wrong answer the check was found with; the score run kind and the regression gate."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import torch

from probe_core.catalog import generator_dataset, load_dataset
from probe_core.errors import ProbeError
from probe_core.runs.lifecycle import JobContext, JobFunction, StoredResult, job_of, run_kind, run_now, submit
from probe_core.runs.requests import BuiltFromSettings, check_reference

REGION = "defuse-region"
FINDING = "bayestrex-finding"
CHECK_KINDS = {REGION: "a labelled Defuse failure region (held-out samples with the region's label)",
               FINDING: "Bayes-TrEx samples labelled by people"}
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


def class_names_of(classifier, dataset: str, data_dir) -> tuple[str, ...]:
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
    names = class_names_of(classifier, suite["dataset"], registry.data_dir)
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


CLASSIFIER_TO_SCORE = "classifier to score (a model id, a plugin or a model file)"


@run_kind(ScoreResult)
@dataclass(frozen=True)
class ScoreRequest(BuiltFromSettings):
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

    def check_values(self) -> None:
        check_reference(self.suite, "suite")
        check_reference(self.classifier, CLASSIFIER_TO_SCORE)

    @classmethod
    def build(cls, registry, *, suite: str, classifier: str) -> "ScoreRequest":
        """The one way to make a score request: the suite must exist and the classifier resolve on its data set
        (never trained); the request holds the classifier's stored id.

        Raises
        ------
        ProbeError
            Before any run is stored.
        """
        stored = require_suite(registry.store, suite)
        check_reference(classifier, CLASSIFIER_TO_SCORE)
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
    return run_now(registry, ScoreRequest.build(registry, suite=suite, classifier=classifier), device=device)[1]


def submit_score(manager, registry, suite: str, classifier: str, device: str = "cpu") -> int:
    """Score a classifier on a suite in the background; returns the job's run id."""
    return submit(manager, ScoreRequest.build(registry, suite=suite, classifier=classifier), registry.data_dir,
                  device=device)


def require_suite(store, name: str) -> dict:
    suite = store.get_suite(name)
    if suite is None:
        known = ", ".join(s["name"] for s in store.list_suites()) or "none yet"
        raise ProbeError(f"no suite {name!r} (suites: {known}); `probe suite add --suite {name} ...` makes it")
    return suite
