"""The typed records the store returns: :class:`Run` (a dataclass) and a ``TypedDict`` per other table.

Arrays are decoded numpy arrays with the shapes given; JSON columns are decoded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

import numpy as np

ACTIVE_STATUSES = ("queued", "running")
FINAL_STATUSES = ("done", "failed", "cancelled", "interrupted")
REAPED_REASON = "the process running it stopped"


@dataclass(frozen=True)
class Run:
    """A row of the runs table with JSON columns decoded."""

    id: int
    kind: str
    config: dict
    status: str
    progress: float
    message: str
    details: dict | None
    result: dict | None
    error: str | None
    owner: str
    cancel_requested: bool
    created_at: float
    started_at: float | None
    updated_at: float
    finished_at: float | None
    job: dict | None = None  # how a worker rebuilds it (probe_core.runs.launchers.JobSpec), if it can
    user: str | None = None  # who started it (probe_core.team.accounts.Actor.recorded_name)

    @property
    def active(self) -> bool:
        return self.status in ACTIVE_STATUSES


class ModelRecord(TypedDict):
    """A trained model's metadata: ``spec`` is its :class:`~probe_core.models.ModelSpec` as stored."""

    id: str
    kind: str
    dataset: str
    path: str
    spec: dict
    metrics: dict
    created_at: float


class SampleRecord(TypedDict):
    """A kept MCMC sample: ``z`` (D,), ``confidences`` (K,), ``image`` (C, H, W) or None."""

    id: int
    run_id: int
    target_index: int
    chain: int
    step: int
    z: np.ndarray
    confidences: np.ndarray
    image: np.ndarray | None
    target_distance: float | None
    hit: bool | None


class ClusterRecord(TypedDict):
    """A failure cluster of a distill run: ``mean`` (D,), ``covariance`` (D, D)."""

    id: int
    run_id: int
    cluster_index: int
    weight: float
    size: int
    mean: np.ndarray
    covariance: np.ndarray
    info: dict


class ReviewImageRecord(TypedDict):
    """An image of a cluster shown to annotators: ``z`` (D,), ``image`` (C, H, W)."""

    id: int
    cluster_id: int
    position: int
    z: np.ndarray
    image: np.ndarray
    prediction: int


class LabelRecord(TypedDict):
    """One annotator's label of one cluster, review image or sample (``source`` human or ``oracle:MODEL``)."""

    id: int
    annotator: str
    source: str
    cluster_id: int | None
    sample_id: int | None
    review_image_id: int | None
    label: str | None
    is_failure: bool | None
    created_at: float


class TestImageLabelRecord(TypedDict):
    """A verdict on a test-set image (mislabel or misclassification)."""

    id: int
    annotator: str
    source: str
    dataset: str
    test_index: int
    label: str
    created_at: float


class LabelChange(TypedDict):
    """One change of a label (the audit trail): ``item`` is review_image, cluster, sample or test_image."""

    id: int
    annotator: str
    source: str
    item: str
    item_id: str
    old_label: str | None
    new_label: str | None
    changed_at: float


class UserRecord(TypedDict):
    """An account (:mod:`probe_core.team.accounts` holds the rules); ``signed_out_at``: its last sign-out, before which
    no sign-in cookie of it counts."""

    name: str
    role: str
    password_hash: str
    created_at: float
    changed_at: float
    signed_out_at: float | None


class SuiteRecord(TypedDict):
    """A regression suite; ``version`` goes up with each check added or retired."""

    id: int
    name: str
    dataset: str
    version: int
    created_at: float


class SuiteCheckRecord(TypedDict):
    """A check of a suite: ``data`` its arrays (``images`` (N, C, H, W), ``labels`` (N,) ...) or None."""

    id: int
    suite_id: int
    kind: str
    name: str
    found_on: str
    evidence: dict
    added_version: int
    retired_version: int | None
    created_at: float
    data: dict[str, np.ndarray] | None


class SuiteScoreRecord(TypedDict):
    """A classifier's score on one check: ``predictions`` (N,)."""

    check_id: int
    classifier: str
    suite_version: int
    accuracy: float
    confidence: float
    wrong_confidence: float
    count: int
    predictions: np.ndarray
    scored_at: float
