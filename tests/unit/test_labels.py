"""Failure-cluster labels on a hand-built store: the paper's aggregation (Definition 3.2), the cluster table, each
annotator's progress and the CSV export, against values worked out by hand (no training: the integration tests run
the same functions on a real Defuse run)."""

import csv
import datetime as dt
import io

import numpy as np
import pytest

from probe_core.defuse import labels as label_tools
from probe_core.errors import ProbeError
from probe_core.store import Store

CLASSES = ("cat", "dog", "owl")


@pytest.fixture
def labelled(tmp_path):
    """A distillation run with two clusters.

    Cluster 0 (per-image labels): review images predicted cat, cat, dog; ana says dog, dog (after first saying
    cat), dog; bob says dog, cat; an oracle says cat on the first. Cluster 1 (whole-cluster labels, as workspaces
    from before per-image labels hold them): ana failure/owl, bob not a failure/owl, "=cara" failure/dog.
    """
    store = Store(tmp_path / "probe.sqlite")
    run = store.create_run("defuse-distill", {})
    first, second = store.add_clusters(run, [
        {"cluster_index": 0, "weight": 0.6, "size": 30, "mean": np.zeros(2), "covariance": np.eye(2),
         "info": {"note": "dark"}},
        {"cluster_index": 1, "weight": 0.4, "size": 20, "mean": np.ones(2), "covariance": np.eye(2)}])
    images = store.put_review_images(first, np.zeros((3, 2)), np.zeros((3, 1, 4, 4)), np.array([0, 0, 1]))
    store.set_label("ana", review_image_id=images[1], label="cat")
    store.set_labels("ana", [(images[0], "dog"), (images[1], "dog"), (images[2], "dog")])
    store.set_labels("bob", [(images[0], "dog"), (images[1], "cat")])
    store.set_label("clf", review_image_id=images[0], label="cat", source="oracle:clf")
    for annotator, failure, label in (("ana", True, "owl"), ("bob", False, "owl"), ("=cara", True, "dog")):
        store.set_label(annotator, cluster_id=second, label=label, is_failure=failure)
    return store, run, first, second, images


def test_per_image_aggregation_follows_the_paper(labelled):
    store, run, first, _, images = labelled
    row = label_tools.cluster_label_table(store, run, CLASSES)[0]
    assert (row["id"], row["cluster_index"], row["weight"], row["size"], row["note"]) == (first, 0, 0.6, 30, "dark")
    assert [(image["review_image_id"], image["prediction"], image["majority"], image["agreement"], image["votes"])
            for image in row["per_image"]] == [(images[0], "cat", "dog", 1.0, 2), (images[1], "cat", None, 0.5, 2),
                                               (images[2], "dog", "dog", 1.0, 1)]
    # two images decided, one of them against the classifier: 1/2 is not more than ρ = 0.5
    assert (row["annotators"], row["images_labelled"], row["images_decided"], row["images_disagreeing"]) == (2, 3, 2, 1)
    assert (row["is_failure"], row["label"], row["usable"], row["labelled_per"]) == (False, "dog", False, "image")
    # agreements 1, 0.5, 1: mean 5/6, standard deviation sqrt(1/12), standard error that over sqrt(3) = 1/6
    assert row["agreement"] == pytest.approx(5 / 6) and row["agreement_se"] == pytest.approx(1 / 6)
    assert row["image_agreements"] == [1.0, 0.5, 1.0]
    assert [image["position"] for image in row["per_image"]] == [0, 1, 2]
    stricter = label_tools.cluster_label_table(store, run, CLASSES, rho=0.4)[0]
    assert (stricter["is_failure"], stricter["usable"]) == (True, True)


def test_oracle_labels_are_aggregated_apart_from_human_ones(labelled):
    store, run, *_ = labelled
    oracle = label_tools.cluster_label_table(store, run, CLASSES, source="oracle:clf")
    assert (oracle[0]["annotators"], oracle[0]["images_decided"], oracle[0]["label"]) == (1, 1, "cat")
    assert (oracle[0]["is_failure"], oracle[0]["usable"]) == (False, False)  # it agrees with the prediction
    assert oracle[1]["labelled_per"] is None and oracle[1]["is_failure"] is None  # no oracle label there


