"""Defuse on real (small) digits models: identification, distillation, labels, correction, CLI."""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import threading

import numpy as np
import pytest
import torch
from helpers import MISLABELLED, recording

from probe_core.catalog import load_dataset
from probe_core.defuse import identify_step
from probe_core.defuse import labels as label_tools
from probe_core.defuse import queries
from probe_core.defuse import review as defuse_review
from probe_core.defuse import steps
from probe_core.defuse.cluster import (
    REAL_SIZE_REVIEW_TAU,
    REVIEW_TAU,
    decode_and_classify,
    review_tau,
    sample_cluster_latents,
)
from probe_core.defuse.identification import FailureSet, identify_failures
from probe_core.errors import CancelledError, ProbeError
from probe_core.reporting.embedding import embed_2d
from probe_core.runs.requests import record

# --- identification ---------------------------------------------------------------------------



def _models(workspace):
    registry = workspace.registry
    return registry.resolve("default", "classifier", "digits"), registry.resolve("default", "generator", "digits")


def test_identification_keeps_only_misclassified_decodings_smallest_noise_first(trained_workspace):
    classifier, vae = _models(trained_workspace)
    dataset = load_dataset("digits")
    images, labels = dataset.train_images[:120], dataset.train_labels[:120]
    common = {"samples_per_image": 100, "noise_scale": 0.5, "seed": 3}
    everything = identify_failures(classifier.module, vae.module, images, labels, max_per_image=100, **common)
    smallest = identify_failures(classifier.module, vae.module, images, labels, max_per_image=1, **common)
    assert len(everything) > 50
    assert (everything.predictions != everything.true_labels).all()
    assert (everything.true_labels == labels[everything.source_index].numpy()).all()
    assert everything.images.dtype == np.uint8 and everything.images.shape[1:] == tuple(images.shape[1:])
    # the decodings really are what the classifier got wrong
    decoded = vae.module.decode(torch.from_numpy(everything.latents[:200]))
    assert (classifier.module(decoded).argmax(1).numpy() == everything.predictions[:200]).all()
    # M = 1 keeps, per image, exactly the failure with the smallest perturbation
    assert len(smallest) == len(np.unique(everything.source_index))
    for index, norm in zip(smallest.source_index, smallest.noise_norms):
        assert norm == pytest.approx(everything.noise_norms[everything.source_index == index].min())


class _UniformJudge(torch.nn.Module):
    """A judge that is sure of nothing: 1/K for each of K classes."""

    def __init__(self, classes: int) -> None:
        super().__init__()
        self.classes = classes

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return torch.full((len(images), self.classes), 1.0 / self.classes)


def test_a_judge_keeps_only_failures_whose_decoding_it_still_sees_as_the_source_class(trained_workspace):
    classifier, vae = _models(trained_workspace)
    dataset = load_dataset("digits")
    images, labels = dataset.train_images[:100], dataset.train_labels[:100]
    common = {"samples_per_image": 60, "noise_scale": 0.5, "seed": 5}
    unjudged = identify_failures(classifier.module, vae.module, images, labels, **common)
    assert len(unjudged) > 50
    uniform = _UniformJudge(dataset.num_classes)
    # a judge sure of nothing confirms no failure at 0.5, and every one when asked for no more than its 1/K
    assert len(identify_failures(classifier.module, vae.module, images, labels, judge=uniform, judge_sure=0.5,
                                 **common)) == 0
    lenient = identify_failures(classifier.module, vae.module, images, labels, judge=uniform, judge_sure=0.1, **common)
    assert np.array_equal(lenient.latents, unjudged.latents)
    # a real judge: every kept failure is still misclassified and its source class is at least judge_sure in the
    # judge's eyes (here the classifier itself with its own argmax elsewhere, so the source class below 1/2)
    judged = identify_failures(classifier.module, vae.module, images, labels, judge=classifier.module,
                               judge_sure=0.2, **common)
    assert 0 < len(judged) < len(unjudged)
    probabilities = classifier.module(vae.module.decode(torch.from_numpy(judged.latents))).detach().numpy()
    source = probabilities[np.arange(len(judged)), judged.true_labels]
    assert (source >= 0.2 - 1e-5).all() and (probabilities.argmax(1) != judged.true_labels).all()
    with pytest.raises(ProbeError, match="judge_sure"):
        identify_failures(classifier.module, vae.module, images, labels, judge=uniform, judge_sure=0.0, **common)


