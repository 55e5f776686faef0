"""kill -9 of a CLI sampling run, a Defuse identification and the dashboard server during a job.

Each leaves its run ``interrupted`` with everything stored up to then; the workspace opens
cleanly and a new run starts normally. Real subprocesses, real SIGKILL.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import write_tiny_plugin

from probe_core.store import Store

ROOT = Path(__file__).resolve().parents[2]


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "PROBE_AUTOTRAIN": "0"}


def _start_cli(args: list[str], workspace: Path, log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "probe_core.cli", "--workspace", str(workspace), "--device", "cpu",
                             *args], env=_env(), stdout=subprocess.DEVNULL, stderr=open(log, "w"))


def _wait_for(condition, process: subprocess.Popen, log: Path, timeout: float = 180.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = condition()
        if value:
            return value
        if process.poll() is not None:
            pytest.fail(f"the process ended before the test could kill it: {log.read_text()[-2000:]}")
        time.sleep(0.3)
    process.kill()
    pytest.fail(f"condition not reached in {timeout} s: {log.read_text()[-2000:]}")


def _kill_9(process: subprocess.Popen) -> None:
    os.kill(process.pid, signal.SIGKILL)
    process.wait(30)  # reaped, as a shell or service manager would


def _runs_json(workspace: Path) -> list[dict]:
    out = subprocess.run([sys.executable, "-m", "probe_core.cli", "--workspace", str(workspace), "runs", "--json"],
                         env=_env(), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _store(workspace: Path) -> Store:
    return Store(workspace / "probe.sqlite")


def test_kill_9_of_a_cli_sampling_run_leaves_it_interrupted_with_its_samples(tmp_path):
    workspace, plugin = tmp_path / "ws", str(write_tiny_plugin(tmp_path))
    args = ["sample", "--classifier", plugin, "--generator", plugin, "--target", "high:3", "--chains", "4",
            "--warmup", "5", "--samples", "100000"]
    process = _start_cli(args, workspace, tmp_path / "cli.log")
    store = None

    def some_samples():
        nonlocal store
        if not (workspace / "probe.sqlite").exists():
            return 0
        store = store or _store(workspace)
        runs = store.list_runs(kind="sample")
        return runs and store.count_samples(runs[0].id) >= 40

    _wait_for(some_samples, process, tmp_path / "cli.log")
    run_id = store.list_runs(kind="sample")[0].id
    before = store.count_samples(run_id)
    _kill_9(process)
    [run] = [r for r in _runs_json(workspace) if r["id"] == run_id]
    assert run["status"] == "interrupted" and run["finished_at"] is not None
    assert store.count_samples(run_id) >= before  # nothing stored was lost
    # the workspace opens cleanly and a new run starts normally
    done = subprocess.run([sys.executable, "-m", "probe_core.cli", "--workspace", str(workspace), *args[:-2],
                           "--samples", "5"], env=_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert store.list_runs(kind="sample")[0].status == "done"


def test_kill_9_of_a_defuse_identification_keeps_its_failures(tmp_path):
    workspace, plugin = tmp_path / "ws", str(write_tiny_plugin(tmp_path))
    process = _start_cli(["defuse", "identify", "--classifier", plugin, "--vae", plugin, "--samples-per-image", "5000"],
                         workspace, tmp_path / "cli.log")
    store = None

    def some_failures():
        nonlocal store
        if not (workspace / "probe.sqlite").exists():
            return None
        store = store or _store(workspace)
        runs = store.list_runs(kind="defuse-identify")
        return runs and runs[0].progress > 0.01 and store.concat_arrays(runs[0].id, "failures/") is not None

    _wait_for(some_failures, process, tmp_path / "cli.log")
    run_id = store.list_runs(kind="defuse-identify")[0].id
    stored = len(store.concat_arrays(run_id, "failures/")["latents"])
    _kill_9(process)
    [run] = [r for r in _runs_json(workspace) if r["id"] == run_id]
    assert run["status"] == "interrupted" and 0.01 < run["progress"] < 1
    assert len(store.concat_arrays(run_id, "failures/")["latents"]) >= stored > 0
    # its failures can still be distilled
    from probe_core.cli import main

    assert main(["--workspace", str(workspace), "defuse", "distill", "--run", str(run_id), "--components", "5",
                 "--max-samples", "500"]) == 0


def test_kill_9_of_the_dashboard_server_during_a_background_job(tmp_path):
    from test_browser import browser_page, require_browser, running_server

    require_browser()
    workspace = tmp_path / "ws"
    # a link that names digits chooses it: its first view starts the default training in the server
    with running_server(workspace, tmp_path / "server.log", autotrain=True) as server, browser_page() as page:
        page.goto(f"{server.url}/?dataset=digits")
        store = _store(workspace)
        _wait_for(lambda: (workspace / "probe.sqlite").exists() and bool(store.list_runs(kind="train"))
                  and store.list_runs(kind="train")[0].progress > 0.02, server.process, server.log)
        _kill_9(server.process)
    [run] = [r for r in _runs_json(workspace) if r["kind"] == "train"]
    assert run["status"] == "interrupted"
    # the Models page says so
    from streamlit.testing.v1 import AppTest

    os.environ["PROBE_WORKSPACE"] = str(workspace)
    try:
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    finally:
        del os.environ["PROBE_WORKSPACE"]
    assert not at.exception
    shown = " ".join(str(w.value) for w in at.warning) + " ".join(str(m.value) for m in at.markdown)
    assert f"run {run['id']}" in shown.lower() and "interrupted" in shown, shown[:2000]
