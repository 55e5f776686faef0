"""Plugin references stored by runs resolve again in another process and folder; moved or changed plugins say so."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import write_tiny_plugin

from probe_core.errors import PluginError
from probe_core.models.plugins import load_plugin_reference, parse_plugin_reference

ROOT = Path(__file__).resolve().parents[2]


def probe(args: list[str], cwd: Path, workspace: Path) -> subprocess.CompletedProcess:
    """Run the ``probe`` CLI in a fresh process from ``cwd``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "probe_core.cli", "--workspace", str(workspace), "--device", "cpu",
                           *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_the_whole_defuse_cli_works_with_plugin_classifier_generator_and_oracle(tmp_path, monkeypatch, capsys):
    from probe_core.cli import main

    plugins, elsewhere, workspace = tmp_path / "plugins", tmp_path / "elsewhere", tmp_path / "ws"
    plugins.mkdir()
    elsewhere.mkdir()
    write_tiny_plugin(plugins, "model.py")
    write_tiny_plugin(plugins, "oracle.py", extra="""
        def classifier():
            torch.manual_seed(7)
            return nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    """)
    quick = ["--max-images", "60", "--samples-per-image", "20"]
    # relative plugin paths, typed in the plugins folder by another process; every later step
    # runs in this process from another folder and finds the plugins through the stored references
    found = probe(["defuse", "identify", "--classifier", "model.py", "--vae", "model.py", *quick], plugins, workspace)
    assert found.returncode == 0, found.stderr
    identify_run = _run_id(workspace, "defuse-identify")
    monkeypatch.chdir(elsewhere)
    cli = lambda *args: main(["--workspace", str(workspace), "--device", "cpu", *args])  # noqa: E731
    assert cli("defuse", "distill", "--run", str(identify_run), "--components", "8", "--max-samples", "1000") == 0
    distill_run = _run_id(workspace, "defuse-distill")
    oracle = f"oracle:{plugins / 'oracle.py'}"
    capsys.readouterr()
    assert cli("defuse", "label", "--run", str(distill_run), "--auto-label", oracle) == 0
    source = re.search(r"stored as (\S+);", capsys.readouterr().out).group(1)
    assert source.startswith("oracle:plugin:/")
    assert cli("defuse", "correct", "--run", str(distill_run), "--source", source, "--lambdas", "1,10", "--epochs",
               "1", "--samples-per-region", "16", "--out", "correct.json") == 0
    result = json.loads((elsewhere / "correct.json").read_text())
    # the finetuned plugin classifier is a registered model that loads back through the same plugin
    from probe_core.runs.workspace import Workspace

    model = Workspace(workspace).registry.load(result["corrected_model"])
    assert model.kind == "classifier" and model.record["spec"]["architecture"]["class"] == "plugin"
    assert cli("defuse", "run", "--classifier", str(plugins / "model.py"), "--vae", str(plugins / "model.py"), *quick,
               "--auto-label", oracle, "--lambdas", "1", "--epochs", "1", "--samples-per-region", "16",
               "--components", "8", "--max-samples", "1000") == 0

    # the plugin changes: runs that used the old file say so, naming it (one line, exit 2)
    (plugins / "model.py").write_text((plugins / "model.py").read_text() + "\n# edited\n")
    capsys.readouterr()
    assert cli("defuse", "correct", "--run", str(distill_run), "--source", source) == 2
    error = capsys.readouterr().err
    assert str(plugins / "model.py") in error and "changed since it was used" in error
    # the plugin moves away
    shutil.move(plugins / "model.py", tmp_path / "moved.py")
    assert cli("defuse", "label", "--run", str(distill_run), "--auto-label", oracle) == 2
    error = capsys.readouterr().err
    assert str(plugins / "model.py") in error and "not found" in error


def _run_id(workspace: Path, kind: str) -> int:
    from probe_core.store import Store

    store = Store(workspace / "probe.sqlite")
    try:
        return store.list_runs(kind=kind)[0].id
    finally:
        store.close()


def test_a_plugin_reference_is_absolute_and_checks_the_file(tmp_path, monkeypatch):
    path = write_tiny_plugin(tmp_path)
    monkeypatch.chdir(tmp_path)
    plugin = load_plugin_reference("tiny_model.py")
    reference = plugin.reference
    assert reference.startswith(f"plugin:{tmp_path}/tiny_model.py#sha256=")
    assert parse_plugin_reference(reference) == (path.resolve(), plugin.sha256)
    monkeypatch.chdir("/")
    assert load_plugin_reference(reference).sha256 == plugin.sha256
    path.write_text(path.read_text() + "\n")
    with pytest.raises(PluginError, match="changed since it was used"):
        load_plugin_reference(reference)
    path.unlink()
    with pytest.raises(PluginError, match=f"plugin file {path} not found .*moved or deleted"):
        load_plugin_reference(reference)