def test_an_identification_judge_must_be_another_classifier_and_the_run_records_it(trained_workspace, flawed_run,
                                                                                 capsys):
    from probe_core.cli import main

    registry, store = trained_workspace.registry, trained_workspace.store
    runs_before = len(store.list_runs())
    with pytest.raises(ProbeError, match="other than the probed one"):
        steps.IdentifyRequest.build(registry, dataset=MISLABELLED, classifier=flawed_run["classifier"],
                                    judge=flawed_run["classifier"])
    with pytest.raises(ProbeError, match="judge sure"):
        steps.IdentifyRequest.build(registry, dataset=MISLABELLED, classifier=flawed_run["classifier"],
                                    judge="default", judge_sure=1.5)
    root = ["--workspace", str(trained_workspace.root), "defuse", "identify", "--dataset", MISLABELLED]
    assert main([*root, "--classifier", flawed_run["classifier"], "--judge", flawed_run["classifier"]]) == 2
    error = capsys.readouterr().err
    assert "other than the probed one" in error and error.count("\n") == 1
    assert len(store.list_runs()) == runs_before  # refused before anything is stored
    # a class map is applied by the build, as a sample request's is: the stored reference carries it
    mapped = steps.IdentifyRequest.build(registry, dataset=MISLABELLED, classifier=flawed_run["classifier"],
                                         class_map="9=9")
    assert mapped.classifier.endswith("#class_map=9=9")
    with pytest.raises(ProbeError, match="class"):
        steps.IdentifyRequest.build(registry, dataset=MISLABELLED, classifier=flawed_run["classifier"],
                                    class_map="nine=elephant")
    # the clean digits classifier judges the flawed one ("default" on the flawed data would be the flawed one)
    clean = registry.default_id("digits", "classifier")
    request = steps.IdentifyRequest.build(registry, dataset=MISLABELLED, classifier=flawed_run["classifier"],
                                          judge=clean, samples_per_image=50, max_images=150)
    assert request.judge == clean
    judge, vae = registry.resolve(clean, "classifier", "digits"), registry.resolve(request.vae, "generator",
                                                                                   MISLABELLED)
    for shards in (1, 2):  # in one piece, and in shards (the judge travels with the shards' models)
        run_id, identified = steps.run_step(registry, store, dataclasses.replace(request, shards=shards))
        assert identified.judge == clean and identified.judge_sure == pytest.approx(0.9)
        found = FailureSet.from_store(store, run_id)
        with torch.no_grad():
            probabilities = judge.module(vae.module.decode(torch.from_numpy(found.latents))).numpy()
        assert len(found) > 0 and (probabilities[np.arange(len(found)), found.true_labels] >= 0.9 - 1e-5).all()


def test_a_sampling_judge_is_another_classifier_and_the_run_records_what_it_saw(trained_workspace, flawed_run,
                                                                                 capsys):
    import probe_core.api as mp
    from probe_core.bayestrex.request import SampleRequest
    from probe_core.cli import main

    registry, store = trained_workspace.registry, trained_workspace.store
    runs_before = len(store.list_runs())
    with pytest.raises(ProbeError, match="other than the probed one"):
        SampleRequest.build(registry, dataset=MISLABELLED, target="high:9", classifier=flawed_run["classifier"],
                            judge=flawed_run["classifier"])
    root = ["--workspace", str(trained_workspace.root), "sample", "--dataset", MISLABELLED, "--target", "high:9"]
    assert main([*root, "--classifier", flawed_run["classifier"], "--judge", flawed_run["classifier"]]) == 2
    error = capsys.readouterr().err
    assert "other than the probed one" in error and error.count("\n") == 1
    assert len(store.list_runs()) == runs_before  # refused before anything is stored
    clean = registry.default_id("digits", "classifier")
    result = mp.sample("high:9;high:8", flawed_run["classifier"], dataset=MISLABELLED, workspace=trained_workspace,
                       judge=clean, chains=8, warmup=80, samples=30, progress=False)
    assert result.request.judge == clean
    for target in result.targets:  # what the judge saw of each target's hits, counted from the stored samples
        judged = target["judge_agreement"]
        assert judged["judged"] == target["summary"]["hits"] and 0 <= judged["agreed"] <= judged["judged"]
        assert judged["flagged"] == (judged["share"] is not None and judged["share"] < 0.5)
    # a line for each flagged target; none for the judge itself, trained on the clean labels, not the flawed view's
    flagged = [target["spec"] for target in result.targets if target["judge_agreement"]["flagged"]]
    assert len(result.judge_warnings) == len(flagged)
    assert all(line.startswith(f"{spec}: the judge {clean} puts only") for line, spec in zip(result.judge_warnings,
                                                                                          flagged))


