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

The package's modules, lowest first: :mod:`~probe_core.suites.scoring` (a check's score, the score run kind, the
gate), :mod:`~probe_core.suites.checks` (adding and retiring checks), :mod:`~probe_core.suites.queries` (what
pages, the CLI and reports read). Their public names are re-exported here.
"""

from probe_core.suites.checks import (
    REGION_SAMPLES,
    REGION_SEED,
    add_finding_checks,
    add_region_check,
    add_region_checks,
    labelled_region_ids,
    labelled_samples,
    region_evidence,
    retire_check,
)
from probe_core.suites.queries import (
    label_names,
    scored_classifiers,
    suite_check,
    suite_matrix,
    suite_names,
    suite_report,
)
from probe_core.suites.scoring import (
    CHECK_KINDS,
    DEFAULT_MIN_ACCURACY,
    FINDING,
    NOVEL,
    NOVEL_CONFIDENCE,
    REGION,
    SCORE_KIND,
    CheckScore,
    ScoreRequest,
    ScoreResult,
    check_min_accuracy,
    classify,
    load_classifier,
    regressions,
    require_suite,
    score_check,
    score_job,
    score_now,
    score_suite,
    submit_score,
)

__all__ = [
    "CHECK_KINDS",
    "CheckScore",
    "DEFAULT_MIN_ACCURACY",
    "FINDING",
    "NOVEL",
    "NOVEL_CONFIDENCE",
    "REGION",
    "REGION_SAMPLES",
    "REGION_SEED",
    "SCORE_KIND",
    "ScoreRequest",
    "ScoreResult",
    "add_finding_checks",
    "add_region_check",
    "add_region_checks",
    "check_min_accuracy",
    "classify",
    "label_names",
    "labelled_region_ids",
    "labelled_samples",
    "load_classifier",
    "region_evidence",
    "regressions",
    "require_suite",
    "retire_check",
    "score_check",
    "score_job",
    "score_now",
    "score_suite",
    "scored_classifiers",
    "submit_score",
    "suite_check",
    "suite_matrix",
    "suite_names",
    "suite_report",
]
