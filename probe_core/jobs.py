"""The job manager: records runs and starts them in the background; their state lives in the database.

A job is a function ``fn(context) -> result dict`` (:mod:`probe_core.lifecycle`). It reports
through :meth:`~probe_core.lifecycle.JobContext.report`, which writes progress to the ``runs``
table (so any page, tab or process can show it) and raises :class:`CancelledError` once
someone asked the run to stop. :class:`JobManager` records a run and starts it on an executor
(:mod:`probe_core.executors`: a worker process by default); jobs never touch the UI, and the
dashboard only reads the database. Runs are usually started from a typed configuration
(:func:`probe_core.runconfig.submit`).
"""

from __future__ import annotations

import json
import threading

from probe_core.errors import ProbeError
from probe_core.executors import JobSpec, ThreadExecutor, make_executor
from probe_core.store import Run, Store


class JobManager:
    """Starts recorded runs on an executor (worker processes by default) and tracks them through the store.

    Parameters
    ----------
    store : Store
    executor : str or Executor, optional
        ``process`` (default, or ``$PROBE_EXECUTOR``) or ``thread``; see :mod:`probe_core.executors`.
        A job given as a plain function (not a :class:`JobSpec`) always runs in a thread.
    """

    def __init__(self, store: Store, executor=None) -> None:
        self.store = store
        self.executor = executor if executor is not None and not isinstance(executor, str) \
            else make_executor(executor)
        self._threads = ThreadExecutor()
        self._started: dict[int, object] = {}
        self._guard = threading.Lock()

    def submit(self, kind: str, config: dict, job, dedupe: bool = False) -> int:
        """Record a run and start it in the background; returns the run id.

        ``job`` is a :class:`JobSpec` (runs on this manager's executor) or a job function
        (runs in a thread). With ``dedupe``, an active run of the same kind and config is
        reused instead of starting a second one (e.g. two tabs asking for the same training).
        """
        with self._guard:
            if dedupe:
                for run in self.store.list_runs(kind=kind, active_only=True):
                    if run.config == _normalise(config):
                        return run.id
            spec = job if isinstance(job, JobSpec) else None
            run_id = self.store.create_run(kind, config, job=spec.to_json() if spec else None)
            executor = self.executor if spec is not None else self._threads
            self._started[run_id] = executor
        executor.start(self.store, run_id, job)
        return run_id

    def cancel(self, run_id: int) -> None:
        """Ask a run to stop (it stops at its next progress report)."""
        self.store.request_cancel(run_id)

    def wait(self, run_id: int, timeout: float | None = None) -> Run:
        """Block until a run started by this manager ends (or the timeout passes); returns its state."""
        executor = self._started.get(run_id)
        if executor is not None:
            executor.wait(run_id, timeout)
        run = self.store.get_run(run_id)
        if run is None:
            raise ProbeError(f"no run {run_id}")
        return run


def _normalise(config: dict) -> dict:
    """A config as it reads back from the database (JSON round trip), for comparisons."""
    return json.loads(json.dumps(config, sort_keys=True, default=str))