def test_identification_streams_failures_and_a_cancelled_run_keeps_them(trained_workspace):
    from probe_core.runs.lifecycle import run_inline

    store = trained_workspace.store
    settings = steps.IdentifyRequest(samples_per_image=100, noise_scale=0.5, max_images=200)
    job = identify_step.identify_job(trained_workspace.registry, settings)
    reports = []

    stop_after_two_batches = recording(reports, lambda report: report.progress and report.progress >= 32 / 200)
    with pytest.raises(CancelledError):
        run_inline(store, queries.IDENTIFY, record(settings), job, stop_after_two_batches)
    run = store.list_runs(kind=queries.IDENTIFY)[0]
    assert run.status == "cancelled"
    kept = FailureSet.from_store(store, run.id)
    assert len(kept) > 0 and kept.source_index.max() < 48


# --- distillation -----------------------------------------------------------------------------





# --- the whole loop on a classifier with a planted flaw ----------------------------------------

def test_distillation_keeps_a_cluster_the_classifier_gets_mostly_wrong(trained_workspace, flawed_run):
    store = trained_workspace.store
    assert flawed_run["identified"].failures > 1000
    assert flawed_run["identified"].vae == trained_workspace.registry.default_id("digits", "vae")
    # the request left the noise open: the data's (centred below 32x32) was used, and the result says which
    assert flawed_run["identified"].noise == {"noise": "centered", "a": 50.0, "b": 50.0, "noise_scale": 0.15}
    clusters = store.get_clusters(flawed_run["distill_run"])
    assert len(clusters) == flawed_run["distilled"].clusters >= 5
    assert all(c["weight"] > 0.01 for c in clusters)
    assignments = queries.assignments_of(store, flawed_run["distill_run"])
    assert len(assignments) == flawed_run["identified"].failures
    assert sum(c["size"] for c in clusters) == int((assignments >= 0).sum())
    # the planted flaw: a cluster of 9s called 8, whose review samples are still mostly called 8 (the
    # clusters' order and number vary with the trained models, so the best of them is checked)
    dataset, classifier, vae = queries.load_run_models(trained_workspace.registry, store, flawed_run["distill_run"])
    nine_as_eight = [c for c in clusters if c["info"]["majority_prediction"] == 8
                     and c["info"]["majority_true_label"] == 9]
    assert nine_as_eight
    shares = [float((defuse_review.review_samples(vae, classifier, cluster, count=50, tau=0.5)["probs"].argmax(1) == 8)
                    .float().mean()) for cluster in nine_as_eight]
    assert max(shares) > 0.5, shares


def test_review_samples_spread_over_a_clusters_looks_where_plain_draws_repeat_one(trained_workspace, flawed_run):
    """Ten plain draws of a tight cluster's Gaussian are near copies; the review samples are picked to differ
    (measured on the digits run: 1.7x as far from their nearest other image on average, every cluster 1.35x)."""
    store = trained_workspace.store
    _, classifier, vae = queries.load_run_models(trained_workspace.registry, store, flawed_run["distill_run"])
    tau = queries.distill_tau(store, flawed_run["distill_run"])

    def nearest_other(images: torch.Tensor) -> float:
        """The mean pixel distance from each image to its nearest other image (0: a copy of another)."""
        distances = torch.cdist(images.flatten(1), images.flatten(1)).fill_diagonal_(float("inf"))
        return float(distances.min(1).values.mean())

    picked, plain = [], []
    for cluster in store.get_clusters(flawed_run["distill_run"]):
        picked.append(nearest_other(defuse_review.review_samples(vae, classifier, cluster, 10, tau)["images"]))
        rng = np.random.default_rng([0, int(cluster["id"])])
        latents = sample_cluster_latents(cluster["mean"], cluster["covariance"], 10, tau, rng)
        plain.append(nearest_other(decode_and_classify(vae.module, classifier.module, latents)[0]))
    assert np.mean(picked) > 1.3 * np.mean(plain) and np.mean(np.greater(picked, plain)) > 0.8, (picked, plain)