def test_whole_cluster_labels_are_aggregated_by_vote(labelled):
    store, run, _, second, _ = labelled
    row = label_tools.cluster_label_table(store, run, CLASSES)[1]
    assert (row["id"], row["cluster_index"], row["labelled_per"]) == (second, 1, "cluster")
    # failure votes yes, no, yes: 2/3 > 0.5; classes owl, owl, dog: owl with agreement 2/3
    assert (row["annotators"], row["is_failure"], row["label"], row["usable"]) == (3, True, "owl", True)
    assert row["agreement"] == pytest.approx(2 / 3) and row["image_agreements"] == [pytest.approx(2 / 3)]
    assert label_tools.aggregate_cluster_votes([], rho=0.5)["usable"] is False
    tie = [{"annotator": name, "is_failure": True, "label": label} for name, label in (("a", "dog"), ("b", "owl"))]
    tied = label_tools.aggregate_cluster_votes(tie)
    assert tied["label"] is None and not tied["usable"]
    none_of_the_above = [{"annotator": "a", "is_failure": True, "label": "none"}]
    assert not label_tools.aggregate_cluster_votes(none_of_the_above)["usable"]
    assert label_tools.aggregate_cluster_votes(tie, rho=1.0)["is_failure"] is False  # 2/2 is not more than 1


def test_agreement_summary_pools_images_by_region(labelled):
    store, run, *_ = labelled
    summary = label_tools.agreement_summary(label_tools.cluster_label_table(store, run, CLASSES))
    assert summary["clusters_labelled"] == 2
    assert summary["failure_regions"]["images"] == 1 and summary["failure_regions"]["mean"] == pytest.approx(2 / 3)
    assert summary["failure_regions"]["se"] is None  # one value has no standard error
    assert summary["other_clusters"]["images"] == 3 and summary["other_clusters"]["mean"] == pytest.approx(5 / 6)
    assert summary["all"]["images"] == 4 and summary["all"]["mean"] == pytest.approx((2 / 3 + 2.5) / 4)


def test_annotator_progress_counts_images_complete_clusters_and_relabels(labelled):
    store, run, *_ = labelled
    progress = label_tools.annotator_progress(store, run)
    assert [(p["annotator"], p["images_labelled"], p["clusters_complete"], p["relabels"]) for p in progress] == [
        ("ana", 3, 1, 1), ("bob", 2, 0, 0)]
    for row in progress:
        own = [label["created_at"] for label in store.get_labels(source="human", per_image=True)
               if label["annotator"] == row["annotator"]]
        assert row["last_labelled_at"] == max(own) > 0
    assert [p["annotator"] for p in label_tools.annotator_progress(store, run, source="oracle:clf")] == ["clf"]


def test_the_csv_export_holds_every_label_of_every_source(labelled, tmp_path):
    store, run, first, second, images = labelled
    text, count = label_tools.labels_csv(store, run)
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[0] == ["cluster_id", "cluster_index", "image", "annotator", "source", "is_failure", "label",
                       "labelled_at"]
    assert count == len(rows) - 1 == 9
    assert sorted(tuple(row[:7]) for row in rows[1:]) == sorted([
        (str(first), "0", "1", "ana", "human", "", "dog"), (str(first), "0", "2", "ana", "human", "", "dog"),
        (str(first), "0", "3", "ana", "human", "", "dog"), (str(first), "0", "1", "bob", "human", "", "dog"),
        (str(first), "0", "2", "bob", "human", "", "cat"), (str(first), "0", "1", "clf", "oracle:clf", "", "cat"),
        (str(second), "1", "", "ana", "human", "yes", "owl"), (str(second), "1", "", "bob", "human", "no", "owl"),
        (str(second), "1", "", "'=cara", "human", "yes", "dog")])  # a formula-like name is kept as text
    for row in rows[1:]:
        when = dt.datetime.fromisoformat(row[7])
        assert when.utcoffset() == dt.timedelta(0) and when.microsecond == 0
    path = tmp_path / "labels.csv"
    assert label_tools.export_labels_csv(store, run, path) == 9
    assert path.read_bytes() == text.encode()


def test_a_label_is_normalised_to_a_class_name_or_none_of_the_above():
    for text in ("none", "None", " NONE ", "none of the above", "None of the Above"):
        assert label_tools.normalise_label(text, CLASSES) == label_tools.NONE_OF_THE_ABOVE
    assert label_tools.normalise_label(None, CLASSES) is None
    assert label_tools.normalise_label(" dog ", CLASSES) == "dog" and label_tools.normalise_label(2, CLASSES) == "owl"
    with pytest.raises(ProbeError, match="none of the above"):
        label_tools.normalise_label("horse", CLASSES)


