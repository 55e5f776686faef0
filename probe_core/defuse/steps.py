"""The Defuse steps as stored runs, run now or in the background (identify -> distill -> correct).

Each step's request and job live in a module of its own (:mod:`~probe_core.defuse.identify_step`,
:mod:`~probe_core.defuse.distill_step`, :mod:`~probe_core.defuse.correct_step`, and the failure map's
:mod:`~probe_core.defuse.embedding_step`); the CLI runs a step inline (:func:`run_step`) and the dashboard
submits it to a worker (:func:`submit_step`). The requests are re-exported here.
"""

from __future__ import annotations

from probe_core.defuse.correct_step import CorrectRequest
from probe_core.defuse.distill_step import DistillRequest
from probe_core.defuse.identify_step import IdentifyRequest
from probe_core.defuse.results import CorrectionResult, DistillationResult, IdentificationResult
from probe_core.errors import ProbeError
from probe_core.runs.lifecycle import run_now, submit


def run_step(registry, store, settings, device: str = "cpu", listener=None, progress_bar: str | None = None
             ) -> tuple[int, IdentificationResult | DistillationResult | CorrectionResult]:
    """Run one step now in this thread (CLI, scripts): :func:`probe_core.runs.lifecycle.run_now`; returns the run id
    and the step's typed result (:mod:`probe_core.defuse.results`).

    ``store`` must be ``registry.store``; ``listener(progress, message)`` sees every progress report, and a
    bar described ``progress_bar`` shows them.
    """
    if store is not registry.store:
        raise ProbeError("run_step records the run in the registry's own store")
    return run_now(registry, _step(settings), listener, device, progress_bar)


def submit_step(manager, registry, settings, device: str = "cpu") -> int:
    """Start one step as a background job (dashboard: a worker process): :func:`probe_core.runs.lifecycle.submit`.

    An :class:`IdentifyRequest` with ``distill_after`` runs distillation after it in the same job (the
    Failures page's one button).
    """
    return submit(manager, _step(settings), registry.data_dir, dedupe=True, device=device)  # a 2nd click joins


def _step(settings):
    if not isinstance(settings, (IdentifyRequest, DistillRequest, CorrectRequest)):
        raise ProbeError(f"not a Defuse step's settings: {type(settings).__name__}")
    return settings
