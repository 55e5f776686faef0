"""Background jobs whose state lives in the workspace database.

A job is a function ``fn(context) -> result dict`` run in a daemon thread. It
reports through :meth:`JobContext.report`, which writes progress to the
``runs`` table (so any page, tab or process can show it) and raises
:class:`CancelledError` once someone asked the run to stop. Jobs never touch
the UI; the dashboard polls the database.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import traceback
from typing import Callable

from probe_core.errors import CancelledError, ProbeError
from probe_core.store import Run, Store

log = logging.getLogger(__name__)


class JobContext:
    """Handed to a running job: progress reporting and cancellation.

    Parameters
    ----------
    store : Store
    run_id : int
    min_interval_s : float
        Reports closer together than this are not written (the last one always is
        when ``force=True``), so tight loops can report freely.
    listener : callable, optional
        Also called with ``(progress, message)`` on every report (the CLI's progress bar).
    """

    def __init__(self, store: Store, run_id: int, min_interval_s: float = 0.25,
                 listener: Callable[[float | None, str | None], None] | None = None) -> None:
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
            self.listener(progress, message)
        now = time.monotonic()
        if force or now - self._last_write >= self.min_interval_s:
            self._last_write = now
            self._cancelled = self.store.update_run(self.run_id, progress, message, details) or self._cancelled
        if self._cancelled:
            raise CancelledError(f"run {self.run_id} cancelled")

    def check_cancelled(self) -> None:
        """Raise :class:`CancelledError` if cancellation was requested (reads the database)."""
        run = self.store.get_run(self.run_id)
        if run is not None and run.cancel_requested:
            self._cancelled = True
            raise CancelledError(f"run {self.run_id} cancelled")


JobFunction = Callable[[JobContext], "dict | None"]


class JobManager:
    """Starts jobs in threads of this process and tracks them through the store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._threads: dict[int, threading.Thread] = {}
        self._guard = threading.Lock()

    def submit(self, kind: str, config: dict, fn: JobFunction, dedupe: bool = False) -> int:
        """Record a run and start it in the background; returns the run id.

        With ``dedupe``, an active run of the same kind and config is reused
        instead of starting a second one (e.g. two tabs asking for the same training).
        """
        with self._guard:
            if dedupe:
                for run in self.store.list_runs(kind=kind, active_only=True):
                    if run.config == _normalise(config):
                        return run.id
            run_id = self.store.create_run(kind, config)
            thread = threading.Thread(target=self._execute, args=(run_id, fn), name=f"probe-job-{run_id}", daemon=True)
            self._threads[run_id] = thread
        thread.start()
        return run_id

    def _execute(self, run_id: int, fn: JobFunction) -> None:
        self.store.start_run(run_id)
        context = JobContext(self.store, run_id)
        try:
            result = fn(context)
        except CancelledError:
            self.store.finish_run(run_id, "cancelled")
        except ProbeError as exc:
            self.store.finish_run(run_id, "failed", error=str(exc))
        except Exception as exc:  # a job must never die silently; the run records why
            log.error("run %s failed:\n%s", run_id, traceback.format_exc())
            self.store.finish_run(run_id, "failed", error=f"{type(exc).__name__}: {exc}")
        else:
            self.store.finish_run(run_id, "done", result=result or {})
        finally:
            self.store.close()

    def cancel(self, run_id: int) -> None:
        """Ask a run to stop (it stops at its next progress report)."""
        self.store.request_cancel(run_id)

    def wait(self, run_id: int, timeout: float | None = None) -> Run:
        """Block until a run started by this manager ends (or the timeout passes); returns its state."""
        thread = self._threads.get(run_id)
        if thread is not None:
            thread.join(timeout)
        run = self.store.get_run(run_id)
        if run is None:
            raise ProbeError(f"no run {run_id}")
        return run


def run_inline(store: Store, kind: str, config: dict, fn: JobFunction,
               listener: Callable[[float | None, str | None], None] | None = None) -> tuple[int, dict]:
    """Run a job in the calling thread (the CLI's way), recorded like a background run.

    Returns ``(run_id, result)``; ``listener`` sees every progress report.
    Failures, cancellation and Ctrl-C finish the run accordingly (anything it
    already stored is kept) and are raised again.
    """
    run_id = store.create_run(kind, config)
    store.start_run(run_id)
    try:
        result = fn(JobContext(store, run_id, listener=listener)) or {}
    except (CancelledError, KeyboardInterrupt):
        store.finish_run(run_id, "cancelled")
        raise
    except Exception as exc:
        message = str(exc) if isinstance(exc, ProbeError) else f"{type(exc).__name__}: {exc}"
        store.finish_run(run_id, "failed", error=message)
        raise
    store.finish_run(run_id, "done", result=result)
    return run_id, result


def _normalise(config: dict) -> dict:
    """A config as it reads back from the database (JSON round trip), for comparisons."""
    return json.loads(json.dumps(config, sort_keys=True, default=str))


# --- jobs used by the dashboard and the CLI ---------------------------------------------

def training_announcer(context: JobContext):
    """For :meth:`ModelRegistry.announcing`: a model trained inside a job shows in the run's progress.

    The run's message names the model and its epoch (``training ID: epoch 3/20``), and the
    ``details`` carry ``training`` with the model id and fraction, so a page watching the run
    says what is being trained instead of looking stuck.
    """

    def announce(spec, model_id: str):
        context.report(None, f"training {model_id} ({spec.kind} on {spec.dataset_view()}): not in the workspace yet",
                       {"training": {"model": model_id, "fraction": 0.0}}, force=True)

        def on_epoch(progress) -> None:
            context.report(None, f"training {model_id}: epoch {progress.epoch}/{progress.epochs}",
                           {"training": {"model": model_id, "fraction": progress.fraction}},
                           force=progress.epoch == progress.epochs)

        return on_epoch

    return announce


def training_job(registry, specs: list, device: str = "cpu") -> JobFunction:
    """A job training the given :class:`ModelSpec` list in order, with per-model progress.

    ``details["models"]`` maps each model id to ``{"kind", "status", "fraction",
    "epoch", "epochs", "loss", "metric_name", "metric"}`` for the page to draw.
    """
    from probe_core.data import load_dataset

    def run(context: JobContext) -> dict:
        resolved = [s.resolved(load_dataset(s.dataset_view(), registry.data_dir)) for s in specs]
        models = {
            s.model_id(): {"kind": s.kind, "status": "done" if registry.exists(s.model_id()) else "waiting",
                           "fraction": 1.0 if registry.exists(s.model_id()) else 0.0}
            for s in resolved
        }
        context.report(0.0, "starting", {"models": models}, force=True)
        for position, spec in enumerate(resolved):
            model_id = spec.model_id()
            if models[model_id]["status"] == "done":
                continue
            models[model_id]["status"] = "training"

            def on_epoch(p, model_id=model_id, position=position):
                models[model_id].update(fraction=p.fraction, epoch=p.epoch, epochs=p.epochs, loss=p.loss,
                                        metric_name=p.metric_name, metric=p.metric)
                overall = (position + p.fraction) / len(resolved)
                context.report(overall, f"training {model_id}: epoch {p.epoch}/{p.epochs}", {"models": models},
                               force=p.epoch == p.epochs)

            loaded = registry.get_or_train(spec, progress=on_epoch, device=device)
            models[model_id].update(status="done", fraction=1.0, metrics=loaded.metrics)
            context.report((position + 1) / len(resolved), f"trained {model_id}", {"models": models}, force=True)
        return {"models": list(models)}

    return run


def start_default_training(manager: JobManager, registry, dataset: str = "digits", device: str = "cpu") -> int | None:
    """Start training the data set's missing default models; returns the run id, or None if all exist.

    Deduplicated: a second call while the first is running returns the same run.
    """
    if not registry.missing_defaults(dataset):
        return None
    config = {"dataset": dataset, "models": "defaults", "device": str(device)}
    return manager.submit("train", config, training_job(registry, registry.default_specs(dataset), device),
                          dedupe=True)
