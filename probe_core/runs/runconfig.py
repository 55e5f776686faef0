"""Every run kind of the product, and reading a stored run's request and result back.

A run kind is declared next to its domain code (:func:`probe_core.runs.lifecycle.run_kind` on its request
type, naming its result type): Bayes-TrEx sampling (:mod:`probe_core.bayestrex.jobs`), comparison
(:mod:`probe_core.bayestrex.compare`) and latent maps (:mod:`probe_core.bayestrex.latent_map`), the Defuse
steps (:mod:`probe_core.defuse.steps`), suite scores (:mod:`probe_core.suites`) and training
(:mod:`probe_core.models.jobs`). This module imports those, so that every kind is known wherever a stored
run is read. All start through one lifecycle, :func:`probe_core.runs.lifecycle.run_now` or
:func:`probe_core.runs.lifecycle.submit`.

:func:`config_of` reads a stored run's request back as its dataclass, so pickers filter on typed
fields instead of slicing strings; :func:`result_of` reads a run's result back as its typed result.
"""

from __future__ import annotations

# imported for the run kinds they declare
import probe_core.bayestrex.compare  # noqa: F401
import probe_core.bayestrex.jobs  # noqa: F401
import probe_core.bayestrex.latent_map  # noqa: F401
import probe_core.defuse.steps  # noqa: F401
import probe_core.suites  # noqa: F401
from probe_core.data import DEFAULT_DATASET
from probe_core.models.jobs import TrainRequest
from probe_core.runs.lifecycle import RUN_KINDS, submit


def config_of(run):
    """A stored run's request as its dataclass (a :class:`~probe_core.runs.lifecycle.RunRequest`).

    None for kinds without one, and for configurations stored by older versions that no longer fit.
    """
    kind = RUN_KINDS.get(run.kind)
    return None if kind is None else kind.request_of(run)


def result_of(run):
    """A finished run's result as its typed result (:class:`~probe_core.runs.lifecycle.RunResult`), read back from
    the store; None while it has none, for kinds whose results are plain records (``run.result``), and for
    a result stored by an older version that no longer fits."""
    kind = RUN_KINDS.get(run.kind)
    return None if kind is None else kind.result_of(run)


def submit_training(manager, registry, specs: list, dataset: str, purpose: str = "custom",
                    device: str = "cpu") -> int:
    """Train :class:`~probe_core.models.ModelSpec` s in the background; a second identical request joins the first."""
    return submit(manager, TrainRequest.build(dataset, specs, purpose, device), registry.data_dir, dedupe=True)


def start_default_training(manager, registry, dataset: str = DEFAULT_DATASET, device: str = "cpu") -> int | None:
    """Start training a data set's missing default models; returns the run id, or None if all exist."""
    if not registry.missing_defaults(dataset):
        return None
    return submit_training(manager, registry, registry.default_specs(dataset), dataset, "defaults", device)
