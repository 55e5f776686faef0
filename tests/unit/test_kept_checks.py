"""Model checks kept beside a stored model's weights: read back in a new process without measuring again, and
measured again whenever anything they depend on changed."""

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from probe_core.catalog import load_dataset
from probe_core.models import checks
from probe_core.models.kept_checks import CHECKS_FOLDER
from probe_core.models.loaded import in_memory_classifier
from probe_core.runs.workspace import Workspace


@pytest.fixture
def stored(trained_workspace, tmp_path):
    """A workspace of its own holding copies of the session's default digits classifier and VAE, their resolved
    models and the data, with the process's own check caches empty (as in a new process) before and after."""
    workspace = Workspace(tmp_path / "ws")
    models = []
    for kind in ("classifier", "generator"):
        record = trained_workspace.store.get_model(trained_workspace.registry.default_id("digits", kind))
        path = workspace.models_dir / Path(record["path"]).name
        shutil.copy(record["path"], path)
        workspace.store.put_model(record["id"], record["kind"], record["dataset"], str(path), record["spec"],
                                  record["metrics"])
        models.append(workspace.registry.resolve(record["id"], kind, "digits"))
    checks._CLASSIFIER_CHECKS.clear()
    checks._GENERATOR_CHECKS.clear()
    yield workspace, *models, load_dataset("digits")
    checks._CLASSIFIER_CHECKS.clear()
    checks._GENERATOR_CHECKS.clear()


def _kept_files(workspace) -> list[str]:
    folder = workspace.models_dir / CHECKS_FOLDER
    return sorted(path.name for path in folder.iterdir()) if folder.is_dir() else []


def _as_json(check) -> str:
    return json.dumps(check.to_dict(), sort_keys=True)


def _measuring_fails(monkeypatch) -> None:
    def measure(*args, **kwargs):
        raise AssertionError("a kept check was measured again")

    monkeypatch.setattr(checks, "_probabilities", measure)
    monkeypatch.setattr(checks, "_features", measure)


def test_a_stored_models_checks_are_kept_and_read_back_in_a_new_process_without_measuring(stored, monkeypatch):
    workspace, classifier, generator, data = stored
    first_classifier = checks.check_classifier(classifier, data)
    first_generator = checks.check_generator(generator, classifier, data, samples=200)
    kept = _kept_files(workspace)
    assert [name.split("-")[0] for name in kept] == ["classifier", "generator", "generator"]  # JSON, and the grid
    checks._CLASSIFIER_CHECKS.clear()  # a new process: nothing cached in memory
    checks._GENERATOR_CHECKS.clear()
    _measuring_fails(monkeypatch)
    again_classifier = checks.check_classifier(classifier, data)
    again_generator = checks.check_generator(generator, classifier, data, samples=200)
    assert again_classifier == first_classifier
    assert _as_json(again_generator) == _as_json(first_generator) and again_generator.verdict == "ok"
    assert torch.equal(torch.as_tensor(again_generator.samples), torch.as_tensor(first_generator.samples))
    assert _kept_files(workspace) == kept


def test_other_weights_settings_or_images_are_measured_again(stored, monkeypatch):
    workspace, classifier, generator, data = stored
    checks.check_generator(generator, classifier, data, samples=200)
    measured = []
    original = checks._probabilities
    monkeypatch.setattr(checks, "_probabilities", lambda *a, **k: measured.append(1) or original(*a, **k))
    for change in ("samples", "data", "weights"):
        checks._CLASSIFIER_CHECKS.clear()
        checks._GENERATOR_CHECKS.clear()
        measured.clear()
        if change == "samples":
            checks.check_generator(generator, classifier, data, samples=150)
        elif change == "data":
            fewer = replace(data, test_images=data.test_images[:300], test_labels=data.test_labels[:300])
            checks.check_generator(generator, classifier, fewer, samples=200)
        else:
            with torch.no_grad():
                next(generator.module.parameters()).add_(0.01)
            checks.check_generator(generator, classifier, data, samples=200)
        assert measured, f"a check with other {change} was read from the one kept before"


def test_a_model_whose_code_is_not_probe_cores_is_never_kept_and_a_broken_or_other_file_is_measured_again(stored):
    workspace, classifier, generator, data = stored
    memory = in_memory_classifier(classifier.module.net, classifier.class_names, (1, 8, 8))
    checks.check_classifier(memory, data)
    checks.check_generator(generator, memory, data, samples=100)
    assert _kept_files(workspace) == []  # an in-memory module (like a plugin's code) may change under its name
    first = checks.check_classifier(classifier, data)
    [kept] = _kept_files(workspace)
    for broken in ("{ half a file", json.dumps({"accuracy": 1.0, "a field of another version": 0})):
        (workspace.models_dir / CHECKS_FOLDER / kept).write_text(broken)
        checks._CLASSIFIER_CHECKS.clear()
        assert checks.check_classifier(classifier, data) == first
    assert json.loads((workspace.models_dir / CHECKS_FOLDER / kept).read_text())["accuracy"] == first.accuracy
