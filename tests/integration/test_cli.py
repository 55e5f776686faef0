import json

from helpers import probe_here

from probe_core.cli import main


def test_data_commands(capsys, tmp_path):
    assert main(["--workspace", str(tmp_path), "data", "list"]) == 0
    out = capsys.readouterr().out
    assert "digits" in out and "ready (embedded)" in out and "fashion-mnist" in out
    assert main(["data", "info", "digits[drop=5]"]) == 0
    out = capsys.readouterr().out
    assert "classes (9)" in out and "train: " in out


def test_errors_are_one_line_with_nonzero_exit(tmp_path, monkeypatch):
    monkeypatch.delenv("PROBE_DATA_DIR", raising=False)
    result = probe_here(["--workspace", str(tmp_path), "data", "info", "mnist"])
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "Traceback" not in result.stderr
    assert "PROBE_DATA_DIR" in result.stderr
    result = probe_here(["--workspace", str(tmp_path), "models", "train", "--kind", "vae", "--ambiguous"])
    assert result.returncode == 2 and result.stderr.startswith("error: --ambiguous applies to classifiers only")


def test_models_train_and_list(capsys, tmp_path):
    args = ["--workspace", str(tmp_path), "--device", "cpu"]
    assert main(args + ["models", "train", "--kind", "classifier", "--exclude", "5", "--epochs", "2"]) == 0
    first = capsys.readouterr().out
    assert ": trained; test acc" in first
    assert main(args + ["models", "train", "--kind", "classifier", "--exclude", "5", "--epochs", "2"]) == 0
    assert "already trained" in capsys.readouterr().out
    assert main(args + ["models", "list", "--json"]) == 0
    [model] = json.loads(capsys.readouterr().out)
    assert model["spec"]["classes"] == [0, 1, 2, 3, 4, 6, 7, 8, 9]
    assert model["metrics"]["test_accuracy"] > 0.5


def test_independence_jumps_are_a_sampler_option_the_run_records(trained_workspace, tmp_path, capsys):
    out = tmp_path / "result.json"
    assert main(["--workspace", str(trained_workspace.root), "sample", "--target", "high:2", "--chains", "32",
                 "--warmup", "40", "--samples", "10", "--independence-moves", "2", "--out", str(out)]) == 0
    [target] = json.loads(out.read_text())["targets"]
    assert target["summary"]["kept"] == 32 * 10 and target["summary"]["hits"] > 0
    assert 0.05 < target["independence_acceptance"] <= 1  # digits, high: the fitted mixture is accepted often
    run = trained_workspace.store.list_runs(kind="sample", limit=1)[0]
    assert run.config["independence_moves"] == 2 and run.config["target"] == "high:2"


def test_chain_starts_are_a_sampler_option_and_class_starts_need_a_generator_with_class_components(
        trained_workspace, capsys):
    root = str(trained_workspace.root)
    before = len(trained_workspace.store.list_runs(kind="sample", limit=1000))
    assert main(["--workspace", root, "sample", "--target", "high:2", "--init", "classes"]) == 2
    assert "class components" in capsys.readouterr().err  # the digits VAE's prior is N(0, I): refused, nothing stored
    assert len(trained_workspace.store.list_runs(kind="sample", limit=1000)) == before
    assert main(["--workspace", root, "sample", "--target", "high:2", "--chains", "2", "--warmup", "2",
                 "--samples", "2", "--init", "prior"]) == 0
    assert trained_workspace.store.list_runs(kind="sample", limit=1)[0].config["init"] == "prior"


