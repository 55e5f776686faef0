"""Shared fixtures: a workspace with the real default digits models, trained once per session.

Tests live in ``unit/`` (no training, under a minute: ``make test-fast``), ``integration/``,
``app/`` (AppTest) and ``e2e/`` (a real browser and real processes); helpers every folder
uses are in ``helpers.py``, never imported from here.
"""

from __future__ import annotations

import os

import pytest
import torch
from helpers import MISLABELLED

torch.set_num_threads(2)
os.environ.setdefault("PROBE_AUTOTRAIN", "0")
# In-process page tests run background jobs in threads (fast to start); worker processes, the
# dashboard's default, are tested in tests/integration/test_executors.py and by every browser test's server.
os.environ.setdefault("PROBE_EXECUTOR", "thread")
# PROBE_TEST_SEED: the seed of every model trained inside the tests (default 0). The suite must
# pass with any seed; the product reads it as PROBE_MODEL_SEED, so subprocesses see it too.
TEST_SEED = int(os.environ.get("PROBE_TEST_SEED", "0"))
os.environ["PROBE_MODEL_SEED"] = str(TEST_SEED)

@pytest.fixture(scope="session")
def trained_workspace(tmp_path_factory):
    """A workspace holding the default digits classifier, VAE and GAN (about 85 s on 2 cores)."""
    from probe_core.workspace import Workspace

    workspace = Workspace(tmp_path_factory.mktemp("trained-workspace"))
    for spec in workspace.registry.default_specs("digits"):
        workspace.registry.get_or_train(spec)
    return workspace


@pytest.fixture
def app_env(trained_workspace, monkeypatch):
    """The dashboard pointed at the trained workspace, without the default-training job."""
    monkeypatch.setenv("PROBE_WORKSPACE", str(trained_workspace.root))
    monkeypatch.setenv("PROBE_AUTOTRAIN", "0")
    return trained_workspace


@pytest.fixture
def workspace(tmp_path):
    from probe_core.workspace import Workspace

    return Workspace(tmp_path / "ws")


@pytest.fixture(scope="session")
def flawed_run(trained_workspace):
    """A classifier trained with 40 % of its 9s labelled 8, identified and distilled with quick settings (~15 s)."""
    from probe_core.defuse import pipeline
    from probe_core.models import ModelSpec

    registry, store = trained_workspace.registry, trained_workspace.store
    flawed = registry.get_or_train(ModelSpec(dataset=MISLABELLED, kind="classifier"))
    identify_run, identified = pipeline.run_step(registry, store, pipeline.IdentifySettings(
        dataset=MISLABELLED, classifier=flawed.id, samples_per_image=200))
    distill_run, distilled = pipeline.run_step(registry, store, pipeline.DistillSettings(
        identify_run=identify_run, max_samples=3000))
    return {"classifier": flawed.id, "identify_run": identify_run, "identified": identified,
            "distill_run": distill_run, "distilled": distilled}