def test_oracle_labels_finetuning_fixes_the_regions_and_registers_a_new_model(trained_workspace, flawed_run, tmp_path):
    registry, store = trained_workspace.registry, trained_workspace.store
    distill_run = flawed_run["distill_run"]
    names = tuple(str(c) for c in range(10))
    human_view = label_tools.cluster_label_table(store, distill_run, names)
    source, written = defuse_review.auto_label(registry, store, distill_run, "default")
    assert source == label_tools.oracle_source(registry.default_id("digits", "classifier"))
    assert any(w["is_failure"] and w["label"] == "9" for w in written)
    assert all(w["labelled_per"] == "image" and w["images_labelled"] == label_tools.REVIEW_IMAGES for w in written)
    assert label_tools.cluster_label_table(store, distill_run, names) == human_view  # oracle labels stay apart
    # Model Probe's earlier selection rule (it looks at failure-region validation samples); the paper's is below
    run_id, result = steps.run_step(registry, store, steps.CorrectRequest(
        distill_run=distill_run, source=source, lambdas=(0.01, 1.0, 10.0), samples_per_region=128,
        selection="data-and-failures"))
    assert result.selection["rule"] == "data-and-failures"
    assert all(entry["score"] == pytest.approx((entry["validation_accuracy"] + entry["failure_validation_accuracy"]) / 2)
               for entry in result.sweep)
    # the paper's baseline: the individually labelled failures, each with its own label
    individually = queries.labelled_review_failures(store, distill_run, names, source)
    assert result.results["baseline"]["kind"] == "labelled-images"
    assert result.baseline_failures == len(individually["labels"]) > 0
    assert (individually["labels"] != individually["predictions"]).all()
    before, after = result.results["before"], result.results["defuse"]
    assert before["failure_accuracy"] < 0.5
    assert after["failure_accuracy"] > before["failure_accuracy"] + 0.3
    assert after["test_accuracy"] >= before["test_accuracy"] - 0.01
    assert result.results["baseline"]["failure_accuracy"] > before["failure_accuracy"]  # the paper's baseline helps too
    assert len(result.sweep) == 3 and len(result.baseline_sweep) == 3
    corrected = registry.load(result.corrected_model)
    assert registry.exists(flawed_run["classifier"])
    assert corrected.record["spec"]["parent"] == flawed_run["classifier"]
    dataset = load_dataset(MISLABELLED)
    accuracy = (corrected.module(dataset.test_images).argmax(1) == dataset.test_labels).float().mean()
    assert float(accuracy) == pytest.approx(after["test_accuracy"])
    summary = queries.report(store, distill_run, dataset.class_names, source, correct_run=run_id)
    assert summary["results"]["defuse"]["failure_accuracy"] == after["failure_accuracy"]
    assert summary["corrected_model"] == result.corrected_model
    # exports: every label as CSV, the labelled failures with their cluster's class as .npz
    all_labels = sum(len(store.get_labels(cluster_id=c["id"])) for c in store.get_clusters(distill_run))
    assert label_tools.export_labels_csv(store, distill_run, tmp_path / "labels.csv") == all_labels
    rows = list(csv.DictReader(open(tmp_path / "labels.csv")))
    assert len(rows) == all_labels
    assert sum(r["source"] == source for r in rows) == len(written) * label_tools.REVIEW_IMAGES
    chosen = queries.labelled_failure_set(store, distill_run, dataset.class_names, source)
    assert len(chosen["labels"]) > 0 and (chosen["labels"] == 9).mean() > 0.5
    assert chosen["images"].shape[0] == chosen["latents"].shape[0] == len(chosen["labels"])


def test_paper_selection_and_the_cluster_label_baseline(trained_workspace, flawed_run):
    registry, store = trained_workspace.registry, trained_workspace.store
    source, _ = defuse_review.auto_label(registry, store, flawed_run["distill_run"], "default")
    _, result = steps.run_step(registry, store, steps.CorrectRequest(
        distill_run=flawed_run["distill_run"], source=source, lambdas=(0.1, 1.0), epochs=1, samples_per_region=32,
        baseline="cluster-labels", steps_per_epoch=5))
    assert result.selection["rule"] == "data"  # the paper's: accuracy on the original data alone
    assert result.steps_per_epoch == 5 and "2 λ (0.1, 1), 1 epochs of 5 batches of D" in result.budget
    assert all(entry["score"] == entry["validation_accuracy"] for entry in result.sweep + result.baseline_sweep)
    assert result.results["defuse"]["score"] == max(entry["score"] for entry in result.sweep)
    names = tuple(str(c) for c in range(10))
    in_regions = queries.labelled_failure_set(store, flawed_run["distill_run"], names, source)
    assert result.results["baseline"]["kind"] == "cluster-labels"
    assert result.baseline_failures == len(in_regions["labels"])
    with pytest.raises(ProbeError, match="unknown baseline"):
        steps.CorrectRequest(distill_run=1, baseline="adversarial")


