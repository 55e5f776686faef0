"""Reading runs back: those of a kind, in flight, finished, the latest one (the pages, the CLI and the API).

``where`` is a predicate on :class:`~probe_core.store.Run` (e.g. runs of one data set, or of one parent run).
"""

from __future__ import annotations

import time
from typing import Callable, Iterable

from probe_core.data import split_view
from probe_core.errors import ProbeError
from probe_core.store import Run

RunFilter = Callable[[Run], bool]


def require_run(store, run_id: int, kind: str) -> Run:
    """The run with this id, which must be of the given kind (clear error otherwise)."""
    run = store.get_run(run_id)
    if run is None or run.kind != kind:
        found = f"no run {run_id}" if run is None else f"run {run_id} is a {run.kind!r} run"
        raise ProbeError(f"{found}; expected a {kind!r} run (see `probe runs`)")
    return run


def runs(store, kind: str | None = None, where: RunFilter | None = None, limit: int = 50) -> list[Run]:
    """The latest ``limit`` runs of a kind (any kind when None) that pass ``where``, newest first."""
    return [run for run in store.list_runs(kind=kind, limit=limit) if where is None or where(run)]


def run(store, run_id: int) -> Run | None:
    """A run as it stands now (what a live view polls)."""
    return store.get_run(run_id)


def in_flight(store, kinds: Iterable[str], where: RunFilter | None = None, limit: int = 20) -> list[Run]:
    """Runs of these kinds still queued or running, newest first within each kind."""
    return [run for kind in kinds for run in runs(store, kind, where, limit) if run.active]


def finished(store, kind: str, where: RunFilter | None = None, limit: int = 50) -> list[Run]:
    """Runs of a kind that ended ``done`` with a result, newest first."""
    return [run for run in runs(store, kind, where, limit) if run.status == "done" and run.result]


def latest_ended(store, kind: str, where: RunFilter | None = None, limit: int = 20) -> Run | None:
    """The newest run of a kind that ended done or failed (a page shows the error when it failed)."""
    return next((run for run in runs(store, kind, where, limit) if run.status in ("done", "failed")), None)


def datasets_used(store, limit: int = 200) -> list[str]:
    """The data sets this workspace's runs and models were made on, the most recently used first.

    Views (``name[mislabel=…]``) count as their base data set. What the dashboard offers first, so a person
    finds the data they work on (a folder or ``.npz`` of theirs) without typing its path again.
    """
    dated = [(run.created_at, run.config.get("dataset")) for run in store.list_runs(limit=limit)]
    dated += [(model.get("created_at") or 0.0, model.get("dataset")) for model in store.list_models()[:limit]]
    used: list[str] = []
    for _, name in sorted(dated, key=lambda pair: pair[0] or 0.0, reverse=True):
        if isinstance(name, str) and name:
            base = split_view(name)[0]
            if base not in used:
                used.append(base)
    return used


# An estimate needs this much of the run behind it: the first reports (loading models, warm-up) are not its rate.
MIN_PROGRESS_FOR_ESTIMATE = 0.02
MIN_SECONDS_FOR_ESTIMATE = 3.0


def time_left(run: Run, now: float | None = None) -> float | None:
    """Seconds a running run has left, from its own measured rate: the time since it started over the
    progress it reported, times what is left; None while queued, ended, or too early to tell."""
    if run.status != "running" or run.started_at is None:
        return None
    elapsed = (time.time() if now is None else now) - run.started_at
    if run.progress < MIN_PROGRESS_FOR_ESTIMATE or elapsed < MIN_SECONDS_FOR_ESTIMATE or run.progress >= 1:
        return None
    return elapsed * (1 - run.progress) / run.progress


def describe_time_left(seconds: float | None) -> str:
    """``about 2 min left``, ``about 40 s left``; empty when unknown."""
    if seconds is None:
        return ""
    if seconds >= 90:
        return f"about {round(seconds / 60):,} min left"
    return f"about {max(5, round(seconds / 5) * 5)} s left"
