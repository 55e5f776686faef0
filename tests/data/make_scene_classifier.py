"""Train the zoo's ``scenes`` classifier with the zoo's own recipe and ship its weights for the tests.

Training takes about 4 minutes on 2 cores, too long for every test session, so the weights
are kept in ``tests/data/scenes-classifier.pt``. Run this after changing the renderer, the
scene prior, the data set or ``CountingClassifier``::

    .venv/bin/python tests/data/make_scene_classifier.py

It also writes ``scenes-classifier.json``: the weights' sha256 and a fingerprint of the recipe they
come from (the rendered data set's own digest, and the code of the prior, renderer, architecture and
training loop). ``tests/integration/test_shipped_weights.py`` fails when either is out of date.
``--fingerprint-only`` records the fingerprint again without retraining, after a refactor that keeps
the rendered data and that code as they were.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import json
import shutil
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from probe_core.models import ModelSpec  # noqa: E402
from probe_core.progress import CallbackReporter  # noqa: E402
from probe_core.runs.workspace import Workspace  # noqa: E402

WEIGHTS = Path(__file__).with_name("scenes-classifier.pt")
FINGERPRINT = Path(__file__).with_name("scenes-classifier.json")


def _code_digest(source: str) -> str:
    """Digest of Python code that ignores comments and layout (its syntax tree)."""
    return hashlib.sha256(ast.dump(ast.parse(source)).encode()).hexdigest()


def recipe_fingerprint() -> dict:
    """What the shipped weights depend on: renderer, scene prior and data set, architecture, training recipe.

    Each part is a digest of its code's syntax tree (comments and formatting do not count),
    plus the zoo spec the weights stand for (seed 0).
    """
    from probe_core.catalog import load_dataset
    from probe_core.models import architectures, training
    from probe_core.scenes import render, world

    dataset = load_dataset("scenes")
    spec = ModelSpec(dataset="scenes", kind="classifier", seed=0).resolved(dataset)
    parts = {
        "scene prior (probe_core/scenes/world.py)": inspect.getsource(world),
        "renderer (probe_core/scenes/render.py)": inspect.getsource(render),
        "architecture (CountingClassifier)": inspect.getsource(architectures.CountingClassifier),
        "training recipe (train_classifier)": inspect.getsource(training.train_classifier),
    }
    data = hashlib.sha256()
    for tensor in (dataset.train_images, dataset.train_labels, dataset.test_images, dataset.test_labels):
        data.update(tensor.contiguous().numpy().tobytes())
    # the data set itself, not the code that builds it: a refactor of that code keeps the weights valid
    return {"model_id": spec.model_id(), "scenes data set (its images and labels)": data.hexdigest(),
            **{name: _code_digest(code) for name, code in parts.items()}}


def weights_sha256() -> str:
    return hashlib.sha256(WEIGHTS.read_bytes()).hexdigest()


def write_fingerprint() -> None:
    """Record the current recipe and the weights' sha256 beside the weights."""
    FINGERPRINT.write_text(json.dumps({"weights_sha256": weights_sha256(), "recipe": recipe_fingerprint()},
                                      indent=1) + "\n")


def main() -> None:
    import sys

    if "--fingerprint-only" in sys.argv:  # the weights stay; their recipe is recorded again
        write_fingerprint()
        return
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as folder:
        workspace = Workspace(folder)
        model = workspace.registry.get_or_train(
            ModelSpec(dataset="scenes", kind="classifier"),
            CallbackReporter(lambda progress, message, details: print(message, flush=True)))
        shutil.copy(model.record["path"], WEIGHTS)
        print(f"{model.id}: {model.metrics}")
    write_fingerprint()


if __name__ == "__main__":
    main()