def test_correction_without_usable_labels_says_what_to_do(trained_workspace, flawed_run):
    # a label source nobody has used yet (other tests label this run as humans and as an oracle)
    with pytest.raises(ProbeError, match="label clusters first"):
        steps.run_step(trained_workspace.registry, trained_workspace.store,
                          steps.CorrectRequest(distill_run=flawed_run["distill_run"], source="oracle:nobody"))


def test_embedding_is_computed_once_and_cached(trained_workspace, flawed_run):
    registry, store = trained_workspace.registry, trained_workspace.store
    first = defuse_review.embedding(registry, store, flawed_run["distill_run"], max_fit=600, max_points=3000)
    assert first["failure_xy"].shape == (3000, 2) and first["train_xy"].shape[1] == 2
    assert set(np.unique(first["failure_cluster"])) <= set(range(-1, flawed_run["distilled"].clusters))
    again = defuse_review.embedding(registry, store, flawed_run["distill_run"])
    assert np.array_equal(first["failure_xy"], again["failure_xy"])


def test_a_distillation_without_a_tau_records_the_one_its_image_size_chose(trained_workspace, flawed_run):
    registry, store = trained_workspace.registry, trained_workspace.store
    run = store.get_run(flawed_run["distill_run"])  # 8x8 digits, no τ asked
    assert run.config["tau"] is None and run.result["tau"] == REVIEW_TAU == queries.distill_tau(store, run.id)
    assert review_tau((3, 32, 32)) == review_tau((3, 64, 64)) == REAL_SIZE_REVIEW_TAU < review_tau((1, 28, 28))
    given, result = steps.run_step(registry, store, steps.DistillRequest(
        identify_run=flawed_run["identify_run"], max_samples=300, tau=0.2))
    assert queries.distill_tau(store, given) == result.tau == 0.2


def test_a_projected_distillation_stores_regions_in_the_generators_own_code_space(trained_workspace, flawed_run):
    registry, store = trained_workspace.registry, trained_workspace.store
    paper = store.get_run(flawed_run["distill_run"])
    assert paper.result["projection_dim"] == 0 and paper.result["class_share"] == 0.0  # small codes: as the papers
    run_id, result = steps.run_step(registry, store, steps.DistillRequest(
        identify_run=flawed_run["identify_run"], max_samples=1000, projection_dim=3, class_share=0.5))
    assert (result.projection_dim, result.class_share) == (3, 0.5) and result.clusters >= 1
    code_size = queries.failures_of(store, flawed_run["identify_run"]).latents.shape[1]
    assert code_size > 3
    for cluster in store.get_clusters(run_id):
        assert cluster["mean"].shape == (code_size,) and cluster["covariance"].shape == (code_size, code_size)
        assert np.linalg.eigvalsh(cluster["covariance"].astype(np.float64)).min() > 0  # review samples can be drawn


def test_an_abstaining_oracle_says_none_exactly_where_it_is_less_sure_than_asked(trained_workspace, flawed_run):
    registry, store = trained_workspace.registry, trained_workspace.store
    # a distillation of its own: the shared run's oracle labels, which other tests read, stay as they are
    run_id, _ = steps.run_step(registry, store, steps.DistillRequest(identify_run=flawed_run["identify_run"],
                                                                      max_samples=300))
    _, classifier, vae = queries.load_run_models(registry, store, run_id)
    oracle = registry.resolve("default", "classifier", "digits")
    cluster = store.get_clusters(run_id)[0]
    shown = defuse_review.review_images(store, vae, classifier, cluster, queries.distill_tau(store, run_id))
    with torch.no_grad():
        confidence, answer = oracle.module(shown["images"]).max(1)
    threshold = float(confidence.median())  # about half the images are below it, whatever the seed
    source, _ = defuse_review.auto_label(registry, store, run_id, "default", abstain_below=threshold)
    given = {row["review_image_id"]: row["label"] for row in store.get_labels(source=source)}
    for image_id, sure, named in zip(shown["ids"], confidence.tolist(), answer.tolist()):
        assert given[image_id] == (str(named) if sure >= threshold else label_tools.NONE_OF_THE_ABOVE)
    with pytest.raises(ProbeError, match="abstention threshold must be a probability in"):
        defuse_review.auto_label(registry, store, run_id, "default", abstain_below=1.5)
    # the CLI's oracle abstains the same way; at the surest image's confidence it names only the surest
    from probe_core.cli import main

    highest = max(confidence.tolist())
    assert main(["--workspace", str(trained_workspace.root), "defuse", "label", "--run", str(run_id),
                 "--auto-label", "oracle:default", "--oracle-abstains-below", repr(highest)]) == 0
    given = {row["review_image_id"]: row["label"] for row in store.get_labels(source=source)}
    for image_id, sure, named in zip(shown["ids"], confidence.tolist(), answer.tolist()):
        assert given[image_id] == (str(named) if sure >= highest else label_tools.NONE_OF_THE_ABOVE)


