"""The ``runs`` table: background work with its owner, heartbeat, progress and result.

A run whose owning process has died reads as ``interrupted`` (the owner is ``host:pid:start``,
robust to PID reuse on Linux); :meth:`RunTable.reap_interrupted` writes it when a store opens.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import time
from pathlib import Path

from probe_core.store.connection import Database, loads
from probe_core.store.records import ACTIVE_STATUSES, FINAL_STATUSES, REAPED_REASON, Run


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



class RunTable(Database):
    """Runs: created queued, started, updated with progress, finished with a final status.

    ``stale_after_s``: for runs owned by a process on another host (where liveness cannot be
    checked), the heartbeat age after which they count as interrupted.
    """

    stale_after_s: float = 600.0

    def create_run(self, kind: str, config: dict, status: str = "queued", job: str | None = None,
                   user: str | None = None) -> int:
        """Record a new run owned by this process; returns its id.

        ``job`` is the JSON of a :class:`probe_core.runs.lifecycle.JobSpec`, for a worker process to rebuild it;
        ``user`` who started it (:attr:`probe_core.team.accounts.Actor.recorded_name`).
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

    def claim_run_slot(self, run_id: int, per_person: int, in_total: int) -> int:
        """Start a queued run if the limits leave it a slot.

        In one write transaction: the run starts (``running``, owned by this process) when fewer than
        ``in_total`` runs are working and fewer than ``per_person`` of them are its person's. Working runs whose
        process is gone do not count, nor runs recorded for nobody (made directly through the store, or before
        runs named who started them): every front end records its person. Queued runs are not ordered among themselves: a run recorded but never
        handed to a worker (a test's, or a crashed server's) must not hold the others back, and the per-person
        limit already keeps one person from taking every slot.

        Returns
        -------
        int
            0 when the run started (or is no longer queued: nothing to wait for), else how many runs are
            working (at least 1).
        """
        now = time.time()
        with self.transaction() as connection:
            mine = connection.execute("SELECT user, status FROM runs WHERE id=?", (run_id,)).fetchone()
            if mine is None or mine["status"] != "queued":
                return 0
            working: dict[str, int] = {}
            for row in connection.execute("SELECT user, owner, updated_at FROM runs WHERE status='running' "
                                          "AND user IS NOT NULL"):
                if not self._owner_gone(row["owner"], row["updated_at"], now):
                    working[row["user"] or ""] = working.get(row["user"] or "", 0) + 1
            if sum(working.values()) >= in_total or working.get(mine["user"] or "", 0) >= per_person:
                connection.execute("UPDATE runs SET owner=?, updated_at=? WHERE id=?", (current_owner(), now, run_id))
                return max(sum(working.values()), 1)
            connection.execute("UPDATE runs SET status='running', owner=?, started_at=?, updated_at=? WHERE id=?",
                               (current_owner(), now, now, run_id))
            return 0

    def count_queued_runs(self, user: str) -> int:
        """How many of ``user``'s runs wait for a slot (their process alive)."""
        rows = self._query("SELECT owner, updated_at FROM runs WHERE status='queued' AND user=?", (user,))
        now = time.time()
        return sum(1 for row in rows if not self._owner_gone(row["owner"], row["updated_at"], now))

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
            progress=row["progress"], message=row["message"], details=loads(row["details"]),
            result=loads(row["result"]), error=error, owner=row["owner"],
            cancel_requested=bool(row["cancel_requested"]), created_at=row["created_at"],
            started_at=row["started_at"], updated_at=row["updated_at"], finished_at=finished_at,
            job=loads(row["job"]), user=row["user"],
        )
