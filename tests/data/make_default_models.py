"""Train the models the tests use (seed 0) with the zoo's own recipe and ship them.

Training them is the largest single cost of a test session (the default digits classifier, VAE and GAN
about 80 s on 2 cores; the ``colours`` classifier and β-VAE plus the colour test's flawed classifier
about 55 s), so the tests install these copies when they still match the code, and train otherwise,
which is slower but never wrong. Run this after changing how any of them is built (architectures,
training, a data set, the default specs)::

    .venv/bin/python tests/data/make_default_models.py            # every shipped set
    .venv/bin/python tests/data/make_default_models.py colours    # one
    .venv/bin/python tests/data/make_default_models.py --install WS   # register them in workspace WS
    .venv/bin/python tests/data/make_default_models.py --fingerprint-only  # the code changed, not what it trains

``--fingerprint-only`` records the recipe's fingerprint again and keeps the weights, after a refactor that changes
the training code's text but not what it computes (a renamed parameter); retraining would give the same models up
to the machine's floating-point order, and churn the shipped files for nothing.

``<set>-defaults/models.json`` records each model's registry record and sha256 and a fingerprint of the
recipe (model ids, the data sets' arrays, the code of the architectures and the training loop).
``tests/integration/test_shipped_weights.py`` fails when a fingerprint is out of date, so stale copies
never pass unnoticed. ``make bench-quick`` starts from these copies too (its scripts prove their code paths,
not the training); the zoo's training code runs in CI in ``benchmarks/default_models.py --quick`` (every default
model, 2 epochs) and in the suite's training tests.
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

from probe_core.models.spec import ModelSpec
from probe_core.runs.workspace import Workspace  # noqa: E402
from probe_core.progress import SILENT  # noqa: E402

SEED = 0
#: The flawed classifier of ``tests/integration/test_colour.py``: 40 % of the reds nearest green labelled green.
COLOURS_FLAWED_DATASET = "colours[mislabel=red->green:0.4]"


#: The models of the paper's use cases that the digits tests run (as ``recipes.plan_use_case`` specifies them):
#: misclassification without the 5s, novel class 0, 1, 3, 6, 9, and the always-ambiguous classifier.
DIGITS_USE_CASE_SPECS = (
    {"kind": "gan", "classes": (0, 1, 2, 3, 4, 6, 7, 8, 9)},
    {"kind": "classifier", "classes": (0, 1, 3, 6, 9)},
    {"kind": "gan", "classes": (2, 4, 5, 7, 8)},
    {"kind": "classifier", "ambiguous": True},
)


def shipped_specs(name: str) -> list[ModelSpec]:
    """The models a shipped set holds: the data set's defaults, plus the digits use cases' models and the colour
    test's flawed classifier."""
    from probe_core.models.registry import ModelRegistry

    specs = ModelRegistry.default_specs(name, seed=SEED)
    if name == "digits":
        specs += [ModelSpec(dataset="digits", seed=SEED, **fields) for fields in DIGITS_USE_CASE_SPECS]
    if name == "colours":
        specs.append(ModelSpec(dataset=COLOURS_FLAWED_DATASET, kind="classifier", seed=SEED))
    return specs


SHIPPED_SETS = ("digits", "colours")


def folder(name: str) -> Path:
    return Path(__file__).with_name(f"{name}-defaults")


def recipe_fingerprint(name: str) -> dict:
    """What a shipped set depends on: its model ids (the zoo specs), the data sets' arrays, the architectures
    and the training code (syntax-tree digests: comments and layout do not count)."""
    from probe_core.catalog import load_dataset
    from probe_core.models import architectures, training

    specs = shipped_specs(name)
    data = hashlib.sha256()
    for view in sorted({spec.dataset_view() for spec in specs}):
        dataset = load_dataset(view)
        for tensor in (dataset.train_images, dataset.train_labels, dataset.test_images, dataset.test_labels):
            data.update(tensor.contiguous().numpy().tobytes())
    ids = [spec.resolved(load_dataset(spec.dataset_view())).model_id() for spec in specs]
    return {"model_ids": ids, f"{name} data sets (their images and labels)": data.hexdigest(),
            "architectures (probe_core/models/architectures.py)": _code_digest(inspect.getsource(architectures)),
            "training (probe_core/models/training.py)": _code_digest(inspect.getsource(training))}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def stale_parts(name: str) -> list[str]:
    """The parts of a set's recipe that changed since its models were shipped (all of them if none are)."""
    record_path = folder(name) / "models.json"
    if not record_path.is_file():
        return ["(no shipped models)"]
    recorded = json.loads(record_path.read_text())
    current = recipe_fingerprint(name)
    changed = [part for part in current if current[part] != recorded["recipe"].get(part)]
    changed += [f"{model_id}.pt (its sha256)" for model_id, entry in recorded["models"].items()
                if not (folder(name) / f"{model_id}.pt").is_file()
                or sha256(folder(name) / f"{model_id}.pt") != entry["sha256"]]
    return changed


