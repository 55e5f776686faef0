"""Background jobs whose state lives in the workspace database.

A job is a function ``fn(context) -> result dict``. It reports through
:meth:`JobContext.report`, which writes progress to the ``runs`` table (so any page,
tab or process can show it) and raises :class:`CancelledError` once someone asked the
run to stop. :class:`JobManager` records a run and starts it on an executor
(:mod:`probe_core.executors`: a worker process by default); jobs never touch the UI,
and the dashboard only reads the database.
"""

from __future__ import annotations

import json
import threading

from probe_core.data import DEFAULT_DATASET
from probe_core.errors import ProbeError
from probe_core.executors import JobSpec, ThreadExecutor, make_executor
from probe_core.lifecycle import JobContext, JobFunction, execute_run, run_inline  # noqa: F401 (re-exported)
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
    from probe_core.catalog import load_dataset
    from probe_core.models import ModelSpec

    specs = [ModelSpec(**s) if isinstance(s, dict) else s for s in specs]

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


def start_default_training(manager: JobManager, registry, dataset: str = DEFAULT_DATASET, device: str = "cpu") -> int | None:
    """Start training the data set's missing default models; returns the run id, or None if all exist.

    Deduplicated: a second call while the first is running returns the same run.
    """
    if not registry.missing_defaults(dataset):
        return None
    config = {"dataset": dataset, "models": "defaults", "device": str(device)}
    return submit_training(manager, registry, registry.default_specs(dataset), config, device)


def submit_training(manager: JobManager, registry, specs: list, config: dict, device: str = "cpu") -> int:
    """Train ``specs`` in the background (a worker process in the dashboard); deduplicated by ``config``."""
    from dataclasses import asdict

    job = JobSpec("probe_core.jobs:training_job", {"specs": [asdict(s) for s in specs], "device": str(device)},
                  registry.data_dir)
    return manager.submit("train", config, job, dedupe=True)
