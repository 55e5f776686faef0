"""A command or job that needs a model the workspace lacks says what it trains and shows progress."""

from helpers import write_tiny_plugin

from probe_core.bayestrex.jobs import sampling_job
from probe_core.bayestrex.request import SampleRequest
from probe_core.cli import main
from probe_core.progress import CallbackReporter
from probe_core.runs.lifecycle import run_inline


def test_probe_sample_says_which_default_model_it_trains_with_a_progress_bar(tmp_path, capsys):
    plugin = str(write_tiny_plugin(tmp_path))
    code = main(["--workspace", str(tmp_path / "ws"), "--device", "cpu", "sample", "--target", "high:3",
                 "--generator", plugin, "--chains", "2", "--warmup", "2", "--samples", "2"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "digits-classifier-s" in err and "is not in the workspace yet: training it (classifier on digits" in err
    assert "epoch" in err  # the progress bar


def test_a_job_that_trains_a_missing_default_reports_it_in_its_run(workspace, tmp_path):
    plugin = str(write_tiny_plugin(tmp_path))
    messages = []
    job = sampling_job(workspace.registry, SampleRequest(dataset="digits", target="high:3",
                                                         class_names=tuple("0123456789"), generator=plugin, chains=2,
                                                         warmup=2, samples=2))
    run_id, _ = run_inline(workspace.store, "sample", {"target": "high:3"}, job,
                           listener=CallbackReporter(lambda progress, message, details: messages.append(message)))
    trained = [m for m in messages if m and m.startswith("training digits-classifier-s")]
    assert trained and "not in the workspace yet" in trained[0] and any("epoch" in m for m in trained), messages
    assert workspace.store.get_run(run_id).status == "done"
