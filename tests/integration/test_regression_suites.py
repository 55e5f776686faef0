"""Regression suites on digits: a labelled Defuse region and a Bayes-TrEx finding, scored on the flawed
classifier and on its Defuse correction, from the API and the CLI (the gate's exit status)."""

from __future__ import annotations

import json

import pytest
from helpers import write_tiny_plugin

from probe_core import suites
from probe_core.cli import main
from probe_core.defuse.labels import cluster_label_table
from probe_core.errors import ProbeError


def test_the_suite_scores_the_original_low_and_the_corrected_high_on_the_region(trained_workspace, regression_suite):
    store = trained_workspace.store
    matrix = suites.suite_matrix(store, regression_suite["suite"])
    original, corrected = regression_suite["original"], regression_suite["corrected"]
    assert {original, corrected} <= set(matrix["classifiers"])
    region = matrix["cells"][(regression_suite["region"], original)], matrix["cells"][(regression_suite["region"], corrected)]
    assert region[0]["accuracy"] < 0.5 < region[1]["accuracy"] and region[1]["accuracy"] > region[0]["accuracy"] + 0.4
    assert region[0]["wrong_confidence"] > 0.5  # the flawed classifier is sure of its wrong answer
    check = store.get_suite_check(regression_suite["region"])
    assert check["kind"] == suites.REGION and check["found_on"] == original
    data = check["data"]  # the evidence itself: the check outlives its run and its generator
    assert data["images"].shape == (suites.REGION_SAMPLES, 1, 8, 8) and data["latents"].shape[0] == suites.REGION_SAMPLES
    assert set(suites.label_names(check)) == {"9"}
    finding = store.get_suite_check(regression_suite["finding"])
    assert finding["kind"] == suites.FINDING and finding["evidence"]["run"] == regression_suite["sample_run"]
    assert len(finding["data"]["labels"]) == 5 and finding["evidence"]["targets"] == ["high confidence in 4"]
    assert (regression_suite["finding"], corrected) in matrix["cells"]


def test_scoring_needs_no_generator_and_checks_the_classes(trained_workspace, regression_suite, monkeypatch, tmp_path):
    registry, store = trained_workspace.registry, trained_workspace.store
    resolve = registry.resolve

    def classifiers_only(reference, kind, *args, **kwargs):
        if kind != "classifier":
            raise AssertionError(f"scoring loaded a {kind}")
        return resolve(reference, kind, *args, **kwargs)

    monkeypatch.setattr(registry, "resolve", classifiers_only)
    score = suites.score_suite(registry, store, regression_suite["suite"], "default")
    assert {row["id"] for row in score.checks} >= {regression_suite["region"], regression_suite["finding"]}
    assert all(0.0 <= row["accuracy"] <= 1.0 and row["found_on_accuracy"] is not None for row in score.checks)
    plugin = write_tiny_plugin(tmp_path)  # a plugin classifier is scored like any other
    assert suites.score_suite(registry, store, regression_suite["suite"], str(plugin)).classifier.startswith("plugin:")
    with pytest.raises(ProbeError, match="no suite 'nope'"):
        suites.score_suite(registry, store, "nope", "default")
    # a check about other classes (a novel-class finding on a class-subset classifier) is skipped, not failed
    region = store.get_suite_check(regression_suite["region"])
    mixed = f"mixed-{tmp_path.parent.name}"
    for classes in ([str(c) for c in range(10)], ["0", "1", "3", "6", "9"]):
        store.add_suite_check(mixed, "digits", kind=suites.FINDING, name=f"{len(classes)} classes",
                              found_on=regression_suite["original"], evidence={"class_names": classes},
                              arrays={**region["data"], "labels": region["data"]["labels"] * 0})
    score = suites.score_suite(registry, store, mixed, "default")
    assert [row["name"] for row in score.checks] == ["10 classes"]
    assert [row["name"] for row in score.skipped] == ["5 classes"]


def test_the_cli_gate_fails_the_original_and_passes_the_corrected(trained_workspace, regression_suite, tmp_path, capsys):
    root, suite = str(trained_workspace.root), regression_suite["suite"]
    gate = ["--workspace", root, "suite", "score", "--suite", suite, "--min-accuracy", "0.7"]
    assert main([*gate, "--classifier", regression_suite["original"], "--out", str(tmp_path / "original.json")]) == 1
    failed = json.loads((tmp_path / "original.json").read_text())
    assert not failed["passed"] and regression_suite["region"] in {r["id"] for r in failed["regressions"]}
    assert "regressed: check" in capsys.readouterr().err
    from probe_core.runs.runconfig import config_of

    # scored through the one lifecycle, as the pages' Score buttons are: a run holding the typed request
    store = trained_workspace.store
    assert config_of(store.list_runs(kind=suites.SCORE_KIND, limit=1)[0]) == suites.ScoreRequest(
        suite, regression_suite["original"])
    runs_before = len(store.list_runs(kind=suites.SCORE_KIND, limit=1000))
    assert main([*gate, "--classifier", "no-such-model"]) == 2  # refused before a run is stored
    assert "no-such-model" in capsys.readouterr().err
    assert len(store.list_runs(kind=suites.SCORE_KIND, limit=1000)) == runs_before
    assert main([*gate, "--classifier", regression_suite["corrected"], "--out", str(tmp_path / "corrected.json")]) == 0
    passed = json.loads((tmp_path / "corrected.json").read_text())
    assert passed["passed"] and passed["regressions"] == [] and passed["classifier"] == regression_suite["corrected"]
    # against the production model: the corrected one must not lose more than 5 points on any check
    assert main([*gate, "--classifier", regression_suite["corrected"], "--against", regression_suite["original"],
                 "--max-drop", "0.05"]) == 0
    assert main([*gate[:-2], "--min-accuracy", "1.5", "--classifier", "default"]) == 2
    assert "fraction in [0, 1]" in capsys.readouterr().err


