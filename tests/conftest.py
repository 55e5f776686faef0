"""Shared fixtures: a workspace with the real default digits models, trained once per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

torch.set_num_threads(2)
os.environ.setdefault("PROBE_AUTOTRAIN", "0")

SHARED_MNIST = Path(__file__).resolve().parents[2] / "shared" / "data" / "mnist-t10k"


@pytest.fixture(scope="session")
def trained_workspace(tmp_path_factory):
    """A workspace holding the default digits classifier, VAE and GAN (about 85 s on 2 cores)."""
    from probe_core.workspace import Workspace

    workspace = Workspace(tmp_path_factory.mktemp("trained-workspace"))
    for spec in workspace.registry.default_specs("digits"):
        workspace.registry.get_or_train(spec)
    return workspace


@pytest.fixture
def workspace(tmp_path):
    from probe_core.workspace import Workspace

    return Workspace(tmp_path / "ws")