# --- labels from several annotators -------------------------------------------------------------

def test_concurrent_annotators_label_images_and_the_paper_aggregation_follows(trained_workspace, flawed_run):
    store = trained_workspace.store
    distill_run = flawed_run["distill_run"]
    cluster = store.get_clusters(distill_run)[-1]
    names = tuple(str(c) for c in range(10))
    _, classifier, vae = queries.load_run_models(trained_workspace.registry, store, distill_run)
    shown = defuse_review.review_images(store, vae, classifier, cluster, queries.distill_tau(store, distill_run))
    assert len(shown["ids"]) == label_tools.REVIEW_IMAGES
    again = defuse_review.review_images(store, vae, classifier, cluster, 0.9)  # stored: the same images, whatever τ
    assert again["ids"] == shown["ids"] and np.array_equal(again["latents"], shown["latents"])
    predicted = [names[p] for p in shown["predictions"]]
    # three annotators call every image a 9; two agree with the classifier on every image
    calls = {"ann": ["9"] * 10, "bea": ["9"] * 10, "cy": ["9"] * 10, "dee": predicted, "eve": predicted}

    def annotate(who: str) -> None:
        for image_id, label in zip(shown["ids"], calls[who]):
            label_tools.label_images(store, [image_id], who, label, names)

    threads = [threading.Thread(target=annotate, args=(who,)) for who in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    def row():
        return next(r for r in label_tools.cluster_label_table(store, distill_run, names) if r["id"] == cluster["id"])

    not_nine = sum(p != "9" for p in predicted)
    first = row()
    assert first["annotators"] == 5 and first["images_labelled"] == first["images_decided"] == 10
    assert first["images_disagreeing"] == not_nine and first["label"] == "9"
    assert first["is_failure"] is (not_nine / 10 > 0.5)
    expected_agreement = [1.0 if p == "9" else 0.6 for p in predicted]
    assert first["agreement"] == pytest.approx(np.mean(expected_agreement))
    # one annotator changing their mind replaces their labels: the classifier's calls now win every image
    label_tools.label_images(store, shown["ids"], "cy", "none", names)
    label_tools.label_images(store, shown["ids"], "cy", predicted[0], names)  # the fast path: all ten at once
    for image_id, label in zip(shown["ids"], predicted):
        label_tools.label_images(store, [image_id], "cy", label, names)
    second = row()
    assert second["annotators"] == 5 and second["images_disagreeing"] == 0
    assert second["is_failure"] is False and second["usable"] is False
    assert len(store.get_labels(cluster_id=cluster["id"], source=label_tools.HUMAN, per_image=True)) == 50


# --- CLI --------------------------------------------------------------------------------------

def test_cli_defuse_run_end_to_end_writes_the_summary(trained_workspace, flawed_run, tmp_path, capsys):
    from probe_core.cli import main

    out = tmp_path / "run.json"
    code = main(["--workspace", str(trained_workspace.root), "defuse", "run", "--dataset", MISLABELLED,
                 "--classifier", flawed_run["classifier"], "--samples-per-image", "60", "--max-images", "600",
                 "--max-samples", "2000", "--auto-label", "oracle:default", "--lambdas", "1", "--epochs", "1",
                 "--samples-per-region", "64", "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "failure-region accuracy" in printed and "registered as" in printed
    summary = json.loads(out.read_text())
    assert summary["failures"] > 0 and summary["clusters"]
    assert set(summary["clusters"][0]) >= {"id", "weight", "size", "majority_prediction", "majority_true_label",
                                           "is_failure", "label", "images_labelled", "agreement", "agreement_se"}
    assert all(c["images_labelled"] == label_tools.REVIEW_IMAGES for c in summary["clusters"])
    assert all(0 <= c["agreement"] <= 1 and c["agreement_se"] >= 0 for c in summary["clusters"])
    assert summary["results"]["baseline"]["kind"] == "labelled-images"
    assert summary["selection"]["rule"] == "data" and summary["agreement"]["all"]["images"] > 0
    # the planted flaw is found: a failure region of 9s the flawed classifier calls 8, labelled 9 by the oracle
    assert any(c["is_failure"] and c["label"] == "9" and c["majority_prediction"] == "8" for c in summary["clusters"])
    before, after = summary["results"]["before"], summary["results"]["defuse"]
    assert after["failure_accuracy"] > before["failure_accuracy"] + 0.2  # and fixed on held-out region samples
    assert after["test_accuracy"] >= before["test_accuracy"] - 0.02
    assert summary["results"]["baseline"]["failure_accuracy"] is not None
    corrected = trained_workspace.registry.load(summary["corrected_model"])
    assert corrected.record["spec"]["parent"] == flawed_run["classifier"]
    assert all(summary["seconds"][k] > 0 for k in ("identify", "distill", "correct"))


def test_cli_defuse_errors_are_one_line(trained_workspace, flawed_run, capsys):
    from probe_core.cli import main

    root = ["--workspace", str(trained_workspace.root), "defuse"]
    assert main([*root, "distill", "--run", str(flawed_run["distill_run"])]) == 2
    assert "expected a 'defuse-identify' run" in capsys.readouterr().err
    runs_before = len(trained_workspace.store.list_runs())
    assert main([*root, "correct", "--run", str(flawed_run["distill_run"]), "--steps-per-epoch", "0"]) == 2
    error = capsys.readouterr().err
    assert "must be a whole number from 1 to 1,000,000, got 0" in error and error.count("\n") == 1
    assert len(trained_workspace.store.list_runs()) == runs_before  # nothing stored for bad input
    assert main([*root, "label", "--run", str(flawed_run["distill_run"]), "--auto-label", "human"]) == 2
    assert "oracle:MODEL" in capsys.readouterr().err
    labels_before = trained_workspace.store.get_labels()
    for threshold, message in (("1.5", "a probability in (0, 1], got 1.5"), ("0", "got 0.0")):
        assert main([*root, "label", "--run", str(flawed_run["distill_run"]), "--auto-label", "oracle:default",
                     "--oracle-abstains-below", threshold]) == 2
        assert message in capsys.readouterr().err
    assert main([*root, "run", "--dataset", "digits", "--oracle-abstains-below", "0.9"]) == 2
    assert "goes with --auto-label" in capsys.readouterr().err
    assert trained_workspace.store.get_labels() == labels_before and len(trained_workspace.store.list_runs()) == runs_before
    cluster_id = trained_workspace.store.get_clusters(flawed_run["distill_run"])[0]["id"]
    assert main([*root, "label", "--run", str(flawed_run["distill_run"]), "--cluster", str(cluster_id),
                 "--label", "9"]) == 2
    error = capsys.readouterr().err
    assert "--annotator" in error and error.count("\n") == 1
    labelled = [*root, "label", "--run", str(flawed_run["distill_run"]), "--cluster", str(cluster_id),
                "--annotator", "cli-user"]
    assert main([*labelled, "--label", "9", "--failure"]) == 2
    assert "verdict follows from the labels" in capsys.readouterr().err
    assert main([*labelled, "--label", "9", "--image", "11"]) == 2
    assert "--image counts from 1 to 10" in capsys.readouterr().err
    assert not trained_workspace.store.get_labels(cluster_id=cluster_id, source="human", per_image=True) or all(
        label["annotator"] != "cli-user" for label in trained_workspace.store.get_labels(cluster_id=cluster_id))
    assert main([*labelled, "--label", "9"]) == 0 and main([*labelled, "--label", "none", "--image", "3"]) == 0
    mine = [label for label in trained_workspace.store.get_labels(cluster_id=cluster_id, per_image=True)
            if label["annotator"] == "cli-user"]
    assert sorted(label["label"] for label in mine) == ["9"] * 9 + ["none"]


def test_embed_2d_places_points_beyond_the_fitted_subsample_next_to_their_neighbours():
    rng = np.random.default_rng(1)
    truth = np.repeat([0, 1], 400)
    latents = np.array([[0.0] * 6, [8.0] * 6])[truth] + rng.normal(size=(800, 6))
    xy = embed_2d(latents, max_fit=300, seed=0)
    assert xy.shape == (800, 2) and np.isfinite(xy).all()
    centre = [xy[truth == c].mean(0) for c in (0, 1)]
    nearest = np.argmin([np.linalg.norm(xy - c, axis=1) for c in centre], axis=0)
    assert (nearest == truth).mean() > 0.98


def test_embed_2d_keeps_umaps_compiled_kernels_on_disk_for_the_next_process():
    import umap.umap_

    embed_2d(np.random.default_rng(0).normal(size=(60, 4)).astype(np.float32), seed=0)
    stats = umap.umap_.smooth_knn_dist.stats
    compiled_here_or_loaded = sum(stats.cache_hits.values()) + sum(stats.cache_misses.values())
    assert stats.cache_path is not None and compiled_here_or_loaded >= 1
    assert any(name.startswith("umap_.smooth_knn_dist") and name.endswith(".nbi")
               for name in os.listdir(stats.cache_path))


def test_novelty_finds_the_nearest_misclassified_training_image_of_each_review_image(trained_workspace, flawed_run,
                                                                                    tmp_path, capsys):
    from probe_core.cli import main

    registry, store = trained_workspace.registry, trained_workspace.store
    distill_run = flawed_run["distill_run"]
    cluster = store.get_clusters(distill_run)[0]
    found = defuse_review.nearest_misclassified_training(registry, store, distill_run, cluster)
    dataset, classifier, _ = queries.load_run_models(registry, store, distill_run)
    assert found["misclassified_training_images"] > 0 and len(found["index"]) == label_tools.REVIEW_IMAGES
    with torch.no_grad():
        predicted = classifier.module(dataset.train_images[torch.from_numpy(found["index"])]).argmax(1).numpy()
    assert (predicted == found["prediction"]).all() and (predicted != found["label"]).all()  # really misclassified
    assert (found["distance"] >= found["nearest_any_distance"] - 1e-4).all()
    assert store.get_arrays(distill_run, "misclassified-training") is not None  # found once, cached
    picture = tmp_path / "novelty.png"
    assert main(["--workspace", str(trained_workspace.root), "defuse", "label", "--run", str(distill_run),
                 "--cluster", str(cluster["id"]), "--novelty", str(picture)]) == 0
    assert picture.stat().st_size > 500 and "misclassified training images" in capsys.readouterr().out


def test_each_review_image_is_shown_beside_the_training_image_its_nearest_failure_was_perturbed_from(
        trained_workspace, flawed_run, tmp_path, capsys):
    from probe_core.cli import main

    registry, store = trained_workspace.registry, trained_workspace.store
    distill_run = flawed_run["distill_run"]
    cluster = store.get_clusters(distill_run)[0]
    found = defuse_review.review_sources(registry, store, distill_run, cluster)
    failures = queries.failures_of(store, distill_run)
    members = np.flatnonzero(queries.assignments_of(store, distill_run) == cluster["cluster_index"])
    dataset, classifier, vae = queries.load_run_models(registry, store, distill_run)
    shown = defuse_review.review_images(store, vae, classifier, cluster, queries.distill_tau(store, distill_run))
    distances = np.linalg.norm(shown["latents"][:, None] - failures.latents[members][None], axis=2)
    assert len(found["index"]) == label_tools.REVIEW_IMAGES
    # each source is the training image of a failure of this cluster at the smallest code distance
    for position, index in enumerate(found["index"]):
        at_minimum = members[np.isclose(distances[position], distances[position].min(), rtol=1e-4, atol=1e-5)]
        assert index in failures.source_index[at_minimum]
        assert found["latent_distance"][position] == pytest.approx(distances[position].min(), rel=1e-4, abs=1e-5)
    assert torch.equal(found["images"], dataset.train_images[torch.from_numpy(found["index"])])
    assert (found["label"] == dataset.train_labels[torch.from_numpy(found["index"])].numpy()).all()
    picture = tmp_path / "sources.png"
    assert main(["--workspace", str(trained_workspace.root), "defuse", "label", "--run", str(distill_run),
                 "--cluster", str(cluster["id"]), "--sources", str(picture)]) == 0
    out = capsys.readouterr().out
    assert picture.stat().st_size > 500 and "the training image each came from" in out
    assert str(found["index"][0]) in out
    assert main(["--workspace", str(trained_workspace.root), "defuse", "label", "--run", str(distill_run),
                 "--sources", str(tmp_path / "x.png")]) == 2  # which cluster? one clear message
