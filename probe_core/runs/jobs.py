"""The job manager: records runs and starts them in the background; their state lives in the database.

A job is a function ``fn(context) -> typed result`` (:mod:`probe_core.runs.lifecycle`; the run stores its
record). It reports through :meth:`~probe_core.runs.lifecycle.JobContext.report`, which writes progress to the ``runs``
table (so any page, tab or process can show it) and raises :class:`CancelledError` once
someone asked the run to stop. :class:`JobManager` records a run and starts it with a launcher
(:mod:`probe_core.runs.launchers`: a worker process by default); jobs never touch the UI, and the
dashboard only reads the database. Runs are usually started from a typed request
(:func:`probe_core.runs.lifecycle.submit`).
"""

from __future__ import annotations

import copy
import json
import threading

from probe_core.errors import ProbeError
from probe_core.runs.launchers import ThreadLauncher, make_launcher
from probe_core.runs.lifecycle import JobSpec
from probe_core.runs.limits import ServerLimits
from probe_core.store import Run, Store
from probe_core.team.accounts import Actor, Permission, local_owner, require


class JobManager:
    """Starts recorded runs with a launcher (worker processes by default) and tracks them through the store.

    Parameters
    ----------
    store : Store
    launcher : str or RunLauncher, optional
        ``process`` (default, or ``$PROBE_LAUNCHER``) or ``thread``; see :mod:`probe_core.runs.launchers`.
        A job given as a plain function (not a :class:`JobSpec`) always runs in a thread.
    actor : Actor, optional
        Who starts the runs (default the local owner). The dashboard shares one manager and gives
        each person a view of it with :meth:`acting_as`.
    """

    def __init__(self, store: Store, launcher=None, actor: Actor | None = None) -> None:
        self.store = store
        self.actor = actor or local_owner()
        self.launcher = launcher if launcher is not None and not isinstance(launcher, str) \
            else make_launcher(launcher)
        self._threads = ThreadLauncher()
        self._started: dict[int, object] = {}
        self._guard = threading.Lock()

    def acting_as(self, actor: Actor) -> "JobManager":
        """This manager (same launchers and runs) starting runs on behalf of ``actor``."""
        view = copy.copy(self)
        view.actor = actor
        return view

    def submit(self, kind: str, config: dict, job, dedupe: bool = False) -> int:
        """Record a run and start it in the background; returns the run id.

        ``job`` is a :class:`JobSpec` (started by this manager's launcher) or a job function
        (runs in a thread). With ``dedupe``, an active run of the same kind and config is
        reused instead of starting a second one (e.g. two tabs asking for the same training).

        A signed-in person's run is held to the server's :class:`~probe_core.runs.limits.ServerLimits`: settings
        over their bounds and a run beyond the person's waiting ones are refused; a run beyond the working
        limits is stored queued and starts when a slot frees.

        Raises
        ------
        PermissionDenied
            When the manager's actor may not start runs (an annotator); nothing is stored then.
        ProbeError
            When a signed-in person's run exceeds the server's limits, or a :class:`JobSpec`'s request is not
            ``config`` (the run stores the request once, as its config, and a worker runs what is stored, so the
            limits check what runs); nothing is stored then.
        """
        require(self.actor, Permission.RUN)
        if isinstance(job, JobSpec) and job.request != config:
            raise ProbeError("a run's config is its job's request: submit the JobSpec's own request as the config")
        limits = ServerLimits.from_environment()
        if self.actor.signed_in:
            limits.check_request(config)
        with self._guard:
            if dedupe:
                asked = _canonical(config)
                for run in self.store.list_runs(kind=kind, active_only=True):
                    if _canonical(run.config) == asked:
                        return run.id
            if self.actor.signed_in:
                waiting = self.store.count_queued_runs(self.actor.recorded_name)
                if waiting >= limits.queued_per_person:
                    raise ProbeError(f"{self.actor.name} already has {waiting} runs waiting (at most "
                                     f"{limits.queued_per_person}); stop some or wait for them to start")
            spec = job if isinstance(job, JobSpec) else None
            run_id = self.store.create_run(kind, config, job=spec.to_json() if spec else None,
                                           user=self.actor.recorded_name)
            launcher = self.launcher if spec is not None else self._threads
            self._started[run_id] = launcher
        launcher.start(self.store, run_id, job)
        return run_id

    def cancel(self, run_id: int) -> None:
        """Ask a run to stop (it stops at its next progress report); refused for an actor who may not run."""
        require(self.actor, Permission.RUN)
        self.store.request_cancel(run_id)

    def wait(self, run_id: int, timeout: float | None = None) -> Run:
        """Block until a run started by this manager ends (or the timeout passes); returns its state."""
        launcher = self._started.get(run_id)
        if launcher is not None:
            launcher.wait(run_id, timeout)
        run = self.store.get_run(run_id)
        if run is None:
            raise ProbeError(f"no run {run_id}")
        return run


def _canonical(config: dict) -> str:
    """A config as the text the database stores it as, for comparing a new request with stored ones (a tuple and
    the list it reads back as compare equal)."""
    return json.dumps(config, sort_keys=True, default=str)
