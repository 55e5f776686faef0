"""The workspace database: SQLite in WAL mode with a versioned schema, one :class:`Store` over table groups.

Tables: ``models`` (registry metadata), ``runs`` (background work: kind, config,
status, progress), ``samples`` (kept MCMC samples), ``clusters`` (failure
clusters), ``review_images`` (the images of a cluster that annotators label, with their
latent codes), ``labels`` (human or oracle labels of review images, samples, or, in
workspaces from before per-image labels, whole clusters), ``test_image_labels`` (verdicts on
test-set images: mislabel or misclassification) and
``arrays`` (named bundles of arrays belonging to a run: Defuse failures written
batch by batch, cluster assignments, cached embeddings).

Every write is one transaction. Connections are per thread, so one
:class:`Store` can be shared by background jobs and the UI. A run whose owning
process has died is reported as ``interrupted`` rather than running forever.
"""

from __future__ import annotations

from pathlib import Path

from probe_core.store.connection import pack_array, pack_arrays, unpack_array, unpack_arrays
from probe_core.store.labels import LabelTables
from probe_core.store.models import ModelTable
from probe_core.store.records import (
    ACTIVE_STATUSES,
    FINAL_STATUSES,
    REAPED_REASON,
    ClusterRecord,
    LabelChange,
    LabelRecord,
    ModelRecord,
    ReviewImageRecord,
    Run,
    SampleRecord,
    SuiteCheckRecord,
    SuiteRecord,
    SuiteScoreRecord,
    TestImageLabelRecord,
    UserRecord,
)
from probe_core.store.results import ResultTables
from probe_core.store.runs import RunTable, current_owner, owner_is_alive
from probe_core.store.schema import SCHEMA_VERSION
from probe_core.store.suites import SuiteTables
from probe_core.store.team import TeamTables


class Store(ModelTable, RunTable, ResultTables, LabelTables, TeamTables, SuiteTables):
    """Thread-safe access to one workspace database, one table group per base class.

    Parameters
    ----------
    path : str or Path
        The SQLite file; created with the current schema when missing.
    stale_after_s : float
        For runs owned by a process on another host (where liveness cannot be
        checked), the heartbeat age after which they count as interrupted.
    """

    def __init__(self, path: str | Path, stale_after_s: float = 600.0) -> None:
        self.stale_after_s = stale_after_s
        super().__init__(path)
        self.reap_interrupted()  # once, when the workspace is opened; reads never write


__all__ = [
    "ACTIVE_STATUSES", "FINAL_STATUSES", "REAPED_REASON", "SCHEMA_VERSION", "ClusterRecord", "LabelChange",
    "LabelRecord", "ModelRecord", "ReviewImageRecord", "Run", "SampleRecord", "Store", "SuiteCheckRecord",
    "SuiteRecord", "SuiteScoreRecord", "TestImageLabelRecord", "UserRecord", "current_owner", "owner_is_alive",
    "pack_array", "pack_arrays", "unpack_array", "unpack_arrays",
]
