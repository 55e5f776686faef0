"""Cached resources shared by the pages: the workspace, the job manager, loaded models, read-only data.

Nothing here holds a person's settings: those are in :mod:`pages.ui.session`."""

from __future__ import annotations

import streamlit as st
import torch

from probe_core.api.ui import JobManager, Workspace, model_verdicts, prior_draws

AUTOTRAIN_ENV = "PROBE_AUTOTRAIN"


@st.cache_resource
def get_workspace(root: str) -> Workspace:
    return Workspace(root)


@st.cache_resource
def get_job_manager(root: str) -> JobManager:
    return JobManager(get_workspace(root).store)


@st.cache_data(show_spinner=False, max_entries=64)
def generator_samples(root: str, model_id: str, count: int = 32, seed: int = 0):
    """Decoded prior samples of a stored generator (its own prior where it has one), shape (count, C, H, W); cached
    per model."""
    loaded = get_workspace(root).registry.load(model_id)
    with torch.no_grad():
        return loaded.module.decode(prior_draws(loaded.module, count, torch.Generator().manual_seed(seed))).cpu()


@st.cache_resource(show_spinner="Loading model…", max_entries=16)
def _load(root: str, reference: str, kind: str, dataset: str, device_name: str, data_dir: str | None, actor):
    """A model resolved as ``actor`` (part of the cache key, so nobody gets what only another may load)."""
    return get_workspace(root).for_data_dir(data_dir, actor=actor).registry.resolve(reference, kind, dataset,
                                                                                     device=device_name)


@st.cache_resource(show_spinner="Checking the models on this data…", max_entries=16)
def _verdicts(root: str, dataset: str, model_ids: tuple[str, ...], data_dir: str | None, actor) -> dict:
    """:func:`~probe_core.models.checks.model_verdicts` once per set of models (page reruns do not reload them)."""
    registry = get_workspace(root).for_data_dir(data_dir, actor=actor).registry
    return model_verdicts(registry, dataset, list(model_ids))


@st.cache_resource(max_entries=4, show_spinner="Reading the failures…")
def _failures(root: str, run_id: int):
    from probe_core.defuse.queries import failures_of

    return failures_of(get_workspace(root).store, run_id)


def preload_for_server() -> None:
    """Import what the pages need before the server serves (``python app.py`` calls this).

    probe_core's modules the pages use came with this module (:mod:`probe_core.api.ui`); everything else but UMAP
    is imported here, in one thread: importing big packages such as
    scipy or scikit-learn from two threads at once can deadlock Python's import locks. UMAP
    (seconds to import, tens of seconds in a new environment while numba compiles) is then
    imported in a background thread; nothing else imports it except the failure-map job,
    which simply waits for it.
    """
    import threading

    import captum.attr  # noqa: F401
    import pyro.ops.stats  # noqa: F401
    import scipy.stats  # noqa: F401
    import sklearn.mixture  # noqa: F401
    import sklearn.neighbors  # noqa: F401

    threading.Thread(target=lambda: __import__("umap"), name="probe-import-umap", daemon=True).start()
