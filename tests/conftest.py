"""Shared fixtures: a workspace with the real default digits models, trained once per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

torch.set_num_threads(2)
os.environ.setdefault("PROBE_AUTOTRAIN", "0")
# In-process page tests run background jobs in threads (fast to start); worker processes, the
# dashboard's default, are tested in tests/test_executors.py and by every browser test's server.
os.environ.setdefault("PROBE_EXECUTOR", "thread")
# PROBE_TEST_SEED: the seed of every model trained inside the tests (default 0). The suite must
# pass with any seed; the product reads it as PROBE_MODEL_SEED, so subprocesses see it too.
TEST_SEED = int(os.environ.get("PROBE_TEST_SEED", "0"))
os.environ["PROBE_MODEL_SEED"] = str(TEST_SEED)

SHARED_MNIST = Path(__file__).resolve().parents[2] / "shared" / "data" / "mnist-t10k"


def require_shared_mnist() -> Path:
    """The real MNIST test set in ../shared; skipped where it is absent, but a failure under ``CI=true``."""
    if not SHARED_MNIST.is_dir():
        message = f"the shared MNIST t10k folder {SHARED_MNIST} is not next to this checkout"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but {message}")
        pytest.skip(message)
    return SHARED_MNIST


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


MISLABELLED = "digits[mislabel=9->8:0.4]"


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


SCENE_CLASSIFIER = Path(__file__).resolve().parent / "data" / "scenes-classifier.pt"


def shipped_scene_classifier():
    """The zoo's square-counting classifier for ``scenes``, trained once and shipped (about 4 min to train).

    Regenerate with ``python tests/data/make_scene_classifier.py`` after changing the renderer
    or the architecture. Returns a :class:`LoadedModel` (probabilities out).
    """
    from probe_core.models.architectures import CountingClassifier, ProbabilityModel
    from probe_core.models.registry import LoadedModel
    from probe_core.scenes.generator import CLASS_NAMES

    if not SCENE_CLASSIFIER.is_file():
        pytest.fail(f"{SCENE_CLASSIFIER} is missing: run python tests/data/make_scene_classifier.py")
    module = CountingClassifier((3, 32, 32), len(CLASS_NAMES))
    module.load_state_dict(torch.load(SCENE_CLASSIFIER, weights_only=True))
    return LoadedModel("scenes-classifier-shipped", "classifier", ProbabilityModel(module.eval(), "logits").eval(),
                       CLASS_NAMES)


def register_scene_classifier(workspace) -> str:
    """Store the shipped scene classifier as the workspace's default ``scenes`` classifier; returns its id."""
    from dataclasses import asdict

    from probe_core.data import load_dataset
    from probe_core.models import ModelSpec

    dataset = load_dataset("scenes")
    spec = ModelSpec(dataset="scenes", kind="classifier").resolved(dataset)
    if not workspace.registry.exists(spec.model_id()):
        record = asdict(spec)
        record.update(architecture={"class": "CountingClassifier", "args": {"image_shape": [3, 32, 32],
                                                                             "num_classes": dataset.num_classes}},
                      class_names=list(dataset.class_names), original_classes=list(dataset.original_classes),
                      dataset_view=dataset.name, image_shape=list(dataset.image_shape))
        workspace.registry.register(shipped_scene_classifier().module.net, record, {"shipped": True},
                                    spec.model_id())
    return spec.model_id()
