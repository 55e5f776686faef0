"""Which process runs a stored run: the launcher seam between a recorded run and the process that does it.

A run that may execute elsewhere is described by a :class:`JobSpec`: its run kind and its request's record
(JSON). The process that does the work reads the request back and calls the kind's job function
(:func:`~probe_core.runs.lifecycle.job_of`), which returns the job (``fn(context) -> result``). The spec is
stored with the run, so any process can rebuild the job from the database alone.

Launchers:

``process`` (:class:`ProcessLauncher`, the dashboard's default)
    One worker process per run (``python -m probe_core.runs.worker``). The dashboard server never
    runs a job's torch work, so watching a run cannot slow it (no shared interpreter lock, no
    shared garbage collection). Progress, previews and cancellation go through the database.
    A worker dies with the server; a worker that dies (killed, out of memory) leaves its run
    ``interrupted`` with everything it stored.
``thread`` (:class:`ThreadLauncher`)
    A daemon thread of the calling process: for tests, and for job functions that are plain
    closures rather than specs.

Inside the run, its shards (sampling targets, identification images, the λ sweep) go to the run's
*executor*, ``local`` or Ray: :mod:`probe_core.runs.scaleout`, the one executor seam.
"""

from __future__ import annotations

import ctypes
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Protocol

from probe_core.errors import ProbeError
from probe_core.runs.lifecycle import JobSpec, execute_run
from probe_core.store import Store

log = logging.getLogger(__name__)

LAUNCHER_ENV = "PROBE_LAUNCHER"
LAUNCHERS = ("process", "thread")
WORKER_THREADS_ENV = "PROBE_WORKER_THREADS"


def worker_threads() -> int:
    """Torch threads per worker process: ``$PROBE_WORKER_THREADS``, else every usable core but one.

    The core left over serves the dashboard and the browser watching the run. A worker with a
    thread on every core runs about 14 % faster alone on 2 cores, but whenever another process
    takes a core its threads wait for one another at every operation, so a watching browser on
    the same machine slowed it by about 30 % (``benchmarks/watch.py``). ``$OMP_NUM_THREADS``, where
    set, caps the default.

    Raises
    ------
    ProbeError
        If ``$PROBE_WORKER_THREADS`` is set to something other than a whole number >= 1.
    """
    text = os.environ.get(WORKER_THREADS_ENV, "").strip()
    if text:
        if not text.isdigit() or int(text) < 1:
            raise ProbeError(f"{WORKER_THREADS_ENV} must be a whole number of threads >= 1, got {text!r}")
        return int(text)
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    threads = max(1, usable - 1)
    capped = os.environ.get("OMP_NUM_THREADS", "").strip()
    return min(threads, int(capped)) if capped.isdigit() and int(capped) >= 1 else threads


class RunLauncher(Protocol):
    """Starts a stored run in some process; the run's state lives in the store, not in the launcher."""

    def start(self, store: Store, run_id: int, job) -> None:
        """Start run ``run_id`` (already recorded as queued) doing ``job`` (a JobSpec or, for threads, a function)."""

    def wait(self, run_id: int, timeout: float | None = None) -> None:
        """Block until the run's worker ends (or the timeout passes)."""


class ThreadLauncher:
    """Runs each job in a daemon thread of this process (tests; closures that cannot be rebuilt elsewhere)."""

    def __init__(self) -> None:
        self._threads: dict[int, threading.Thread] = {}

    def start(self, store: Store, run_id: int, job) -> None:
        function = job.build(store.path.parent) if isinstance(job, JobSpec) else job
        thread = threading.Thread(target=execute_run, args=(store, run_id, function), name=f"probe-job-{run_id}",
                                  daemon=True)
        self._threads[run_id] = thread
        thread.start()

    def wait(self, run_id: int, timeout: float | None = None) -> None:
        thread = self._threads.get(run_id)
        if thread is not None:
            thread.join(timeout)


PARENT_ENV = "PROBE_WORKER_PARENT"


def die_with_parent() -> None:
    """Called first thing in a worker: get SIGKILL when the process that started it dies (Linux).

    Done in the worker itself rather than between fork and exec (a ``preexec_fn`` is unsafe in a
    server with many threads); if the starter is already gone by then, the worker exits at once.
    """
    expected = os.environ.get(PARENT_ENV)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the worker outlives a killed server and finishes its run
        return
    if expected and os.getppid() != int(expected):
        os._exit(0)