def test_sample_command_writes_result_json(trained_workspace, tmp_path, capsys):
    out = tmp_path / "result.json"
    code = main(["--workspace", str(trained_workspace.root), "sample", "--target", "high:7", "--chains", "4",
                 "--warmup", "40", "--samples", "20", "--out", str(out), "--npz", str(tmp_path / "s.npz")])
    assert code == 0
    printed = capsys.readouterr().out
    assert "high:7" in printed and "1/1 targets reached" in printed
    result = json.loads(out.read_text())
    assert {"dataset", "classifier", "generator", "sampler", "seed", "wall_seconds", "targets"} <= set(result)
    [target] = result["targets"]
    assert target["spec"] == "high:7" and len(target["samples"]) == 4 * 20
    assert len(target["samples"][0]["confidences"]) == 10
    import numpy as np

    assert np.load(tmp_path / "s.npz")["z"].shape == (80, 8)
    # the map of the hits among prior draws (Bayes-Probe Fig. 5) as the page starts it: a job (here on the
    # tests-only thread executor, which builds it from its JobSpec as a worker does), then the HTML report
    from probe_core.bayestrex.latent_map import LATENT_MAP, submit_latent_map
    from probe_core.runs.jobs import JobManager
    from probe_core.runs.launchers import ThreadLauncher

    run_id = trained_workspace.store.list_runs(kind="sample", limit=1)[0].id
    manager = JobManager(trained_workspace.store, ThreadLauncher())
    job = manager.wait(submit_latent_map(manager, trained_workspace.registry, run_id), timeout=180)
    assert (job.kind, job.status, job.result["run"]) == (LATENT_MAP, "done", run_id), job.error
    report = tmp_path / "report.html"
    assert main(["--workspace", str(trained_workspace.root), "report", "--run", str(run_id), "--out", str(report),
                 "--latent-map"]) == 0
    mapped = trained_workspace.store.get_arrays(run_id, "latent-map")
    hits = sum(s["hit"] for s in trained_workspace.store.get_samples(run_id))
    assert mapped["prior_xy"].shape == (1000, 2) and len(mapped["hits_xy"]) == min(hits, 2000) > 0
    text = report.read_text()
    assert "<svg" in text and "prior draws (1000)" in text and "hits: high confidence in 7" in text
    assert main(["--workspace", str(trained_workspace.root), "report", "--run", "99999", "--out", str(report)]) == 2
    assert main(["--workspace", str(trained_workspace.root), "sample", "--target", "probs:1=0.5"]) == 2
    assert "sum to 1" in capsys.readouterr().err


def test_recipes_and_labels(trained_workspace, tmp_path, capsys):
    base = ["--workspace", str(trained_workspace.root)]
    short = ["--chains", "4", "--warmup", "30", "--samples", "10"]
    assert main(base + ["recipe", "misclassification", "--exclude", "5"] + short + ["--out", str(tmp_path / "m.json")]) == 0
    result = json.loads((tmp_path / "m.json").read_text())
    assert result["use_case"]["excluded_class"] == "5"
    from probe_core.bayestrex.request import SampleRequest
    from probe_core.runs.runconfig import config_of

    # a use case runs as the same typed request as `probe sample` and the Probe page
    request = config_of(trained_workspace.store.list_runs(kind="sample", limit=1)[0])
    assert isinstance(request, SampleRequest) and (request.target.text, request.chains) == ("high:5", 4)
    assert (request.classifier, request.generator) == (result["classifier"], result["generator"])
    generator = trained_workspace.registry.load(result["generator"])  # the paper's GAN, trained without the 5s
    assert generator.record["spec"]["kind"] == "gan" and generator.record["spec"]["classes"] == [0, 1, 2, 3, 4, 6, 7,
                                                                                                 8, 9]
    [entry] = result["targets"]
    assert entry["spec"] == "high:5" and {"achieved", "hits", "chains_with_hits", "ess_min"} <= set(entry["summary"])
    assert entry["test_set_baseline"]["meeting_target"] > 0  # real 5s do meet it
    assert main(base + ["recipe", "misclassification"] + short) == 2
    assert "needs --exclude" in capsys.readouterr().err
    default_gan = trained_workspace.registry.default_id("digits", "gan")
    assert main(base + ["recipe", "misclassification", "--exclude", "5", "--generator", default_gan] + short) == 2
    assert "must keep from it" in capsys.readouterr().err  # --generator is honoured, and a wrong one refused
    assert main(base + ["recipe", "novel-class", "--classifier", "default"] + short) == 2
    assert "trains the classifier it needs" in capsys.readouterr().err
    run = trained_workspace.store.list_runs(kind="sample", limit=1)[0]
    sample_id = trained_workspace.store.get_samples(run.id, limit=1)[0]["id"]
    assert main(base + ["label", "sample", str(sample_id), "--annotator", "bo", "--label", "5", "--failure"]) == 0
    [label] = trained_workspace.store.get_labels(sample_id=sample_id)
    assert (label["annotator"], label["label"], label["is_failure"]) == ("bo", "5", True)
    # a test image's verdict (the misclassification test-set baseline), stored like other labels
    assert main(base + ["label", "test-image", "12", "--annotator", "bo", "--label", "mislabel"]) == 0
    assert [v["label"] for v in trained_workspace.store.get_test_image_labels("digits", 12)] == ["mislabel"]
    assert main(base + ["label", "test-image", "12", "--annotator", "bo", "--label", "8"]) == 2
    assert "mislabel or misclassification" in capsys.readouterr().err
    assert main(base + ["label", "test-image", "99999", "--annotator", "bo", "--label", "mislabel"]) == 2
    assert [v["label"] for v in trained_workspace.store.get_test_image_labels("digits", 12)] == ["mislabel"]
