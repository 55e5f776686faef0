"""Train the default digits models (classifier, VAE, GAN; seed 0) with the zoo's own recipe and ship them
for the tests.

Training them takes about 80 s on 2 cores, the largest single cost of a test session, so the
``trained_workspace`` fixture installs these copies when they still match the code (and trains
otherwise, which is slower but never wrong). Run this after changing how the digits defaults are
built (architectures, training, the data set, the default specs)::

    .venv/bin/python tests/data/make_digits_defaults.py

``digits-defaults/models.json`` records each model's registry record and sha256 and a fingerprint of
the recipe (model ids, the digits arrays, the code of the architectures and the training loop).
``tests/integration/test_shipped_weights.py`` fails when the fingerprint is out of date, so stale
copies never pass unnoticed. The default models are still trained from scratch in CI by the
benchmarks' quick modes (``make bench-quick``).
"""

from __future__ import annotations

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
sys.path.insert(0, str(Path(__file__).resolve().parent))

from make_scene_classifier import _code_digest  # noqa: E402

from probe_core.workspace import Workspace  # noqa: E402

FOLDER = Path(__file__).with_name("digits-defaults")
RECORD = FOLDER / "models.json"
SEED = 0


def recipe_fingerprint() -> dict:
    """What the shipped models depend on: their ids (the zoo specs), the digits arrays, the architectures
    and the training code (syntax-tree digests: comments and layout do not count)."""
    from probe_core.catalog import load_dataset
    from probe_core.models import architectures, training
    from probe_core.models.registry import ModelRegistry

    dataset = load_dataset("digits")
    data = hashlib.sha256()
    for tensor in (dataset.train_images, dataset.train_labels, dataset.test_images, dataset.test_labels):
        data.update(tensor.contiguous().numpy().tobytes())
    ids = [spec.resolved(load_dataset(spec.dataset_view())).model_id()
           for spec in ModelRegistry.default_specs("digits", seed=SEED)]
    return {"model_ids": ids, "digits data set (its images and labels)": data.hexdigest(),
            "architectures (probe_core/models/architectures.py)": _code_digest(inspect.getsource(architectures)),
            "training (probe_core/models/training.py)": _code_digest(inspect.getsource(training))}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def stale_parts() -> list[str]:
    """The parts of the recipe that changed since the models were shipped (all of them if none are)."""
    if not RECORD.is_file():
        return ["(no shipped models)"]
    recorded = json.loads(RECORD.read_text())
    current = recipe_fingerprint()
    changed = [part for part in current if current[part] != recorded["recipe"].get(part)]
    changed += [f"{model_id}.pt (its sha256)" for model_id, entry in recorded["models"].items()
                if not (FOLDER / f"{model_id}.pt").is_file() or sha256(FOLDER / f"{model_id}.pt") != entry["sha256"]]
    return changed


def install(workspace) -> bool:
    """Register the shipped models in a workspace when they match the code; returns whether it did."""
    if stale_parts():
        return False
    recorded = json.loads(RECORD.read_text())
    for model_id, entry in recorded["models"].items():
        if workspace.registry.exists(model_id):
            continue
        path = workspace.registry.models_dir / f"{model_id}.pt"
        shutil.copy(FOLDER / f"{model_id}.pt", path)
        workspace.store.put_model(model_id, entry["kind"], entry["dataset"], str(path), entry["spec"], entry["metrics"])
    return True


def main() -> None:
    torch.set_num_threads(2)
    FOLDER.mkdir(exist_ok=True)
    models = {}
    with tempfile.TemporaryDirectory() as folder:
        workspace = Workspace(folder)
        for spec in workspace.registry.default_specs("digits", seed=SEED):
            model = workspace.registry.get_or_train(spec, progress=lambda p: None)
            target = FOLDER / f"{model.id}.pt"
            shutil.copy(model.record["path"], target)
            record = workspace.store.get_model(model.id)
            models[model.id] = {"kind": record["kind"], "dataset": record["dataset"], "spec": record["spec"],
                                "metrics": record["metrics"], "sha256": sha256(target)}
            print(f"{model.id}: {record['metrics']}", flush=True)
    for old in FOLDER.glob("*.pt"):
        if old.stem not in models:
            old.unlink()
    RECORD.write_text(json.dumps({"models": models, "recipe": recipe_fingerprint()}, indent=1) + "\n")


if __name__ == "__main__":
    main()
