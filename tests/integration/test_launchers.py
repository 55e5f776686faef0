"""Background jobs in worker processes: they run outside the caller, stop on request, and a killed worker
leaves its run interrupted with what it stored."""

from __future__ import annotations

import os
import signal
import time

import pytest
from helpers import write_tiny_plugin

from probe_core.bayestrex.request import SampleRequest
from probe_core.errors import ProbeError
from probe_core.runs.jobs import JobManager
from probe_core.runs.launchers import ProcessLauncher
from probe_core.runs.lifecycle import JobSpec, job_spec


def _sampling_spec(plugin: str, samples: int) -> JobSpec:
    return job_spec(SampleRequest(dataset="digits", target="high:3", class_names=tuple(str(i) for i in range(10)),
                                  classifier=plugin, generator=plugin, chains=4, warmup=2, samples=samples,
                                  keep_every=1))


def _wait(condition, timeout: float = 120.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError("condition not reached in time")


def test_a_job_runs_in_a_worker_process_and_its_result_is_stored(workspace, tmp_path):
    manager = JobManager(workspace.store, ProcessLauncher(threads=1))
    spec = _sampling_spec(str(write_tiny_plugin(tmp_path)), 20)
    with pytest.raises(ProbeError, match="config is its job's request"):  # what the limits check is what runs
        manager.submit("sample", {"target": "high:3"}, spec)
    run_id = manager.submit("sample", spec.request, spec)
    run = manager.wait(run_id, timeout=180)
    assert run.status == "done", (run.status, run.error)
    assert f":{os.getpid()}:" not in run.owner  # it ran in another process
    assert workspace.store.count_samples(run_id) == 4 * 20
    assert run.job["kind"] == "sample" and run.config["samples"] == 20  # the request, not a code path
    assert "request" not in run.job  # stored once, as the run's config
    assert "with 1 torch thread(s) (OpenMP 1, numba 1)" in (workspace.root / "logs" / f"run-{run_id}.log").read_text()


def test_stop_reaches_a_worker_and_a_killed_worker_leaves_its_run_interrupted(workspace, tmp_path):
    plugin = str(write_tiny_plugin(tmp_path))
    manager = JobManager(workspace.store, ProcessLauncher())
    long_run = _sampling_spec(plugin, 100_000)
    stopped = manager.submit("sample", long_run.request, long_run)
    _wait(lambda: workspace.store.count_samples(stopped) > 0)
    manager.cancel(stopped)
    run = manager.wait(stopped, timeout=120)
    assert run.status == "done" and run.result["cancelled"]  # stopped early, summary of what was kept

    killed = manager.submit("sample", long_run.request, long_run)
    _wait(lambda: workspace.store.count_samples(killed) > 0)
    owner = workspace.store.get_run(killed).owner
    os.kill(int(owner.split(":")[1]), signal.SIGKILL)
    # the executor collects the worker's exit and records how it ended
    run = _wait(lambda: (r := workspace.store.get_run(killed)).status == "interrupted" and "signal" in r.error and r)
    assert "killed by signal 9" in run.error
    assert workspace.store.count_samples(killed) > 0


def test_a_job_that_cannot_be_built_fails_with_the_reason(workspace):
    manager = JobManager(workspace.store, ProcessLauncher())
    run = manager.wait(manager.submit("t", {}, JobSpec("nothing")), timeout=120)
    assert run.status == "failed" and "unknown run kind 'nothing'" in run.error


def test_a_function_cannot_go_to_a_worker_process(workspace):
    with pytest.raises(Exception, match="JobSpec"):
        ProcessLauncher().start(workspace.store, workspace.store.create_run("t", {}), lambda context: {})
