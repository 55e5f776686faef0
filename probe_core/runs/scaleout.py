"""Where a run's shards run: in this process (``local``) or as tasks on a Ray cluster (``ray[:ADDRESS]``).

Four parts of the work split into independent shards: Bayes-TrEx targets (the ambiguity
matrix), Defuse identification over training images, the finetuning sweep (one shard per λ), and
training several models (one shard per model, :func:`probe_core.runs.training.train_models`).
A run describes its shards as :class:`ShardTask` values (the dotted path of a shard function, its
arguments and the models it needs) and hands them to a :class:`Executor`:

``local`` (:class:`LocalShards`, the default)
    The shards run one after another in the calling process.
``ray`` / ``ray:ADDRESS`` (:class:`RayShards`)
    Each shard is a Ray task. ``ray`` joins the Ray instance running on this machine or starts
    one; ``ray:ADDRESS`` joins a cluster (``ray start --head`` prints its address). The models are
    put in Ray's object store once per run (zoo modules by class reference plus weights, plugin
    modules by value), and each worker process loads them once, not once per task. Progress from
    every shard is gathered by a small actor into one fraction. Stop cancels the outstanding tasks
    (``ray.cancel``). A failed or lost shard is retried once; after that the run reports which
    shards were not done instead of hanging.

Seeds are derived per shard (:func:`shard_seed`), and the shard layout is a setting of the run,
not of the executor, so a run gives the same results on ``local`` and on ``ray``.

A shard function is called as ``function(models, reporter, **arguments)``: ``models`` maps names to
the modules given in the task and ``reporter`` is a :class:`Reporter`, the protocol a job's
:class:`~probe_core.runs.lifecycle.JobContext` follows too: ``reporter.report(fraction)`` tells progress
in [0, 1] and raises :class:`~probe_core.errors.CancelledError` once the run was stopped, and
``reporter.stop_requested()`` asks without raising (local shards only; Ray shards are cancelled
instead). Its return value must pickle. A stop is that one exception wherever it is raised: a shard's or a
progress callback's ``CancelledError`` ends the map with ``outcome.cancelled`` (and what was done kept), never
an error.
"""

from __future__ import annotations

import importlib
import logging
import os
import socket
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from probe_core.errors import CancelledError, ProbeError, check_number_ranges
from probe_core.progress import SILENT, CallbackReporter, Report, Reporter, rewritten, stop_requested

log = logging.getLogger(__name__)

EXECUTOR_CHOICES = ("local", "ray", "ray:ADDRESS")
_SEED_STRIDE = 7919  # shard i of a run with seed s uses s + i * stride: shard 0 keeps the run's own seed


@dataclass(frozen=True)
class ShardTask:
    """One independent piece of a run.

    Parameters
    ----------
    function : callable or str
        A module-level function, called as ``function(models, reporter, **arguments)``, or its
        ``"package.module:function"``; kept as that path, by which every worker process imports it.
    arguments : dict
        Keyword arguments (tensors and arrays allowed; they travel through Ray's object store).
    models : dict
        Name -> ``nn.Module`` the shard needs; shared by the run's shards and loaded once per process.
    description : str
        What the shard covers, for the report of shards not done ("targets 9-17", "λ = 0.5").
    """

    function: Callable | str
    arguments: dict = field(default_factory=dict)
    models: dict = field(default_factory=dict)
    description: str = ""

    def __post_init__(self) -> None:
        if callable(self.function):
            if "<" in self.function.__qualname__:
                raise ProbeError(f"a shard function must be defined at a module's top level so that other "
                                 f"processes can import it; {self.function.__qualname__} is not")
            object.__setattr__(self, "function", f"{self.function.__module__}:{self.function.__qualname__}")


@dataclass
class ShardOutcome:
    """What became of a run's shards: ``done`` and ``failed`` (index -> error) and whether it was stopped."""

    done: list[int] = field(default_factory=list)
    failed: dict[int, str] = field(default_factory=dict)
    cancelled: bool = False

    def not_done(self, tasks: list[ShardTask]) -> list[dict]:
        """The shards that gave no result: ``[{"shard", "covers", "error"}]``."""
        return [{"shard": index, "covers": task.description, "error": self.failed.get(index, "stopped")}
                for index, task in enumerate(tasks) if index not in self.done]


ResultCallback = Callable[[int, Any], None]