def test_the_cli_adds_findings_shows_reports_and_retires(trained_workspace, regression_suite, tmp_path, capsys):
    root, store = str(trained_workspace.root), trained_workspace.store
    labelled = [s["id"] for s in suites.labelled_samples(store, regression_suite["sample_run"])]
    cli, suite = ["--workspace", root, "suite"], f"cli-{tmp_path.parent.name}"
    assert main([*cli, "add", "--suite", suite, "--run", str(regression_suite["sample_run"]),
                 "--sample", str(labelled[0]), "--sample", str(labelled[1]), "--name", "two fours"]) == 0
    assert f"added to {suite}: two fours (2 images" in capsys.readouterr().out
    assert main([*cli, "add", "--suite", suite, "--defuse-run", str(store.get_suite_check(
        regression_suite["region"], False)["evidence"]["distill_run"]), "--cluster",
        str(store.get_suite_check(regression_suite["region"], False)["evidence"]["cluster_id"]),
        "--label-source", regression_suite["label_source"]]) == 0
    assert store.get_suite(suite)["version"] == 2
    before = store.get_suite(suite)
    # bad input: one line, exit 2, nothing stored changes
    for bad in (["add", "--suite", suite, "--run", "99999"],
                ["add", "--suite", suite, "--defuse-run", "1", "--run", "2"],
                ["add", "--suite", suite, "--run", str(regression_suite["sample_run"]), "--sample", "123456789"],
                ["add", "--suite", suite, "--defuse-run", str(store.get_suite_check(regression_suite["region"], False)
                                                              ["evidence"]["distill_run"]), "--cluster", "123456789"],
                ["add", "--suite", suite, "--defuse-run", str(store.get_suite_check(regression_suite["region"], False)
                                                              ["evidence"]["distill_run"]), "--all-regions",
                 "--label-source", "nobody"],  # no region has this source's labels
                ["score", "--suite", "nope", "--classifier", "default"],
                ["retire", "--suite", suite, "--check", "123456789"]):
        assert main([*cli, *bad]) == 2, bad
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1, err
    region = store.get_suite_check(regression_suite["region"], False)["evidence"]
    with pytest.raises(ProbeError, match="cluster 123456789 is not in"):  # every cluster checked before storing
        suites.add_region_checks(trained_workspace.registry, store, suite, region["distill_run"],
                                 [region["cluster_id"], 123456789], source=regression_suite["label_source"])
    assert store.get_suite(suite) == before
    distill_run = region["distill_run"]  # --all-regions: one check per labelled failure region, named by none
    usable = [row["id"] for row in cluster_label_table(store, distill_run, tuple(map(str, range(10))),
                                                       regression_suite["label_source"]) if row["usable"]]
    assert main([*cli, "add", "--suite", f"all-{suite}", "--defuse-run", str(distill_run), "--all-regions",
                 "--label-source", regression_suite["label_source"]]) == 0
    assert capsys.readouterr().out.count(f"added to all-{suite}") == len(usable) >= 1
    assert sorted(c["evidence"]["cluster_id"] for c in store.get_suite_checks(f"all-{suite}", with_data=False)) \
        == sorted(usable)
    assert main([*cli, "show", "--suite", suite]) == 0
    assert "two fours" in capsys.readouterr().out
    assert main([*cli, "report", "--suite", regression_suite["suite"], "--out", str(tmp_path / "suite.html")]) == 0
    page = (tmp_path / "suite.html").read_text()
    assert page.count("data:image/png;base64,") >= 2 and "http" not in page.replace("http-equiv", "")
    assert regression_suite["original"] in page and regression_suite["corrected"] in page
    first = store.get_suite_checks(suite, with_data=False)[0]["id"]
    assert main([*cli, "retire", "--suite", suite, "--check", str(first)]) == 0
    assert [c["id"] for c in store.get_suite_checks(suite, with_data=False)] != [first]
    assert store.get_suite(suite)["version"] == 3
    assert main([*cli, "list"]) == 0 and suite in capsys.readouterr().out
