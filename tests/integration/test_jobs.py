import dataclasses
import time

from probe_core.errors import ProbeError
from probe_core.runs.jobs import JobManager
from probe_core.runs.training import start_default_training


def test_job_success_failure_and_cancel(workspace):
    manager = JobManager(workspace.store)

    def ok(context):
        context.report(0.5, "halfway", force=True)
        return {"answer": 42}

    def bad(context):
        raise ProbeError("target vector must sum to 1")

    def crash(context):
        raise RuntimeError("boom")

    def slow(context):
        for step in range(1000):
            context.report(step / 1000, f"step {step}", force=True)
            time.sleep(0.01)
        return {}

    done = manager.wait(manager.submit("t", {}, ok), timeout=10)
    assert (done.status, done.result, done.progress) == ("done", {"answer": 42}, 1.0)
    failed = manager.wait(manager.submit("t", {}, bad), timeout=10)
    assert failed.status == "failed" and failed.error == "target vector must sum to 1"
    assert manager.wait(manager.submit("t", {}, crash), timeout=10).error == "RuntimeError: boom"
    run_id = manager.submit("t", {}, slow)
    # wait on the condition, not a clock (pytest-timeout bounds a hang): the job has reported steps, or ended
    while workspace.store.get_run(run_id).progress < 0.01 and workspace.store.get_run(run_id).active:
        time.sleep(0.01)
    manager.cancel(run_id)
    cancelled = manager.wait(run_id, timeout=10)
    # stopped where it was (10 s of steps left), with the progress it had reported kept
    assert cancelled.status == "cancelled" and 0.01 <= cancelled.progress < 0.9


def test_default_training_is_deduplicated_and_skipped_when_done(trained_workspace, workspace):
    manager = JobManager(trained_workspace.store)
    assert start_default_training(manager, trained_workspace.registry, "digits") is None
    # an empty workspace: two pages asking for the defaults at once share one run
    fresh = JobManager(workspace.store, "thread")
    first = start_default_training(fresh, workspace.registry, "digits")
    second = start_default_training(fresh, workspace.registry, "digits")
    try:
        assert first is not None and second == first
        assert [run.id for run in workspace.store.list_runs(kind="train")] == [first]
    finally:
        fresh.cancel(first)
        fresh.wait(first, timeout=120)


def test_training_job_reports_per_model_progress(workspace):
    from probe_core.models import ModelSpec
    from probe_core.runs.training import TrainRequest, training_job

    manager = JobManager(workspace.store)
    specs = [ModelSpec(kind="classifier", epochs=2), ModelSpec(kind="vae", epochs=2, latent_dim=2)]
    request = TrainRequest("digits", tuple(dataclasses.asdict(spec) for spec in specs))
    first = manager.submit("train", {"x": 1}, training_job(workspace.registry, request), dedupe=True)
    assert manager.submit("train", {"x": 1}, training_job(workspace.registry, request), dedupe=True) == first
    run = manager.wait(first, timeout=120)
    assert run.status == "done", run.error
    models = run.details["models"]
    assert [m["status"] for m in models.values()] == ["done", "done"]
    assert all(m["epoch"] == m["epochs"] and m["fraction"] == 1.0 for m in models.values())  # each its own epochs
    assert all(workspace.registry.exists(model_id) for model_id in models)