def shards_report(fraction: float, done: int, total: int, pids: dict[int, int]) -> Report:
    """How a run's shards advance: ``fraction`` over all shards (each counts equally), with details
    ``shards_done`` of ``shards`` and ``pids``, the process that runs each started shard (for tests and logs);
    forced when all are done."""
    return (fraction, f"{done} of {total} shards done", {"shards_done": done, "shards": total, "pids": pids},
            done == total)


def report_shards(reporter: Reporter | None, fraction: float, done: int, total: int, pids: dict[int, int]) -> None:
    """Tell ``reporter`` (None: nobody) the shards' :func:`shards_report`."""
    if reporter is not None:
        reporter.report(*shards_report(fraction, done, total, pids))


class Executor(Protocol):
    """Runs a run's shards; results are handed to ``on_result(index, value)`` as each shard ends."""

    name: str

    @property
    def distributed(self) -> bool:
        """True when shards run outside this process (then sharding is worth it with one shard per worker)."""

    def parallelism(self) -> int:
        """How many shards can run at once (the default shard count of a run)."""

    def map(self, tasks: list[ShardTask], on_result: ResultCallback, reporter: Reporter | None = None) -> ShardOutcome:
        """Run every task; return which were done, which failed and whether the run was stopped.

        ``reporter`` is told the shards' progress (:func:`report_shards`). The run is stopped when it says a stop
        was requested, or when a shard or its ``report`` raises :class:`~probe_core.errors.CancelledError`
        (a :class:`~probe_core.progress.Reporter` after a stop): the outstanding shards are
        not run (or are cancelled), the results handed over so far stay handed over, and ``outcome.cancelled``
        is set; nothing is raised for a stop.
        """


def shard_seed(seed: int, index: int) -> int:
    """The seed of shard ``index`` of a run with ``seed`` (shard 0 keeps the run's seed)."""
    return int(seed) + _SEED_STRIDE * int(index)


def split_evenly(count: int, shards: int) -> list[range]:
    """``count`` items in at most ``shards`` contiguous, non-empty ranges whose sizes differ by at most one."""
    if shards < 1:
        raise ProbeError(f"the number of shards must be at least 1, got {shards}")
    shards = min(shards, max(count, 1))
    base, extra = divmod(count, shards)
    ranges, start = [], 0
    for index in range(shards):
        size = base + (1 if index < extra else 0)
        ranges.append(range(start, start + size))
        start += size
    return [r for r in ranges if len(r)] or [range(0)]


def _shard_function(path: str) -> Callable:
    module_name, _, name = path.partition(":")
    try:
        return getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as exc:
        raise ProbeError(f"shard function {path!r} cannot be imported: {exc}") from exc


class LocalShards:
    """Shards run one after another in this process (the default executor)."""

    name = "local"
    distributed = False

    def parallelism(self) -> int:
        return 1

    def map(self, tasks, on_result, reporter=None) -> ShardOutcome:
        outcome = ShardOutcome()
        for index, task in enumerate(tasks):
            if stop_requested(reporter):
                outcome.cancelled = True
                break

            def as_shards(fraction, message, details, force, index: int = index):
                if fraction is None:
                    return None
                done = index + 1 if fraction >= 1.0 else index
                return shards_report((index + fraction) / len(tasks), done, len(tasks), {index: os.getpid()})

            # The shard's reports reach the run's reporter, whose report raises once a stop was asked: no poll.
            shard_reporter = rewritten(reporter, as_shards) or SILENT
            function = _shard_function(task.function)
            try:
                on_result(index, function(task.models, shard_reporter, **task.arguments))
                outcome.done.append(index)
                shard_reporter.report(1.0)
            except CancelledError:
                outcome.cancelled = True
                break
        outcome.cancelled = outcome.cancelled or (len(outcome.done) < len(tasks) and stop_requested(reporter))
        return outcome


# -- Ray ------------------------------------------------------------------------------------------

_WORKER_MODELS: dict[str, dict] = {}  # in a Ray worker process: models by object id, loaded once per process


def _ray():
    try:
        import ray
    except ImportError as exc:
        raise ProbeError("the ray executor needs Ray: pip install -e '.[ray]' (or pip install 'ray>=2.40')") from exc
    return ray