def test_labelling_images_stores_the_source_and_refuses_nothing_to_label(labelled):
    store, run, first, _, images = labelled
    label_tools.label_images(store, [images[2]], "dan", "None of the above", CLASSES, source="oracle:other")
    assert [(label["annotator"], label["label"]) for label in store.get_labels(source="oracle:other")] == [
        ("dan", "none")]
    assert not [label for label in store.get_labels(source="human") if label["annotator"] == "dan"]
    before = store.get_labels()
    with pytest.raises(ProbeError, match="no review images"):
        label_tools.label_images(store, [], "dan", "dog", CLASSES)
    with pytest.raises(ProbeError, match="give the class"):
        label_tools.label_images(store, [images[0]], "dan", None, CLASSES)
    assert store.get_labels() == before
    assert label_tools.strict_majority([]) == (None, 0)


def test_whole_cluster_votes_need_more_than_rho_and_an_empty_vote_has_every_key():
    votes = [{"annotator": name, "is_failure": failure, "label": "owl"}
             for name, failure in (("a", True), ("b", False))]
    half = label_tools.aggregate_cluster_votes(votes)  # 1/2 is not more than ρ = 0.5
    assert (half["is_failure"], half["usable"]) == (False, False)
    third = label_tools.aggregate_cluster_votes(votes + [{"annotator": "c", "is_failure": True, "label": "owl"}])
    assert (third["is_failure"], third["usable"]) == (True, True)
    assert label_tools.aggregate_cluster_votes(votes + [{"annotator": "c", "is_failure": True, "label": "owl"}],
                                               rho=0.7)["usable"] is False  # 2/3 is not more than 0.7
    empty = label_tools.aggregate_cluster_votes([])
    per_image_keys = label_tools.aggregate_images([], [], CLASSES).keys()
    assert empty.keys() == per_image_keys
    assert (empty["annotators"], empty["images_labelled"], empty["images_decided"], empty["images_disagreeing"],
            empty["is_failure"], empty["label"], empty["agreement"], empty["agreement_se"], empty["image_agreements"],
            empty["per_image"], empty["usable"], empty["labelled_per"]) == (0, 0, 0, 0, None, None, None, None, [],
                                                                            [], False, None)


def test_cluster_labels_read_that_cluster_alone_with_the_given_rho(labelled):
    store, run, first, second, _ = labelled
    third = store.add_clusters(run, [{"cluster_index": 2, "weight": 0.1, "size": 5, "mean": np.zeros(2),
                                      "covariance": np.eye(2)}])[0]
    store.set_label("ana", cluster_id=third, label="cat", is_failure=False)
    rows = {row["id"]: row for row in label_tools.cluster_label_table(store, run, CLASSES)}
    assert (rows[third]["annotators"], rows[third]["label"], rows[third]["is_failure"]) == (1, "cat", False)
    assert (rows[second]["annotators"], rows[second]["label"]) == (3, "owl")
    # the second cluster's failure votes are 2 of 3: a failure at ρ = 0.5, not at ρ = 0.7
    strict = label_tools.cluster_labels(store, {"id": second}, CLASSES, rho=0.7)
    assert (strict["labelled_per"], strict["is_failure"], strict["usable"]) == ("cluster", False, False)


def test_progress_counts_review_image_relabels_and_complete_clusters_with_images(labelled):
    store, run, first, second, images = labelled
    # a relabel of a whole cluster whose id is also one of ana's review images' is not a review-image relabel
    assert str(second) in {str(image) for image in images}
    store.set_label("ana", cluster_id=second, label="dog", is_failure=True)
    one_image = store.add_clusters(run, [{"cluster_index": 2, "weight": 0.1, "size": 5, "mean": np.zeros(2),
                                          "covariance": np.eye(2)}])[0]
    single = store.put_review_images(one_image, np.zeros((1, 2)), np.zeros((1, 1, 4, 4)), np.array([2]))
    store.set_labels("bob", [(single[0], "owl")])
    progress = {p["annotator"]: p for p in label_tools.annotator_progress(store, run)}
    assert (progress["ana"]["relabels"], progress["ana"]["clusters_complete"]) == (1, 1)
    assert (progress["bob"]["images_labelled"], progress["bob"]["clusters_complete"]) == (3, 1)


def test_the_csv_export_writes_an_empty_cell_for_a_failure_vote_without_a_class(labelled):
    store, run, _, second, _ = labelled
    store.set_label("dan", cluster_id=second, is_failure=True)
    rows = list(csv.reader(io.StringIO(label_tools.labels_csv(store, run)[0])))
    assert [row[5:7] for row in rows if row[3] == "dan"] == [["yes", ""]]
