"""A run's life in one place: how it starts, its context (progress, cancellation) and how it ends.

Every run kind is declared with :func:`run_kind` next to its domain code: a typed request (:class:`RunRequest`:
:class:`~probe_core.bayestrex.request.SampleRequest`, the Defuse steps' requests,
:class:`~probe_core.bayestrex.compare.CompareRequest`, ...) and the typed result its job returns. A run starts
one of two ways:

- :func:`run_now` runs it in the calling thread (the CLI, the Python API, scripts);
- :func:`submit` records it and has a launcher start it (the dashboard: a worker process rebuilds
  the job from the stored :class:`JobSpec`).

:func:`execute_run` is used by worker processes and threads, :func:`run_inline` in the calling
thread; both decide a run's final status in :func:`_finish`: done, cancelled, or failed with the
reason. Jobs never touch the UI; progress goes to the ``runs`` table, where any page, tab or
process can read it.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import json
import logging
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, ClassVar, Protocol

from probe_core.errors import CancelledError, ProbeError
from probe_core.progress import Reporter, fan_out, rewritten
from probe_core.runs.limits import ServerLimits
from probe_core.runs.progress import ProgressBar
from probe_core.runs.requests import from_record, record
from probe_core.runs.workspace import Workspace
from probe_core.store import Store
from probe_core.team.accounts import check_run_starter, local_owner

log = logging.getLogger(__name__)


class JobContext:
    """Handed to a running job: progress reporting and cancellation (a :class:`~probe_core.progress.Reporter`,
    the protocol its steps and shards follow too).

    Parameters
    ----------
    store : Store
    run_id : int
    min_interval_s : float
        Reports closer together than this are not written (the last one always is
        when ``force=True``), so tight loops can report freely.
    listener : Reporter, optional
        Also told every report (the CLI's progress bar); a stop it raises stops the job.
    """

    def __init__(self, store: Store, run_id: int, min_interval_s: float = 0.25,
                 listener: Reporter | None = None) -> None:
        self.store = store
        self.run_id = run_id
        self.min_interval_s = min_interval_s
        self.listener = listener
        self._last_write = 0.0
        self._cancelled = False

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def report(self, progress: float | None = None, message: str | None = None, details: dict | None = None,
               force: bool = False) -> None:
        """Record progress in [0, 1], a message and JSON details.

        Raises
        ------
        CancelledError
            If the run was asked to stop.
        """
        if self.listener is not None:
            self.listener.report(progress, message, details, force=force)
        now = time.monotonic()
        if force or now - self._last_write >= self.min_interval_s:
            self._last_write = now
            self._cancelled = self.store.update_run(self.run_id, progress, message, details) or self._cancelled
        if self._cancelled:
            raise CancelledError(f"run {self.run_id} cancelled")

    def report_last(self, message: str, details: dict | None = None) -> None:
        """The job's last progress line and details, recorded even after a stop: a job that ended gracefully on a
        stop (the sampler ends its chains and keeps their samples) says what it kept before it returns."""
        if self.listener is not None:
            try:
                self.listener.report(1.0, message, details, force=True)
            except CancelledError:  # the run is already stopping; its last line is still recorded
                pass
        self._cancelled = self.store.update_run(self.run_id, 1.0, message, details) or self._cancelled

    def stop_requested(self) -> bool:
        """Whether the run was asked to stop (reads the database), without raising."""
        run = self.store.get_run(self.run_id)
        self._cancelled = self._cancelled or bool(run is not None and run.cancel_requested)
        return self._cancelled


class RunResult(Protocol):
    """A typed result a job returns (e.g. :class:`~probe_core.bayestrex.results.SamplingResult`); the run
    stores ``to_record()`` and :func:`probe_core.runs.runconfig.result_of` reads it back with ``from_record``."""

    kind: ClassVar[str]

    def to_record(self) -> dict:
        ...


class StoredResult:
    """Base of the typed run results (frozen dataclasses): stored as their fields, JSON-ready, and read back
    by field name (keys a record has that the type no longer knows are left out)."""

    kind: ClassVar[str]

    @classmethod
    def from_record(cls, record: dict):
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{key: value for key, value in record.items() if key in names})

    def to_record(self) -> dict:
        return dataclasses.asdict(self)


JobFunction = Callable[[JobContext], "RunResult | dict | None"]


def stored_result(result: "RunResult | dict | None") -> dict:
    """What the runs table holds of a job's result: a typed result's record, or the dict itself."""
    if result is None:
        return {}
    return result.to_record() if hasattr(result, "to_record") else result


def _finish(store: Store, run_id: int, outcome: BaseException | None, result: "RunResult | dict | None") -> None:
    """The one place a run's final status is decided from how its job ended."""
    if outcome is None:
        store.finish_run(run_id, "done", result=stored_result(result))
    elif isinstance(outcome, (CancelledError, KeyboardInterrupt)):
        store.finish_run(run_id, "cancelled")
    elif isinstance(outcome, ProbeError):
        store.finish_run(run_id, "failed", error=str(outcome))
    else:
        store.finish_run(run_id, "failed", error=f"{type(outcome).__name__}: {outcome}")


def execute_run(store: Store, run_id: int, fn: JobFunction, listener: Reporter | None = None) -> "RunResult | dict":
    """Run a recorded job in this thread: running, progress through the store, then its final status.

    Never raises for a job's own failure (the run records it); used by worker processes and threads.
    A run recorded for an account that may not start runs fails here without doing anything: the
    page refused it too, but a hidden control is not a permission. A run waits, queued, until the
    server's limits (:class:`~probe_core.runs.limits.ServerLimits`) leave it a slot; asked to stop while
    waiting, it ends cancelled.
    """
    try:
        try:
            _wait_for_slot(store, run_id, ServerLimits.from_environment())
            check_run_starter(store, store.get_run(run_id))
            result = fn(JobContext(store, run_id, listener=listener)) or {}
        except BaseException as exc:  # a job must never die silently; the run records why
            if not isinstance(exc, (CancelledError, ProbeError, KeyboardInterrupt)):
                log.error("run %s failed:\n%s", run_id, traceback.format_exc())
            _finish(store, run_id, exc, None)
            if isinstance(exc, KeyboardInterrupt):
                raise
            return {}
        _finish(store, run_id, None, result)
        return result
    finally:
        if threading.current_thread() is not threading.main_thread():
            store.close()  # connections are per thread: a job thread's ends with it


def _wait_for_slot(store: Store, run_id: int, limits: ServerLimits, poll_s: float = 0.5) -> None:
    """Block until :meth:`~probe_core.store.Store.claim_run_slot` starts the run; the run's message says why it
    waits. Raises :class:`CancelledError` when someone asks the waiting run to stop."""
    reported = None
    while True:
        working = store.claim_run_slot(run_id, limits.runs_per_person, limits.runs_in_total)
        if not working:
            return
        if working != reported:
            reported = working
            store.update_run(run_id, 0.0, f"queued: {working} run(s) working; this server works on at most "
                                          f"{limits.runs_in_total} at once, {limits.runs_per_person} per person")
        run = store.get_run(run_id)
        if run is not None and run.cancel_requested:
            raise CancelledError(f"run {run_id} cancelled while queued")
        time.sleep(poll_s)


def run_inline(store: Store, kind: str, config: dict, fn: JobFunction, listener: Reporter | None = None
               ) -> "tuple[int, RunResult | dict]":
    """Run a job in the calling thread (the CLI's way), recorded like a background run.

    Returns ``(run_id, result)``, the result as the job returned it (typed where the run kind has a type); ``listener`` sees every progress report.
    Failures, cancellation and Ctrl-C finish the run accordingly (anything it
    already stored is kept) and are raised again.
    """
    run_id = store.create_run(kind, config, user=local_owner().recorded_name)
    store.start_run(run_id)
    try:
        result = fn(JobContext(store, run_id, listener=listener)) or {}
    except BaseException as exc:
        _finish(store, run_id, exc, None)
        raise
    _finish(store, run_id, None, result)
    return run_id, result


def training_announcer(context: JobContext):
    """For :meth:`ModelRegistry.announcing`: a model trained inside a job shows in the run's progress.

    The run's message names the model and its epoch (``training ID: epoch 3/20``), and the
    ``details`` carry ``training`` with the model id and fraction, so a page watching the run
    says what is being trained instead of looking stuck.
    """

    def announce(spec, model_id: str) -> Reporter:
        context.report(None, f"training {model_id} ({spec.kind} on {spec.dataset_view()}: {spec.describe_recipe()}): "
                             f"not in the workspace yet",
                       {"training": {"model": model_id, "fraction": 0.0}}, force=True)
        return model_training_in_run(context, model_id)

    return announce


def model_training_in_run(context: Reporter, model_id: str) -> Reporter:
    """``context`` for a model trained inside a run: each epoch (its details, from
    :func:`~probe_core.models.training.report_epoch`) shows in the run's line as ``training ID: epoch 3/20`` and
    its ``details`` as ``training`` (the model and its fraction), the run's own progress left as it is."""
    def in_run_line(progress, message, details, force):
        epoch = (f"epoch {details['epoch']}/{details['epochs']}" if details and "epoch" in details
                 else message or "")
        return (None, f"training {model_id}: {epoch}", {"training": {"model": model_id, "fraction": progress or 0.0}},
                force)

    return rewritten(context, in_run_line)


@dataclass(frozen=True)
class JobSpec:
    """How any process rebuilds a run's job: its run kind and the request's record (no code path is stored).

    The kind (:data:`RUN_KINDS`) reads the record back with its request type and builds the job with the
    function its module declared with :func:`job_of`, called as ``function(registry, request, device)``.

    Parameters
    ----------
    kind : str
        A declared run kind (:func:`run_kind`).
    request : dict
        The request's :func:`~probe_core.runs.requests.record`.
    device : str
        Where the job computes (``cpu``, ``cuda``, ``auto``).
    data_dir : str, optional
        The data folder of the person who started it (their setting, carried with the job).
    made : RunRequest, optional
        The request itself, in the process that made it: a job started there (a thread) runs it as it is, with
        no trip through its record; never stored.
    """

    kind: str
    request: dict = field(default_factory=dict)
    device: str = "cpu"
    data_dir: str | None = None
    made: object | None = field(default=None, compare=False, repr=False)

    def to_json(self) -> str:
        """The job as the run's row stores it, beside the request's record (the run's config, stored once)."""
        return json.dumps({"kind": self.kind, "device": self.device, "data_dir": self.data_dir}, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict, request: dict | None = None) -> "JobSpec":
        """The job of a stored row: ``data`` as :meth:`to_json` wrote it, ``request`` the run's config (rows
        written before the request was stored once carry it in ``data``)."""
        if "kind" not in data:
            raise ProbeError("this run was stored by an older version of Model Probe, which recorded its job "
                             "differently; start it again")
        return cls(data["kind"], data.get("request") or request or {}, data.get("device") or "cpu",
                   data.get("data_dir"))

    @classmethod
    def of_run(cls, run) -> "JobSpec":
        """The job a stored run (a :class:`~probe_core.store.records.Run` with a job) was recorded with."""
        return cls.from_dict(run.job, run.config)

    def build(self, workspace_root: str | Path):
        """The job function, built in this process against the workspace at ``workspace_root``."""
        return self.build_for(Workspace(workspace_root, data_dir=self.data_dir).registry)

    def build_for(self, registry):
        """The job function, built with a registry this process already has.

        Raises
        ------
        ProbeError
            For a kind this process has not declared, one declared without a job, or a record its request type
            does not read.
        """
        kind = _declared_kind(self.kind)
        request = self.made if self.made is not None else from_record(kind.request_type, self.request)
        return kind.job(registry, request, self.device)


def _declared_kind(name: str):
    """The run kind ``name`` with its job function (see :func:`run_kind`, :func:`job_of`)."""
    kind = kind_named(name)
    if kind is None:
        known = sorted(all_run_kinds())
        raise ProbeError(f"unknown run kind {name!r}; known: {', '.join(known) or 'none'}")
    if kind.job is None:
        raise ProbeError(f"the run kind {name!r} declares no job function (lifecycle.job_of)")
    return kind


class RunRequest(Protocol):
    """What every run request has: its run kind (its job function is declared with :func:`job_of`)."""

    kind: ClassVar[str]


@dataclass(frozen=True)
class RunKind:
    """A kind of run, declared next to its domain code with :func:`run_kind`.

    Parameters
    ----------
    name : str
        The kind the runs table stores (the request's and the result's ``kind``).
    request_type : type
        The frozen request dataclass (a :class:`RunRequest`): what the run was asked, stored as its
        :func:`~probe_core.runs.requests.record` and rebuilt with :func:`~probe_core.runs.requests.from_record`.
    result_type : type
        The typed result its job returns (a :class:`StoredResult`).
    job : callable or None
        ``job(registry, request, device) -> JobFunction``, called in the process that does the work; declared
        with :func:`job_of` next to the request (None until its module has declared it).
    """

    name: str
    request_type: type
    result_type: type
    job: Callable | None = None

    def request_of(self, run):
        """The run's request as ``request_type``; None if it was stored by a version it no longer fits."""
        try:
            return from_record(self.request_type, run.config)
        except (TypeError, ProbeError):
            return None

    def result_of(self, run):
        """The run's result as ``result_type``; None while it has none, or if stored by a version it no longer
        fits."""
        if not run.result:
            return None
        try:
            return self.result_type.from_record(run.result)
        except TypeError:  # stored by an older version, without a field this one needs
            return None


# Every kind declared so far, by name (filled as the modules declaring them are imported: :func:`kind_named`
# imports a kind's module on first use, found through the package's entry points).
RUN_KINDS: dict[str, RunKind] = {}
RUN_KIND_ENTRY_POINTS = "model_probe.run_kinds"  # the entry-point group naming each kind's module (pyproject.toml)


@functools.cache
def _kind_modules() -> dict:
    """Kind name -> its entry point, from the installed packages' metadata (read once a process: a stored run
    of an unknown kind would otherwise rescan every installed package each time it is read)."""
    return {entry.name: entry for entry in importlib.metadata.entry_points(group=RUN_KIND_ENTRY_POINTS)}


def kind_named(name: str) -> RunKind | None:
    """The run kind ``name``, importing the module that declares it on first use; None for an unknown kind."""
    if name not in RUN_KINDS:
        entry = _kind_modules().get(name)
        if entry is not None:
            entry.load()  # the module declares the kind as it is imported
    return RUN_KINDS.get(name)


def all_run_kinds() -> dict[str, RunKind]:
    """Every run kind the installed packages declare, by name (their modules imported)."""
    for name in _kind_modules():
        kind_named(name)
    return dict(RUN_KINDS)


def run_kind(result_type: type) -> Callable[[type], type]:
    """Declare a request type as a run kind whose job returns ``result_type`` (a class decorator).

    Raises
    ------
    ProbeError
        If the request and the result name different kinds, or another request type already has the kind.
    """
    def declare(request_type: type) -> type:
        name = request_type.kind
        if getattr(result_type, "kind", None) != name:
            raise ProbeError(f"{request_type.__name__} is the run kind {name!r} but {result_type.__name__} is "
                             f"{getattr(result_type, 'kind', None)!r}")
        known = RUN_KINDS.get(name)
        if known is not None and known.request_type.__qualname__ != request_type.__qualname__:
            raise ProbeError(f"the run kind {name!r} is already {known.request_type.__name__}'s")
        RUN_KINDS[name] = RunKind(name, request_type, result_type)
        return request_type

    return declare


def job_of(request_type: type) -> Callable[[Callable], Callable]:
    """Declare the function that builds the job of ``request_type``'s run kind (a function decorator).

    The function is called as ``function(registry, request, device)`` in the process that does the work and
    returns the job (``fn(context) -> result``); a stored run names only its kind, never a code path.

    Raises
    ------
    ProbeError
        If ``request_type`` is not a declared run kind (:func:`run_kind` first), or its kind has a job already.
    """
    def declare(function: Callable) -> Callable:
        kind = RUN_KINDS.get(getattr(request_type, "kind", None))
        if kind is None or kind.request_type.__qualname__ != request_type.__qualname__:
            raise ProbeError(f"{request_type.__name__} is not a declared run kind: declare it with run_kind first")
        if kind.job is not None and kind.job.__qualname__ != function.__qualname__:
            raise ProbeError(f"the run kind {kind.name!r} already has the job {kind.job.__qualname__}")
        RUN_KINDS[kind.name] = dataclasses.replace(kind, job=function)
        return function

    return declare


def job_spec(request: RunRequest, data_dir: str | None = None, device: str = "cpu") -> JobSpec:
    """How any process rebuilds the run's job from the database."""
    return JobSpec(request.kind, record(request), str(device), data_dir, made=request)


def submit(manager, request: RunRequest, data_dir: str | None = None, dedupe: bool = False,
           device: str = "cpu") -> int:
    """Record a run of ``request`` and start it in the background; returns the run id.

    With ``dedupe``, an identical run in flight is joined instead (a second click, a second tab).
    """
    spec = job_spec(request, data_dir, device)
    return manager.submit(request.kind, spec.request, spec, dedupe=dedupe)


def run_now(registry, request: RunRequest, listener: Reporter | None = None, device: str = "cpu",
            progress_bar: str | None = None) -> tuple[int, dict]:
    """Run ``request`` in this thread, recorded like a background run; returns ``(run_id, result)``.

    ``progress_bar``: the description of a bar that follows the run's progress (a widget in a notebook, a line
    in a terminal); ``listener`` (a :class:`~probe_core.progress.Reporter`) is told every report as well.
    """
    # the request itself, as built and checked: no trip through its record in this process (the record is stored)
    function = _declared_kind(request.kind).job(registry, request, device)
    bar = None if progress_bar is None else ProgressBar(progress_bar)
    try:
        return run_inline(registry.store, request.kind, record(request), function, fan_out(bar, listener))
    finally:
        if bar is not None:
            bar.close()