def _run_ray_shard(function: str, arguments: dict, models_holder: list, board, index: int):
    """A Ray task: load the run's models once per worker process, run the shard, report to the board."""
    ray = _ray()
    board.started.remote(index, os.getpid())
    models_ref = models_holder[0]  # inside a list, so Ray hands over the reference, not a copy per task
    key = models_ref.hex()
    if key not in _WORKER_MODELS:
        _WORKER_MODELS.clear()  # one run's models at a time per worker
        models = ray.get(models_ref)
        if ray.get_gpu_ids():  # a GPU task: the models were put in the object store from the CPU
            models = {name: module.to("cuda") for name, module in models.items()}
        _WORKER_MODELS[key] = models
    last = [0.0]

    def report(fraction: float | None, message=None, details=None) -> None:
        now = time.monotonic()
        if fraction is not None and (now - last[0] >= 0.5 or fraction >= 1.0):  # an actor call per half second
            last[0] = now
            board.report.remote(index, float(fraction))

    # a Ray shard's reporter never asks to stop: the run cancels its task instead
    result = _shard_function(function)(_WORKER_MODELS[key], CallbackReporter(report), **arguments)
    board.report.remote(index, 1.0)
    return result


class _ShardBoard:
    """A Ray actor that gathers each shard's progress and process id."""

    def __init__(self, shards: int) -> None:
        self.fractions = [0.0] * shards
        self.pids: dict[int, int] = {}

    def started(self, index: int, pid: int) -> None:
        self.pids[index] = pid
        self.fractions[index] = 0.0  # a retried shard starts again

    def report(self, index: int, fraction: float) -> None:
        self.fractions[index] = fraction

    def snapshot(self) -> tuple[list[float], dict[int, int]]:
        return list(self.fractions), dict(self.pids)


def _check_listening(address: str, timeout_s: float = 5.0) -> None:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ProbeError(f"a Ray address is HOST:PORT (as `ray start --head` prints it), got {address!r}")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise ProbeError(f"cannot join the Ray cluster at {address}: nothing answers there ({exc.strerror or exc}); "
                         f"start one with `ray start --head --port {port}`") from exc


def ray_address_file() -> Path:
    """Where ``ray start`` records the address of this machine's instance (Ray's temporary folder)."""
    return Path(os.environ.get("RAY_TMPDIR") or tempfile.gettempdir()) / "ray" / "ray_current_cluster"


def running_local_instance(timeout_s: float = 2.0) -> str | None:
    """The address of the Ray instance ``ray start`` left on this machine, if something still answers there.

    A stopped instance leaves its address file behind; that address is reported as stale (logged,
    naming the file) and None is returned, so a new local instance is started instead of waiting on it.
    """
    path = ray_address_file()
    try:
        address = path.read_text().strip().splitlines()[0]
    except (OSError, IndexError):
        return None
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        return None
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError:
        log.warning("stale Ray address %s in %s (nothing answers there): starting a local Ray instance", address, path)
        return None
    return address