def install(workspace, name: str) -> bool:
    """Register a shipped set's models in a workspace when they match the code; returns whether it did."""
    if stale_parts(name):
        return False
    recorded = json.loads((folder(name) / "models.json").read_text())
    for model_id, entry in recorded["models"].items():
        if workspace.registry.exists(model_id):
            continue
        path = workspace.registry.models_dir / f"{model_id}.pt"
        shutil.copy(folder(name) / f"{model_id}.pt", path)
        workspace.store.put_model(model_id, entry["kind"], entry["dataset"], str(path), entry["spec"], entry["metrics"])
    return True


def _reuse_unchanged(workspace, name: str) -> None:
    """Register the shipped models whose recipe code is unchanged, so only new or changed ones are trained."""
    record_path = folder(name) / "models.json"
    if not record_path.is_file():
        return
    recorded = json.loads(record_path.read_text())
    current = recipe_fingerprint(name)
    code = [part for part in current if part.startswith(("architectures", "training"))]
    if any(current[part] != recorded["recipe"].get(part) for part in code):
        return  # the code changed: everything is trained again (a model's id covers its data set's view)
    for model_id, entry in recorded["models"].items():
        source = folder(name) / f"{model_id}.pt"
        if model_id in current["model_ids"] and source.is_file() and sha256(source) == entry["sha256"]:
            path = workspace.registry.models_dir / f"{model_id}.pt"
            shutil.copy(source, path)
            workspace.store.put_model(model_id, entry["kind"], entry["dataset"], str(path), entry["spec"],
                                      entry["metrics"])


def make(name: str) -> None:
    target_folder = folder(name)
    target_folder.mkdir(exist_ok=True)
    models = {}
    with tempfile.TemporaryDirectory() as workspace_folder:
        workspace = Workspace(workspace_folder)
        _reuse_unchanged(workspace, name)
        for spec in shipped_specs(name):
            model = workspace.registry.get_or_train(spec, reporter=SILENT)
            target = target_folder / f"{model.id}.pt"
            shutil.copy(model.record["path"], target)
            record = workspace.store.get_model(model.id)
            models[model.id] = {"kind": record["kind"], "dataset": record["dataset"], "spec": record["spec"],
                                "metrics": record["metrics"], "sha256": sha256(target)}
            print(f"{model.id}: {record['metrics']}", flush=True)
    for old in target_folder.glob("*.pt"):
        if old.stem not in models:
            old.unlink()
    (target_folder / "models.json").write_text(
        json.dumps({"models": models, "recipe": recipe_fingerprint(name)}, indent=1) + "\n")


def refingerprint(name: str) -> None:
    """Record a set's recipe fingerprint again, its models and their sha256 as they are."""
    record_path = folder(name) / "models.json"
    recorded = json.loads(record_path.read_text())
    record_path.write_text(json.dumps({"models": recorded["models"], "recipe": recipe_fingerprint(name)}, indent=1)
                           + "\n")


def main(arguments: list[str]) -> None:
    """``make_default_models.py [SET ...]`` trains and ships the sets; ``--install WORKSPACE [SET ...]`` registers
    the shipped models that still match the code in a workspace (``make bench-quick`` starts from them)."""
    install_into = None
    if arguments[:1] == ["--fingerprint-only"]:
        for name in arguments[1:] or SHIPPED_SETS:
            refingerprint(name)
        return
    if arguments[:1] == ["--install"]:
        if len(arguments) < 2:
            sys.exit("usage: make_default_models.py --install WORKSPACE [SET ...]")
        install_into, arguments = arguments[1], arguments[2:]
    unknown = sorted(set(arguments) - set(SHIPPED_SETS))
    if unknown:
        sys.exit(f"no shipped set {', '.join(unknown)}; the sets are {', '.join(SHIPPED_SETS)}")
    if install_into is not None:
        workspace = Workspace(install_into)
        for name in arguments or SHIPPED_SETS:
            installed = install(workspace, name)
            print(f"{name}: {'installed the shipped models' if installed else 'stale, not installed: '}"
                  f"{'' if installed else ', '.join(stale_parts(name))}", flush=True)
        return
    torch.set_num_threads(2)
    for name in arguments or SHIPPED_SETS:
        make(name)


if __name__ == "__main__":
    main(sys.argv[1:])