class ProcessLauncher:
    """Runs each job in its own worker process (``python -m probe_core.runs.worker WORKSPACE RUN_ID``).

    Workers are started by one long-lived launcher thread: Linux delivers the "parent died"
    signal (:func:`die_with_parent`) when the *thread* that started a child ends, and the
    dashboard calls :meth:`start` from short-lived script-run threads.

    Parameters
    ----------
    python : str, optional
        Interpreter for the workers (default: this one).
    threads : int, optional
        Torch threads per worker (default :func:`worker_threads`).
    """

    def __init__(self, python: str | None = None, threads: int | None = None) -> None:
        if threads is not None and threads < 1:
            raise ProbeError(f"a worker needs at least one thread, got {threads}")
        self.python = python or sys.executable
        self.threads = threads or worker_threads()
        self._processes: dict[int, subprocess.Popen] = {}
        self._requests: queue.Queue = queue.Queue()
        self._launcher: threading.Thread | None = None
        self._launcher_guard = threading.Lock()

    def start(self, store: Store, run_id: int, job) -> None:
        if not isinstance(job, JobSpec):
            raise ProbeError("a worker process needs a JobSpec (a run kind and its request), not a function")
        with self._launcher_guard:
            if self._launcher is None or not self._launcher.is_alive():
                self._launcher = threading.Thread(target=self._launch_loop, name="probe-worker-launcher",
                                                  daemon=True)
                self._launcher.start()
        reply: queue.Queue = queue.Queue(maxsize=1)
        self._requests.put((store, run_id, reply))
        error = reply.get()
        if error is not None:
            store.interrupt_run(run_id, f"its worker process could not start: {error}")
            raise ProbeError(f"could not start a worker process for run {run_id}: {error}")

    def _launch_loop(self) -> None:
        while True:
            store, run_id, reply = self._requests.get()
            try:
                self._spawn(store, run_id)
            except OSError as exc:
                reply.put(exc)
            else:
                reply.put(None)

    def _spawn(self, store: Store, run_id: int) -> None:
        root = Path(store.path).parent
        log_path = root / "logs" / f"run-{run_id}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        # OMP_NUM_THREADS and NUMBA_NUM_THREADS bind the threads a job starts itself, and UMAP's numba pool,
        # which torch.set_num_threads in the worker does not: a spare OpenMP thread spins on the core left free.
        env = {**os.environ, PARENT_ENV: str(os.getpid()), WORKER_THREADS_ENV: str(self.threads),
               "OMP_NUM_THREADS": str(self.threads), "NUMBA_NUM_THREADS": str(self.threads),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[1]),
                                                           os.environ.get("PYTHONPATH")]))}
        with open(log_path, "ab") as log_file:
            process = subprocess.Popen(
                [self.python, "-m", "probe_core.runs.worker", str(root), str(run_id)], stdin=subprocess.DEVNULL,
                stdout=log_file, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self._processes[run_id] = process
        threading.Thread(target=self._reap, args=(store, run_id, process), name=f"probe-reap-{run_id}",
                         daemon=True).start()

    @staticmethod
    def _reap(store: Store, run_id: int, process: subprocess.Popen) -> None:
        """Collect the worker's exit; a run it left active was cut off (killed, out of memory)."""
        code = process.wait()
        if code != 0:
            how = f"killed by signal {-code}" if code < 0 else f"exited with status {code}"
            hint = " (out of memory?)" if code == -signal.SIGKILL else ""
            store.interrupt_run(run_id, f"the worker process {how}{hint}; what it stored is kept")
        store.close()

    def wait(self, run_id: int, timeout: float | None = None) -> None:
        process = self._processes.get(run_id)
        if process is not None:
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                pass


def make_launcher(name: str | None = None) -> RunLauncher:
    """``process`` or ``thread`` (default ``$PROBE_LAUNCHER``, else ``process``)."""
    name = (name or os.environ.get(LAUNCHER_ENV) or "process").strip().lower()
    if name == "process":
        return ProcessLauncher()
    if name == "thread":
        return ThreadLauncher()
    raise ProbeError(f"unknown launcher {name!r}; use one of {', '.join(LAUNCHERS)}")