class RayShards:
    """Shards as Ray tasks on a local Ray instance or a cluster.

    Parameters
    ----------
    address : str, optional
        A cluster's address (``HOST:PORT`` from ``ray start --head``). None joins the instance running on
        this machine, or starts one.
    num_cpus : int, optional
        CPUs of a Ray instance started here (default: all of this machine's).
    retries : int
        Times a failed or lost shard is tried again before it is reported as not done.
    """

    name = "ray"
    distributed = True

    def __init__(self, address: str | None = None, num_cpus: int | None = None, retries: int = 1) -> None:
        self.address = address
        self.num_cpus = num_cpus
        self.retries = retries

    def __repr__(self) -> str:
        return f"RayShards(address={self.address!r})"

    def connect(self):
        """Join (or start) the Ray instance; returns the ``ray`` module."""
        ray = _ray()
        if ray.is_initialized():
            return ray
        options = {"include_dashboard": False, "log_to_driver": False, "ignore_reinit_error": True}
        if self.address:
            _check_listening(self.address)  # ray.init waits a long time on an address where nothing listens
            try:
                ray.init(address=self.address, **options)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                hint = "" if os.environ.get("RAY_AUTH_MODE") else (
                    " (clusters of Ray 2.59 and later use token authentication: set RAY_AUTH_MODE=token, with the "
                    "cluster's token in ~/.ray/auth_token or RAY_AUTH_TOKEN)")
                raise ProbeError(f"cannot join the Ray cluster at {self.address}: {exc}{hint}") from exc
            return ray
        running = running_local_instance()
        if running is not None:
            try:
                ray.init(address=running, **options)
                return ray
            except (ConnectionError, RuntimeError, ValueError) as exc:
                log.warning("the Ray instance at %s did not take this client (%s): starting a new one", running, exc)
        # never address="auto": with a stopped instance's address left behind it retries that address for minutes
        ray.init(address="local", num_cpus=self.num_cpus, **options)
        return ray

    def parallelism(self) -> int:
        resources = self.connect().cluster_resources()
        return max(1, int(resources.get("GPU", 0)) or int(resources.get("CPU", 1)))

    def map(self, tasks, on_result, reporter=None) -> ShardOutcome:
        ray = self.connect()
        outcome = ShardOutcome()
        if not tasks:
            return outcome
        for name, module in list(sys.modules.items()):
            if name.startswith("probe_plugin_"):  # user plugins are not importable on workers: send them by value
                ray.cloudpickle.register_pickle_by_value(module)
        gpus = 1 if ray.cluster_resources().get("GPU", 0) >= 1 else 0
        remote = ray.remote(num_cpus=1, num_gpus=gpus, max_retries=self.retries,
                            retry_exceptions=True)(_run_ray_shard)
        board = ray.remote(num_cpus=0)(_ShardBoard).remote(len(tasks))
        models_ref = ray.put(tasks[0].models)
        pending = {}
        for index, task in enumerate(tasks):
            models = [models_ref if task.models is tasks[0].models else ray.put(task.models)]
            pending[remote.remote(task.function, task.arguments, models, board, index)] = index
        try:
            while pending:
                if stop_requested(reporter):
                    for ref in pending:
                        ray.cancel(ref, force=True)
                    outcome.cancelled = True
                    break
                ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=0.5)
                for ref in ready:
                    index = pending.pop(ref)
                    try:
                        value = ray.get(ref)
                    except Exception as exc:  # the task failed after its retry, or its worker was lost
                        outcome.failed[index] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
                        log.warning("shard %d (%s) not done: %s", index, tasks[index].description,
                                    outcome.failed[index])
                        continue
                    on_result(index, value)
                    outcome.done.append(index)
                if reporter is not None:
                    fractions, pids = ray.get(board.snapshot.remote())
                    for index in outcome.done:
                        fractions[index] = 1.0
                    report_shards(reporter, sum(fractions) / len(tasks), len(outcome.done), len(tasks), pids)
        except CancelledError:  # a stop raised by the reporter
            for ref in pending:
                ray.cancel(ref, force=True)
            outcome.cancelled = True
        except BaseException:  # Ctrl-C or an error of a callback: nothing left running
            for ref in pending:
                ray.cancel(ref, force=True)
            raise
        finally:
            ray.kill(board)
        return outcome


def parse_executor(text: str | None) -> LocalShards | RayShards:
    """``local`` (or None), ``ray`` or ``ray:HOST:PORT`` -> a shard executor."""
    text = (text or "local").strip()
    if text == "local":
        return LocalShards()
    if text == "ray":
        return RayShards()
    if text.startswith("ray:") and len(text) > 4:
        return RayShards(address=text[4:])
    raise ProbeError(f"unknown executor {text!r}: use local, ray or ray:ADDRESS (e.g. ray:127.0.0.1:6379)")


# The shards a run may be split into, inclusive (the sidebar's widget takes its bound from here; 0 there means
# "one per worker", which a run stores as None).
SHARDS_RANGE = (1, 1024)


def check_shards(shards: int | None) -> None:
    """Refuse a shard count outside :data:`SHARDS_RANGE` (None, one per worker, passes)."""
    check_number_ranges({"shards": shards}, {"shards": SHARDS_RANGE})


def shard_count(executor, shards: int | None) -> int:
    """The shards of a run: as given, else 1 on ``local`` and one per worker (CPU, or GPU when there are GPUs)
    of the Ray cluster. ``executor`` is a setting (``"ray"``) or a :class:`Executor`."""
    if shards is not None:
        check_shards(shards)
        return shards
    return (parse_executor(executor) if executor is None or isinstance(executor, str) else executor).parallelism()


def check_executor(text: str | None, connect: bool = False) -> str:
    """The executor setting, checked before a run is stored: Ray must be installed for ``ray``, and with
    ``connect`` the cluster must answer (the CLI joins it at once; a page leaves that to the worker)."""
    import importlib.util

    executor = parse_executor(text)
    if executor.distributed and importlib.util.find_spec("ray") is None:  # found, not imported: that is slow
        _ray()
    if executor.distributed and connect:
        executor.connect()
    return (text or "local").strip()
