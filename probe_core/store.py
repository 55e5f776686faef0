"""The workspace database: SQLite in WAL mode with a versioned schema.

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

import io
import json
import os
import socket
import sqlite3
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from probe_core.errors import ProbeError

SCHEMA_VERSION = 7

_MIGRATIONS: dict[int, str] = {
    1: """
    CREATE TABLE models (
        id TEXT PRIMARY KEY,
        kind TEXT NOT NULL,
        dataset TEXT NOT NULL,
        path TEXT NOT NULL,
        spec TEXT NOT NULL,
        metrics TEXT NOT NULL,
        created_at REAL NOT NULL
    );
    CREATE TABLE runs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        kind TEXT NOT NULL,
        config TEXT NOT NULL,
        status TEXT NOT NULL,
        progress REAL NOT NULL DEFAULT 0,
        message TEXT NOT NULL DEFAULT '',
        details TEXT,
        result TEXT,
        error TEXT,
        owner TEXT NOT NULL,
        cancel_requested INTEGER NOT NULL DEFAULT 0,
        created_at REAL NOT NULL,
        started_at REAL,
        updated_at REAL NOT NULL,
        finished_at REAL
    );
    CREATE INDEX runs_by_kind ON runs(kind, id);
    CREATE TABLE samples (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        target_index INTEGER NOT NULL DEFAULT 0,
        chain INTEGER NOT NULL,
        step INTEGER NOT NULL,
        z BLOB NOT NULL,
        confidences BLOB NOT NULL,
        image BLOB,
        target_distance REAL,
        hit INTEGER,
        created_at REAL NOT NULL
    );
    CREATE INDEX samples_by_run ON samples(run_id, target_index, id);
    CREATE TABLE clusters (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        cluster_index INTEGER NOT NULL,
        weight REAL NOT NULL,
        size INTEGER NOT NULL,
        mean BLOB NOT NULL,
        covariance BLOB NOT NULL,
        info TEXT NOT NULL DEFAULT '{}',
        UNIQUE(run_id, cluster_index)
    );
    CREATE TABLE labels (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        annotator TEXT NOT NULL,
        source TEXT NOT NULL DEFAULT 'human',
        cluster_id INTEGER REFERENCES clusters(id) ON DELETE CASCADE,
        sample_id INTEGER REFERENCES samples(id) ON DELETE CASCADE,
        label TEXT,
        is_failure INTEGER,
        created_at REAL NOT NULL,
        CHECK ((cluster_id IS NULL) != (sample_id IS NULL))
    );
    CREATE UNIQUE INDEX labels_one_per_cluster ON labels(annotator, source, cluster_id) WHERE cluster_id IS NOT NULL;
    CREATE UNIQUE INDEX labels_one_per_sample ON labels(annotator, source, sample_id) WHERE sample_id IS NOT NULL;
    """,
    2: """
    CREATE TABLE arrays (
        run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        name TEXT NOT NULL,
        data BLOB NOT NULL,
        rows INTEGER NOT NULL,
        created_at REAL NOT NULL,
        PRIMARY KEY (run_id, name)
    );
    """,
    3: """
    ALTER TABLE runs ADD COLUMN job TEXT;
    """,
    # Defuse's annotators label each of a cluster's review images (the paper's 10 samples); the images
    # are stored with their latent codes so every label keeps pointing at the same picture.
    4: """
    CREATE TABLE review_images (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        cluster_id INTEGER NOT NULL REFERENCES clusters(id) ON DELETE CASCADE,
        position INTEGER NOT NULL,
        z BLOB NOT NULL,
        image BLOB NOT NULL,
        prediction INTEGER NOT NULL,
        UNIQUE(cluster_id, position)
    );
    ALTER TABLE labels ADD COLUMN review_image_id INTEGER REFERENCES review_images(id) ON DELETE CASCADE;
    DROP INDEX labels_one_per_cluster;
    CREATE UNIQUE INDEX labels_one_per_cluster ON labels(annotator, source, cluster_id)
        WHERE cluster_id IS NOT NULL AND review_image_id IS NULL;
    CREATE UNIQUE INDEX labels_one_per_review_image ON labels(annotator, source, review_image_id)
        WHERE review_image_id IS NOT NULL;
    """,
    # People's verdicts on test-set images (the misclassification test-set baseline): is a confident
    # "mistake" a mislabelled test image or a real misclassification? Keyed by data set and index.
    5: """
    CREATE TABLE test_image_labels (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        annotator TEXT NOT NULL,
        source TEXT NOT NULL DEFAULT 'human',
        dataset TEXT NOT NULL,
        test_index INTEGER NOT NULL,
        label TEXT NOT NULL,
        created_at REAL NOT NULL,
        UNIQUE(annotator, source, dataset, test_index)
    );
    """,
    # Regression suites (probe_core/suites.py): named collections of checks per data set. A check keeps
    # its evidence (decoded images, latents, human labels) so it outlives the run and the generator it
    # came from; a score is one classifier's result on one check (the newest per pair is kept).
    6: """
    CREATE TABLE suites (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        name TEXT NOT NULL UNIQUE,
        dataset TEXT NOT NULL,
        version INTEGER NOT NULL DEFAULT 0,
        created_at REAL NOT NULL
    );
    CREATE TABLE suite_checks (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        suite_id INTEGER NOT NULL REFERENCES suites(id) ON DELETE CASCADE,
        kind TEXT NOT NULL,
        name TEXT NOT NULL,
        found_on TEXT NOT NULL,
        evidence TEXT NOT NULL,
        data BLOB NOT NULL,
        added_version INTEGER NOT NULL,
        retired_version INTEGER,
        created_at REAL NOT NULL
    );
    CREATE INDEX suite_checks_by_suite ON suite_checks(suite_id, id);
    CREATE TABLE suite_scores (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        check_id INTEGER NOT NULL REFERENCES suite_checks(id) ON DELETE CASCADE,
        classifier TEXT NOT NULL,
        suite_version INTEGER NOT NULL,
        accuracy REAL NOT NULL,
        confidence REAL,
        wrong_confidence REAL,
        count INTEGER NOT NULL,
        predictions BLOB NOT NULL,
        scored_at REAL NOT NULL,
        UNIQUE(check_id, classifier)
    );
    """,
    # Team labelling (probe_core/accounts.py): accounts with bcrypt hashes, the secret that signs the
    # dashboard's sign-in cookie, who started each run, and every change of a label (who, when, old -> new).
    7: """
    CREATE TABLE users (
        name TEXT PRIMARY KEY,
        role TEXT NOT NULL,
        password_hash TEXT NOT NULL,
        created_at REAL NOT NULL,
        changed_at REAL NOT NULL
    );
    CREATE TABLE workspace_secrets (
        name TEXT PRIMARY KEY,
        value TEXT NOT NULL
    );
    ALTER TABLE runs ADD COLUMN user TEXT;
    CREATE TABLE label_history (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        annotator TEXT NOT NULL,
        source TEXT NOT NULL,
        item TEXT NOT NULL,
        item_id TEXT NOT NULL,
        old_label TEXT,
        new_label TEXT,
        changed_at REAL NOT NULL
    );
    CREATE INDEX label_history_by_item ON label_history(item, item_id, id);
    """,
}

ACTIVE_STATUSES = ("queued", "running")
FINAL_STATUSES = ("done", "failed", "cancelled", "interrupted")
REAPED_REASON = "the process running it stopped"


def pack_array(array: Any) -> bytes:
    """Serialise an array to ``.npy`` bytes (keeps dtype and shape)."""
    buffer = io.BytesIO()
    np.save(buffer, np.asarray(array), allow_pickle=False)
    return buffer.getvalue()


def unpack_array(blob: bytes | None) -> np.ndarray | None:
    """Inverse of :func:`pack_array`."""
    return None if blob is None else np.load(io.BytesIO(blob), allow_pickle=False)


def pack_arrays(arrays: dict[str, Any]) -> bytes:
    """Serialise named arrays to ``.npz`` bytes (uncompressed: latents barely compress)."""
    buffer = io.BytesIO()
    np.savez(buffer, **{name: np.asarray(value) for name, value in arrays.items()})
    return buffer.getvalue()


def unpack_arrays(blob: bytes) -> dict[str, np.ndarray]:
    """Inverse of :func:`pack_arrays`."""
    with np.load(io.BytesIO(blob), allow_pickle=False) as archive:
        return {name: archive[name] for name in archive.files}


def _process_start_ticks(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return "?"


def current_owner() -> str:
    """``host:pid:start`` naming this process, robust to PID reuse on Linux."""
    pid = os.getpid()
    return f"{socket.gethostname()}:{pid}:{_process_start_ticks(pid)}"


def _process_state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "?"


def owner_is_alive(owner: str) -> bool | None:
    """Whether the process named by ``owner`` still runs; None if it is on another host.

    A zombie (dead, not yet collected by its parent) counts as dead.
    """
    host, _, rest = owner.partition(":")
    if host != socket.gethostname():
        return None
    pid_text, _, start = rest.partition(":")
    try:
        pid = int(pid_text)
        os.kill(pid, 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return start in ("?", _process_start_ticks(pid)) and _process_state(pid) != "Z"


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
    job: dict | None = None  # how a worker rebuilds it (probe_core.launchers.JobSpec), if it can
    user: str | None = None  # who started it (probe_core.accounts.Actor.recorded_name)

    @property
    def active(self) -> bool:
        return self.status in ACTIVE_STATUSES


def _checked_annotator(annotator: str | None) -> str:
    annotator = (annotator or "").strip()
    if not annotator:
        raise ProbeError("an annotator name is required to store a label")
    return annotator


def _record_change(connection: sqlite3.Connection, annotator: str, source: str, item: str, item_id: Any,
                   previous: sqlite3.Row | None, label: str | None) -> None:
    """Append one change of a label to its history (inside the writing transaction): relabelling never loses
    the earlier value."""
    connection.execute(
        "INSERT INTO label_history (annotator, source, item, item_id, old_label, new_label, changed_at) "
        "VALUES (?,?,?,?,?,?,?)",
        (annotator, source, item, str(item_id), None if previous is None else previous[0], label, time.time()))


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


class Store:
    """Thread-safe access to one workspace database.

    Parameters
    ----------
    path : str or Path
        The SQLite file; created with the current schema when missing.
    stale_after_s : float
        For runs owned by a process on another host (where liveness cannot be
        checked), the heartbeat age after which they count as interrupted.
    """

    def __init__(self, path: str | Path, stale_after_s: float = 600.0) -> None:
        self.path = Path(path)
        self.stale_after_s = stale_after_s
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._migrate()
        self.reap_interrupted()  # once, when the workspace is opened; reads never write

    # -- connections -----------------------------------------------------------------
    def _connection(self) -> sqlite3.Connection:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = sqlite3.connect(self.path, timeout=60.0, isolation_level=None)
            connection.row_factory = sqlite3.Row
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=NORMAL")
            connection.execute("PRAGMA foreign_keys=ON")
            connection.execute("PRAGMA busy_timeout=60000")
            self._local.connection = connection
        return connection

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (``BEGIN IMMEDIATE``), rolled back on any error."""
        connection = self._connection()
        connection.execute("BEGIN IMMEDIATE")
        try:
            yield connection
        except BaseException:
            connection.execute("ROLLBACK")
            raise
        connection.execute("COMMIT")

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        return self._connection().execute(sql, params).fetchall()

    def close(self) -> None:
        """Close this thread's connection (others close when their threads end)."""
        connection = getattr(self._local, "connection", None)
        if connection is not None:
            connection.close()
            self._local.connection = None

    def _migrate(self) -> None:
        with self.transaction() as connection:
            version = connection.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise ProbeError(
                    f"workspace database {self.path} has schema version {version}, newer than this "
                    f"Model Probe ({SCHEMA_VERSION}); upgrade Model Probe or use another workspace"
                )
            for target in range(version + 1, SCHEMA_VERSION + 1):
                for statement in _MIGRATIONS[target].split(";"):
                    if statement.strip():
                        connection.execute(statement)
                connection.execute(f"PRAGMA user_version = {target}")

    @property
    def schema_version(self) -> int:
        return int(self._query("PRAGMA user_version")[0][0])

    # -- models ----------------------------------------------------------------------
    def put_model(self, model_id: str, kind: str, dataset: str, path: str, spec: dict, metrics: dict) -> None:
        """Insert or replace a model's metadata."""
        with self.transaction() as connection:
            connection.execute(
                "INSERT OR REPLACE INTO models (id, kind, dataset, path, spec, metrics, created_at) VALUES (?,?,?,?,?,?,?)",
                (model_id, kind, dataset, path, json.dumps(spec, sort_keys=True), json.dumps(metrics), time.time()),
            )

    def get_model(self, model_id: str) -> dict | None:
        rows = self._query("SELECT * FROM models WHERE id = ?", (model_id,))
        return self._model_row(rows[0]) if rows else None

    def list_models(self, dataset: str | None = None, kind: str | None = None) -> list[dict]:
        """Model metadata, newest first, optionally filtered."""
        sql, params = "SELECT * FROM models WHERE 1=1", []
        if dataset is not None:
            sql += " AND dataset = ?"
            params.append(dataset)
        if kind is not None:
            sql += " AND kind = ?"
            params.append(kind)
        return [self._model_row(r) for r in self._query(sql + " ORDER BY created_at DESC", params)]

    @staticmethod
    def _model_row(row: sqlite3.Row) -> dict:
        return {
            "id": row["id"], "kind": row["kind"], "dataset": row["dataset"], "path": row["path"],
            "spec": json.loads(row["spec"]), "metrics": json.loads(row["metrics"]), "created_at": row["created_at"],
        }

    # -- runs ------------------------------------------------------------------------
    def create_run(self, kind: str, config: dict, status: str = "queued", job: str | None = None,
                   user: str | None = None) -> int:
        """Record a new run owned by this process; returns its id.

        ``job`` is the JSON of a :class:`probe_core.lifecycle.JobSpec`, for a worker process to rebuild it;
        ``user`` who started it (:attr:`probe_core.accounts.Actor.recorded_name`).
        """
        now = time.time()
        with self.transaction() as connection:
            cursor = connection.execute(
                "INSERT INTO runs (kind, config, status, owner, created_at, updated_at, job, user) "
                "VALUES (?,?,?,?,?,?,?,?)",
                (kind, json.dumps(config, sort_keys=True, default=str), status, current_owner(), now, now, job, user),
            )
            return int(cursor.lastrowid)

    def interrupt_run(self, run_id: int, reason: str) -> bool:
        """Mark a still-active run ``interrupted`` with a reason; returns whether it changed.

        A run already found interrupted by :meth:`reap_interrupted` gets the more precise reason.
        """
        now = time.time()
        with self.transaction() as connection:
            cursor = connection.execute(
                f"UPDATE runs SET status='interrupted', error=?, finished_at=COALESCE(finished_at, ?), updated_at=? "
                f"WHERE id=? AND (status IN {ACTIVE_STATUSES} OR (status='interrupted' AND error=?))",
                (reason, now, now, run_id, REAPED_REASON))
            return cursor.rowcount > 0

    def start_run(self, run_id: int) -> None:
        now = time.time()
        with self.transaction() as connection:
            connection.execute(
                "UPDATE runs SET status='running', owner=?, started_at=?, updated_at=? WHERE id=?",
                (current_owner(), now, now, run_id),
            )

    def update_run(self, run_id: int, progress: float | None = None, message: str | None = None,
                   details: dict | None = None) -> bool:
        """Record progress (and a heartbeat); returns whether cancellation was requested."""
        with self.transaction() as connection:
            connection.execute(
                "UPDATE runs SET progress=COALESCE(?, progress), message=COALESCE(?, message), "
                "details=COALESCE(?, details), updated_at=? WHERE id=?",
                (progress, message, None if details is None else json.dumps(details, default=float), time.time(), run_id),
            )
            row = connection.execute("SELECT cancel_requested FROM runs WHERE id=?", (run_id,)).fetchone()
        return bool(row and row[0])

    def finish_run(self, run_id: int, status: str, result: dict | None = None, error: str | None = None) -> None:
        if status not in FINAL_STATUSES:
            raise ValueError(f"final status must be one of {FINAL_STATUSES}, got {status!r}")
        now = time.time()
        with self.transaction() as connection:
            connection.execute(
                "UPDATE runs SET status=?, result=?, error=?, finished_at=?, updated_at=?, "
                "progress=CASE WHEN ?='done' THEN 1.0 ELSE progress END WHERE id=?",
                (status, None if result is None else json.dumps(result, default=float), error, now, now, status, run_id),
            )

    def request_cancel(self, run_id: int) -> None:
        """Ask a run to stop; the job sees it at its next progress report."""
        with self.transaction() as connection:
            connection.execute("UPDATE runs SET cancel_requested=1 WHERE id=?", (run_id,))

    def get_run(self, run_id: int) -> Run | None:
        """A run as it stands; one whose owning process is gone reads as ``interrupted`` (see :meth:`_run_row`)."""
        rows = self._query("SELECT * FROM runs WHERE id=?", (run_id,))
        return self._run_row(rows[0]) if rows else None

    def list_runs(self, kind: str | None = None, limit: int = 100, active_only: bool = False) -> list[Run]:
        """Runs newest first, read as :meth:`get_run` reads them (nothing is written)."""
        sql, params = "SELECT * FROM runs WHERE 1=1", []
        if kind is not None:
            sql += " AND kind=?"
            params.append(kind)
        if active_only:
            sql += f" AND status IN {ACTIVE_STATUSES}"
        sql += " ORDER BY id DESC LIMIT ?"
        params.append(limit)
        runs = [self._run_row(r) for r in self._query(sql, params)]
        return [r for r in runs if r.active] if active_only else runs

    def _owner_gone(self, owner: str, updated_at: float, now: float) -> bool:
        alive = owner_is_alive(owner)
        return alive is False or (alive is None and now - updated_at > self.stale_after_s)

    def reap_interrupted(self) -> int:
        """Write ``interrupted`` on active runs whose owning process is gone; returns how many.

        Called when the store is opened. Reads do not need it: they already show such runs as
        interrupted, so a page polling every second never writes.
        """
        rows = self._query(f"SELECT id, owner, updated_at FROM runs WHERE status IN {ACTIVE_STATUSES}")
        now = time.time()
        dead = [row["id"] for row in rows if self._owner_gone(row["owner"], row["updated_at"], now)]
        if dead:
            with self.transaction() as connection:
                connection.executemany(
                    f"UPDATE runs SET status='interrupted', error=?, "
                    f"finished_at=? WHERE id=? AND status IN {ACTIVE_STATUSES}",
                    [(REAPED_REASON, now, run_id) for run_id in dead],
                )
        return len(dead)

    def _run_row(self, row: sqlite3.Row) -> Run:
        """A row as a :class:`Run`; an active run whose owner is gone reads as interrupted, without a write."""
        status, error, finished_at = row["status"], row["error"], row["finished_at"]
        if status in ACTIVE_STATUSES and self._owner_gone(row["owner"], row["updated_at"], time.time()):
            status, error, finished_at = "interrupted", REAPED_REASON, row["updated_at"]
        return Run(
            id=row["id"], kind=row["kind"], config=json.loads(row["config"]), status=status,
            progress=row["progress"], message=row["message"], details=_loads(row["details"]),
            result=_loads(row["result"]), error=error, owner=row["owner"],
            cancel_requested=bool(row["cancel_requested"]), created_at=row["created_at"],
            started_at=row["started_at"], updated_at=row["updated_at"], finished_at=finished_at,
            job=_loads(row["job"]), user=row["user"],
        )

    # -- samples ---------------------------------------------------------------------
    def add_samples(self, run_id: int, samples: Iterable[dict]) -> int:
        """Append kept samples in one transaction.

        Each dict has ``chain``, ``step``, ``z`` (latent_dim,), ``confidences`` (K,),
        and optionally ``target_index``, ``image`` (C, H, W), ``target_distance``, ``hit``.
        Returns the number written.
        """
        now = time.time()
        rows = [
            (
                run_id, int(s.get("target_index", 0)), int(s["chain"]), int(s["step"]),
                pack_array(np.asarray(s["z"], dtype=np.float32)),
                pack_array(np.asarray(s["confidences"], dtype=np.float32)),
                None if s.get("image") is None else pack_array(np.asarray(s["image"], dtype=np.float32)),
                None if s.get("target_distance") is None else float(s["target_distance"]),
                None if s.get("hit") is None else int(bool(s["hit"])),
                now,
            )
            for s in samples
        ]
        with self.transaction() as connection:
            connection.executemany(
                "INSERT INTO samples (run_id, target_index, chain, step, z, confidences, image, target_distance, hit, "
                "created_at) VALUES (?,?,?,?,?,?,?,?,?,?)",
                rows,
            )
        return len(rows)

    def get_samples(self, run_id: int, target_index: int | None = None, limit: int | None = None,
                    newest_first: bool = False) -> list[dict]:
        """Stored samples of a run with arrays decoded."""
        sql, params = "SELECT * FROM samples WHERE run_id=?", [run_id]
        if target_index is not None:
            sql += " AND target_index=?"
            params.append(target_index)
        sql += " ORDER BY id DESC" if newest_first else " ORDER BY id"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return [
            {
                "id": r["id"], "run_id": r["run_id"], "target_index": r["target_index"], "chain": r["chain"],
                "step": r["step"], "z": unpack_array(r["z"]), "confidences": unpack_array(r["confidences"]),
                "image": unpack_array(r["image"]), "target_distance": r["target_distance"],
                "hit": None if r["hit"] is None else bool(r["hit"]),
            }
            for r in self._query(sql, params)
        ]

    def count_samples(self, run_id: int) -> int:
        return int(self._query("SELECT COUNT(*) FROM samples WHERE run_id=?", (run_id,))[0][0])

    # -- clusters --------------------------------------------------------------------
    def add_clusters(self, run_id: int, clusters: Iterable[dict]) -> list[int]:
        """Store clusters (``cluster_index``, ``weight``, ``size``, ``mean``, ``covariance``, ``info``)."""
        ids = []
        with self.transaction() as connection:
            for c in clusters:
                cursor = connection.execute(
                    "INSERT INTO clusters (run_id, cluster_index, weight, size, mean, covariance, info) "
                    "VALUES (?,?,?,?,?,?,?)",
                    (run_id, int(c["cluster_index"]), float(c["weight"]), int(c["size"]),
                     pack_array(c["mean"]), pack_array(c["covariance"]), json.dumps(c.get("info", {}), default=float)),
                )
                ids.append(int(cursor.lastrowid))
        return ids

    def get_clusters(self, run_id: int) -> list[dict]:
        """A run's clusters in index order, arrays decoded."""
        return [self._cluster_row(r)
                for r in self._query("SELECT * FROM clusters WHERE run_id=? ORDER BY cluster_index", (run_id,))]

    def get_cluster(self, cluster_id: int) -> dict | None:
        rows = self._query("SELECT * FROM clusters WHERE id=?", (cluster_id,))
        return self._cluster_row(rows[0]) if rows else None

    @staticmethod
    def _cluster_row(row: sqlite3.Row) -> dict:
        return {
            "id": row["id"], "run_id": row["run_id"], "cluster_index": row["cluster_index"], "weight": row["weight"],
            "size": row["size"], "mean": unpack_array(row["mean"]), "covariance": unpack_array(row["covariance"]),
            "info": json.loads(row["info"]),
        }

    # -- review images ---------------------------------------------------------------
    def put_review_images(self, cluster_id: int, latents: np.ndarray, images: np.ndarray,
                          predictions: np.ndarray) -> list[int]:
        """Store a cluster's review images once; returns their ids in position order.

        A cluster that already has review images keeps them (labels point at them), so this is
        safe to call from several processes.

        Parameters
        ----------
        latents : np.ndarray
            (S, D) latent codes.
        images : np.ndarray
            (S, C, H, W) decoded images.
        predictions : np.ndarray
            (S,) the classifier's predicted class of each image.
        """
        with self.transaction() as connection:
            connection.executemany(
                "INSERT OR IGNORE INTO review_images (cluster_id, position, z, image, prediction) VALUES (?,?,?,?,?)",
                [(cluster_id, position, pack_array(np.asarray(z, dtype=np.float32)),
                  pack_array(np.asarray(image, dtype=np.float32)), int(prediction))
                 for position, (z, image, prediction) in enumerate(zip(latents, images, predictions))])
        return [image["id"] for image in self.get_review_images(cluster_id)]

    def get_review_images(self, cluster_id: int) -> list[dict]:
        """A cluster's review images in position order: ``id``, ``position``, ``z``, ``image``, ``prediction``."""
        return [{"id": r["id"], "cluster_id": r["cluster_id"], "position": r["position"], "z": unpack_array(r["z"]),
                 "image": unpack_array(r["image"]), "prediction": r["prediction"]}
                for r in self._query("SELECT * FROM review_images WHERE cluster_id=? ORDER BY position",
                                     (cluster_id,))]

    # -- labels ----------------------------------------------------------------------
    def set_label(self, annotator: str, *, cluster_id: int | None = None, sample_id: int | None = None,
                  review_image_id: int | None = None, label: str | None = None, is_failure: bool | None = None,
                  source: str = "human") -> int:
        """Write one label now, replacing this annotator's earlier label of the same item.

        Parameters
        ----------
        annotator : str
            Who labelled; must not be empty.
        cluster_id, sample_id, review_image_id : int
            Exactly one: what was labelled (a review image's label is also filed under its cluster).
        label : str, optional
            The correct class name, or ``"none"`` for "none of the above".
        is_failure : bool, optional
            Whether the annotator judged it a failure of the classifier.
        source : str
            ``"human"``, or ``"oracle:MODEL"`` for automatic labels (kept apart).
        """
        if review_image_id is not None:
            if cluster_id is not None or sample_id is not None or is_failure is not None:
                raise ProbeError("a review image's label is its class only: give the review image alone")
            return self.set_labels(annotator, [(review_image_id, label)], source=source)[0]
        return self._set_item_label(annotator, cluster_id, sample_id, label, is_failure, source)

    def _set_item_label(self, annotator: str, cluster_id: int | None, sample_id: int | None, label: str | None,
                        is_failure: bool | None, source: str) -> int:
        annotator = _checked_annotator(annotator)
        if (cluster_id is None) == (sample_id is None):
            raise ProbeError("a label is for exactly one cluster, one review image or one sample")
        column, item = ("cluster_id", cluster_id) if cluster_id is not None else ("sample_id", sample_id)
        extra = " AND review_image_id IS NULL" if column == "cluster_id" else ""
        with self.transaction() as connection:
            previous = connection.execute(f"SELECT label FROM labels WHERE annotator=? AND source=? AND {column}=?"
                                          f"{extra}", (annotator, source, item)).fetchone()
            _record_change(connection, annotator, source, column.removesuffix("_id"), item, previous, label)
            connection.execute(
                f"DELETE FROM labels WHERE annotator=? AND source=? AND {column}=?{extra}", (annotator, source, item)
            )
            cursor = connection.execute(
                f"INSERT INTO labels (annotator, source, {column}, label, is_failure, created_at) VALUES (?,?,?,?,?,?)",
                (annotator, source, item, label, None if is_failure is None else int(bool(is_failure)), time.time()),
            )
            return int(cursor.lastrowid)

    def set_labels(self, annotator: str, labels: Sequence[tuple[int, str]], source: str = "human") -> list[int]:
        """Label review images in one transaction: ``(review_image_id, label)`` pairs; returns the row ids.

        Each replaces this annotator's earlier label of the same image.
        """
        annotator = _checked_annotator(annotator)
        ids = []
        with self.transaction() as connection:
            for review_image_id, label in labels:
                row = connection.execute("SELECT cluster_id FROM review_images WHERE id=?",
                                         (review_image_id,)).fetchone()
                if row is None:
                    raise ProbeError(f"no review image {review_image_id}")
                previous = connection.execute("SELECT label FROM labels WHERE annotator=? AND source=? AND "
                                              "review_image_id=?", (annotator, source, review_image_id)).fetchone()
                _record_change(connection, annotator, source, "review_image", review_image_id, previous, label)
                connection.execute("DELETE FROM labels WHERE annotator=? AND source=? AND review_image_id=?",
                                   (annotator, source, review_image_id))
                cursor = connection.execute(
                    "INSERT INTO labels (annotator, source, cluster_id, review_image_id, label, created_at) "
                    "VALUES (?,?,?,?,?,?)", (annotator, source, row["cluster_id"], review_image_id, label, time.time()))
                ids.append(int(cursor.lastrowid))
        return ids

    def get_labels(self, *, cluster_id: int | None = None, sample_id: int | None = None,
                   review_image_id: int | None = None, source: str | None = None,
                   per_image: bool | None = None) -> list[dict]:
        """Labels, optionally for one item and one source, oldest first.

        ``per_image``: True for review-image labels only, False for whole-cluster and sample labels
        only, None for both.
        """
        sql, params = "SELECT * FROM labels WHERE 1=1", []
        for column, value in (("cluster_id", cluster_id), ("sample_id", sample_id),
                              ("review_image_id", review_image_id), ("source", source)):
            if value is not None:
                sql += f" AND {column}=?"
                params.append(value)
        if per_image is not None:
            sql += " AND review_image_id IS NOT NULL" if per_image else " AND review_image_id IS NULL"
        return [
            {
                "id": r["id"], "annotator": r["annotator"], "source": r["source"], "cluster_id": r["cluster_id"],
                "sample_id": r["sample_id"], "review_image_id": r["review_image_id"], "label": r["label"],
                "is_failure": None if r["is_failure"] is None else bool(r["is_failure"]), "created_at": r["created_at"],
            }
            for r in self._query(sql + " ORDER BY id", params)
        ]

    def sample_labels(self, run_id: int, source: str | None = None) -> dict[int, list[str]]:
        """Every label given to a run's samples, in one query: sample id -> labels, oldest first.

        Samples without a label are absent; ``source`` keeps only that source's labels.
        """
        sql = ("SELECT labels.sample_id, labels.label FROM labels JOIN samples ON samples.id = labels.sample_id "
               "WHERE samples.run_id=?")
        params: list = [run_id]
        if source is not None:
            sql += " AND labels.source=?"
            params.append(source)
        by_sample: dict[int, list[str]] = {}
        for row in self._query(sql + " ORDER BY labels.id", params):
            by_sample.setdefault(row["sample_id"], []).append(row["label"])
        return by_sample

    def set_test_image_label(self, annotator: str, dataset: str, test_index: int, label: str,
                             source: str = "human") -> int:
        """Write one verdict on a test image now, replacing this annotator's earlier one; returns the row id."""
        annotator = _checked_annotator(annotator)
        with self.transaction() as connection:
            previous = connection.execute("SELECT label FROM test_image_labels WHERE annotator=? AND source=? AND "
                                          "dataset=? AND test_index=?",
                                          (annotator, source, dataset, int(test_index))).fetchone()
            _record_change(connection, annotator, source, "test_image", f"{dataset}:{int(test_index)}", previous,
                           label)
            connection.execute("DELETE FROM test_image_labels WHERE annotator=? AND source=? AND dataset=? AND "
                               "test_index=?", (annotator, source, dataset, int(test_index)))
            cursor = connection.execute(
                "INSERT INTO test_image_labels (annotator, source, dataset, test_index, label, created_at) "
                "VALUES (?,?,?,?,?,?)", (annotator, source, dataset, int(test_index), label, time.time()))
            return int(cursor.lastrowid)

    def get_test_image_labels(self, dataset: str | None, test_index: int | None = None) -> list[dict]:
        """Verdicts on a data set's test images (``annotator``, ``source``, ``test_index``, ``label``), oldest first.

        ``dataset`` None: every data set's."""
        sql, params = "SELECT * FROM test_image_labels WHERE dataset=COALESCE(?, dataset)", [dataset]
        if test_index is not None:
            sql += " AND test_index=?"
            params.append(int(test_index))
        return [{"id": r["id"], "annotator": r["annotator"], "source": r["source"], "dataset": r["dataset"],
                 "test_index": r["test_index"], "label": r["label"], "created_at": r["created_at"]}
                for r in self._query(sql + " ORDER BY id", params)]

    def label_history(self, item: str | None = None, item_id: Any = None, annotator: str | None = None) -> list[dict]:
        """Every change of a label, oldest first: ``annotator``, ``source``, ``item`` (``review_image``,
        ``cluster``, ``sample`` or ``test_image``), ``item_id``, ``old_label``, ``new_label``, ``changed_at``."""
        sql, params = "SELECT * FROM label_history WHERE 1=1", []
        for column, value in (("item", item), ("item_id", None if item_id is None else str(item_id)),
                              ("annotator", annotator)):
            if value is not None:
                sql += f" AND {column}=?"
                params.append(value)
        return [dict(row) for row in self._query(sql + " ORDER BY id", params)]

    # -- accounts (probe_core.accounts holds the rules; these are the rows) ----------------
    def put_user(self, name: str, role: str, password_hash: str) -> None:
        """Insert an account or replace its role and hash (its creation time stays)."""
        now = time.time()
        with self.transaction() as connection:
            connection.execute(
                "INSERT INTO users (name, role, password_hash, created_at, changed_at) VALUES (?,?,?,?,?) "
                "ON CONFLICT(name) DO UPDATE SET role=excluded.role, password_hash=excluded.password_hash, "
                "changed_at=excluded.changed_at", (name, role, password_hash, now, now))

    def get_user(self, name: str) -> dict | None:
        """An account: ``name``, ``role``, ``password_hash``, ``created_at``, ``changed_at``; None if none."""
        rows = self._query("SELECT * FROM users WHERE name=?", (name,))
        return dict(rows[0]) if rows else None

    def list_users(self) -> list[dict]:
        """Every account, by name."""
        return [dict(row) for row in self._query("SELECT * FROM users ORDER BY name")]

    def delete_user(self, name: str) -> bool:
        """Remove an account (its labels and runs keep its name); returns whether it existed."""
        with self.transaction() as connection:
            return connection.execute("DELETE FROM users WHERE name=?", (name,)).rowcount > 0

    def secret(self, name: str, make: Any) -> str:
        """The workspace secret ``name``, made by ``make()`` and stored the first time it is asked for."""
        with self.transaction() as connection:
            row = connection.execute("SELECT value FROM workspace_secrets WHERE name=?", (name,)).fetchone()
            if row is not None:
                return row[0]
            value = str(make())
            connection.execute("INSERT INTO workspace_secrets (name, value) VALUES (?,?)", (name, value))
            return value

    # -- regression suites -----------------------------------------------------------
    def get_suite(self, name: str) -> dict | None:
        """A suite by name: ``id``, ``name``, ``dataset``, ``version``, ``created_at``; None if there is none."""
        rows = self._query("SELECT * FROM suites WHERE name=?", (name,))
        return dict(rows[0]) if rows else None

    def list_suites(self, dataset: str | None = None) -> list[dict]:
        """Suites, oldest first, optionally of one data set."""
        sql, params = "SELECT * FROM suites", ()
        if dataset is not None:
            sql, params = sql + " WHERE dataset=?", (dataset,)
        return [dict(r) for r in self._query(sql + " ORDER BY id", params)]

    def add_suite_check(self, suite: str, dataset: str, *, kind: str, name: str, found_on: str, evidence: dict,
                        arrays: dict[str, Any]) -> int:
        """Add a check to a suite (created for ``dataset`` when it does not exist) and bump its version.

        Returns the check id. A suite belongs to one data set: adding a check of another is refused.
        """
        suite = suite.strip()
        if not suite:
            raise ProbeError("a suite needs a name")
        with self.transaction() as connection:
            row = connection.execute("SELECT * FROM suites WHERE name=?", (suite,)).fetchone()
            if row is None:
                connection.execute("INSERT INTO suites (name, dataset, version, created_at) VALUES (?,?,0,?)",
                                   (suite, dataset, time.time()))
                row = connection.execute("SELECT * FROM suites WHERE name=?", (suite,)).fetchone()
            elif row["dataset"] != dataset:
                raise ProbeError(f"suite {suite!r} is for data set {row['dataset']}, not {dataset}: "
                                 f"use another suite name")
            version = row["version"] + 1
            connection.execute("UPDATE suites SET version=? WHERE id=?", (version, row["id"]))
            cursor = connection.execute(
                "INSERT INTO suite_checks (suite_id, kind, name, found_on, evidence, data, added_version, created_at) "
                "VALUES (?,?,?,?,?,?,?,?)", (row["id"], kind, name, found_on, json.dumps(evidence),
                                             pack_arrays(arrays), version, time.time()))
            return int(cursor.lastrowid)

    def retire_suite_check(self, check_id: int) -> None:
        """Take a check out of its suite from the next version on (its scores and evidence are kept)."""
        with self.transaction() as connection:
            row = connection.execute("SELECT suite_id, retired_version FROM suite_checks WHERE id=?",
                                     (check_id,)).fetchone()
            if row is None:
                raise ProbeError(f"no check {check_id}")
            if row["retired_version"] is not None:
                return
            version = connection.execute("SELECT version FROM suites WHERE id=?", (row["suite_id"],)).fetchone()[0] + 1
            connection.execute("UPDATE suites SET version=? WHERE id=?", (version, row["suite_id"]))
            connection.execute("UPDATE suite_checks SET retired_version=? WHERE id=?", (version, check_id))

    def get_suite_checks(self, suite: str, with_data: bool = True, include_retired: bool = False) -> list[dict]:
        """A suite's checks in the order they were added; ``data`` holds their arrays when ``with_data``."""
        sql = ("SELECT c.* FROM suite_checks c JOIN suites s ON s.id=c.suite_id WHERE s.name=?"
               + ("" if include_retired else " AND c.retired_version IS NULL") + " ORDER BY c.id")
        return [self._check_row(r, with_data) for r in self._query(sql, (suite,))]

    def get_suite_check(self, check_id: int, with_data: bool = True) -> dict | None:
        rows = self._query("SELECT * FROM suite_checks WHERE id=?", (check_id,))
        return self._check_row(rows[0], with_data) if rows else None

    @staticmethod
    def _check_row(row: sqlite3.Row, with_data: bool) -> dict:
        return {"id": row["id"], "suite_id": row["suite_id"], "kind": row["kind"], "name": row["name"],
                "found_on": row["found_on"], "evidence": json.loads(row["evidence"]),
                "added_version": row["added_version"], "retired_version": row["retired_version"],
                "created_at": row["created_at"], "data": unpack_arrays(row["data"]) if with_data else None}

    def put_suite_scores(self, classifier: str, suite_version: int, scores: Sequence[dict]) -> None:
        """One classifier's scores on checks, in one transaction (replacing its earlier scores of them).

        Each score has ``check_id``, ``accuracy``, ``confidence``, ``wrong_confidence``, ``count`` and
        ``predictions`` (N,).
        """
        with self.transaction() as connection:
            connection.executemany(
                "INSERT OR REPLACE INTO suite_scores (check_id, classifier, suite_version, accuracy, confidence, "
                "wrong_confidence, count, predictions, scored_at) VALUES (?,?,?,?,?,?,?,?,?)",
                [(s["check_id"], classifier, suite_version, s["accuracy"], s["confidence"], s["wrong_confidence"],
                  s["count"], pack_array(np.asarray(s["predictions"], dtype=np.int64)), time.time()) for s in scores])

    def get_suite_scores(self, suite: str, classifier: str | None = None) -> list[dict]:
        """Stored scores of a suite's checks (retired ones included), oldest first."""
        sql = ("SELECT x.* FROM suite_scores x JOIN suite_checks c ON c.id=x.check_id JOIN suites s "
               "ON s.id=c.suite_id WHERE s.name=?")
        params: list[Any] = [suite]
        if classifier is not None:
            sql += " AND x.classifier=?"
            params.append(classifier)
        return [{"check_id": r["check_id"], "classifier": r["classifier"], "suite_version": r["suite_version"],
                 "accuracy": r["accuracy"], "confidence": r["confidence"], "wrong_confidence": r["wrong_confidence"],
                 "count": r["count"], "predictions": unpack_array(r["predictions"]), "scored_at": r["scored_at"]}
                for r in self._query(sql + " ORDER BY x.scored_at, x.id", params)]

    # -- arrays ----------------------------------------------------------------------
    def put_arrays(self, run_id: int, name: str, arrays: dict[str, Any]) -> None:
        """Store (or replace) a bundle of named arrays under ``(run_id, name)``.

        All arrays should share their first dimension (rows); a bundle is written in
        one transaction, so a reader sees either all of it or nothing.
        """
        if not arrays:
            raise ProbeError("put_arrays needs at least one array")
        rows = len(np.asarray(next(iter(arrays.values()))))
        with self.transaction() as connection:
            connection.execute(
                "INSERT OR REPLACE INTO arrays (run_id, name, data, rows, created_at) VALUES (?,?,?,?,?)",
                (run_id, name, pack_arrays(arrays), rows, time.time()),
            )

    def get_arrays(self, run_id: int, name: str) -> dict[str, np.ndarray] | None:
        """The bundle stored under ``(run_id, name)``, or None."""
        rows = self._query("SELECT data FROM arrays WHERE run_id=? AND name=?", (run_id, name))
        return unpack_arrays(rows[0]["data"]) if rows else None

    def concat_arrays(self, run_id: int, prefix: str) -> dict[str, np.ndarray] | None:
        """All bundles whose name starts with ``prefix``, in name order, concatenated row-wise."""
        rows = self._query("SELECT data FROM arrays WHERE run_id=? AND substr(name, 1, ?)=? ORDER BY name",
                           (run_id, len(prefix), prefix))
        if not rows:
            return None
        bundles = [unpack_arrays(r["data"]) for r in rows]
        return {key: np.concatenate([b[key] for b in bundles]) for key in bundles[0]}

    def count_array_rows(self, run_id: int, prefix: str) -> int:
        """Total rows of the bundles whose name starts with ``prefix``."""
        return int(self._query("SELECT COALESCE(SUM(rows), 0) FROM arrays WHERE run_id=? AND substr(name, 1, ?)=?",
                               (run_id, len(prefix), prefix))[0][0])
