"""UI glue shared by the pages: cached resources, session settings and small widgets.

Everything here calls into ``probe_core``; nothing in ``probe_core`` calls back.
"""

from __future__ import annotations

import os
import time

import pandas as pd
import streamlit as st
import torch

from probe_core.data import DEFAULT_DATASET, DATA_DIR_ENV, list_datasets, load_dataset
from probe_core.errors import ProbeError
from probe_core.jobs import JobManager
from probe_core.models import FD_HELP, FD_METRIC
from probe_core.render import image_grid, upscale_for_display
from probe_core.workspace import Workspace, default_workspace_path

AUTOTRAIN_ENV = "PROBE_AUTOTRAIN"


@st.cache_resource
def get_workspace(root: str) -> Workspace:
    return Workspace(root)


@st.cache_resource
def get_job_manager(root: str) -> JobManager:
    return JobManager(get_workspace(root).store)


def workspace() -> Workspace:
    """The session's workspace, with the data folder chosen in the sidebar."""
    ws = get_workspace(str(default_workspace_path().resolve()))
    ws.registry.data_dir = st.session_state.get("data_dir") or None
    return ws


def job_manager() -> JobManager:
    return get_job_manager(str(default_workspace_path().resolve()))


def device() -> str:
    return st.session_state.get("device", "cpu")


def sidebar_settings() -> None:
    """Data set, data folder and device pickers shared by every page."""
    names = [info.name for info in list_datasets()]
    st.session_state.setdefault("dataset", DEFAULT_DATASET)
    st.session_state.setdefault("data_dir", os.environ.get(DATA_DIR_ENV, ""))
    with st.sidebar:
        st.selectbox("Data set", names, key="dataset", help="digits is embedded; the others read IDX files")
        if st.session_state["dataset"] != DEFAULT_DATASET:
            st.text_input("Data folder (IDX files)", key="data_dir",
                          help=f"Folder with train-/t10k- IDX files; default ${DATA_DIR_ENV}")
        devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
        st.selectbox("Device", devices, key="device", help="CUDA is offered when a GPU is present")


def current_dataset():
    """The selected data set, or None after showing why it cannot be loaded."""
    try:
        return load_dataset(st.session_state.get("dataset", DEFAULT_DATASET),
                            st.session_state.get("data_dir") or None)
    except ProbeError as exc:
        st.error(f"Cannot load the data set: {exc}")
        return None


def show_picture(images: torch.Tensor, caption: str | None = None, columns: int = 8) -> None:
    """Show (N, C, H, W) images as one grid picture."""
    scale = upscale_for_display(images.shape[-2])
    st.image(image_grid(images, columns=columns, scale=scale), caption=caption)


@st.cache_data(show_spinner=False, max_entries=64)
def generator_samples(root: str, model_id: str, count: int = 32, seed: int = 0):
    """Decoded prior samples of a stored generator, shape (count, C, H, W); cached per model."""
    loaded = get_workspace(root).registry.load(model_id)
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return loaded.module.decode(torch.randn(count, loaded.module.latent_dim)).cpu()


def models_table(models: list[dict]) -> pd.DataFrame:
    rows = []
    for m in models:
        metrics = m["metrics"]
        rows.append({
            "id": m["id"],
            "kind": m["kind"],
            "data": m["spec"].get("dataset_view", m["dataset"]),
            "test accuracy": metrics.get("test_accuracy"),
            "test ELBO": metrics.get("test_elbo"),
            "recon MSE": metrics.get("test_reconstruction_mse"),
            "FD-clf": metrics.get(FD_METRIC),
            "train s": metrics.get("train_seconds"),
            "created": time.strftime("%Y-%m-%d %H:%M", time.localtime(m["created_at"])),
        })
    return pd.DataFrame(rows)


MODELS_COLUMN_CONFIG = {
    "test accuracy": st.column_config.ProgressColumn("test accuracy", min_value=0.0, max_value=1.0, format="percent"),
    "FD-clf": st.column_config.NumberColumn("FD-clf", help=FD_HELP, format="%.1f"),
    "test ELBO": st.column_config.NumberColumn("test ELBO", help="nats per image, higher is better", format="%.1f"),
    "recon MSE": st.column_config.NumberColumn("recon MSE", help="per pixel, at the posterior mean", format="%.4f"),
}


def run_status_line(run) -> str:
    icon = {"running": "⏳", "queued": "🕒", "done": "✅", "failed": "❌", "cancelled": "⏹️", "interrupted": "⚠️"}
    return f"{icon.get(run.status, '')} run {run.id} · {run.kind} · {run.status} · {run.message}"
