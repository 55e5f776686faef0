"""Defuse parts without trained models: perturbation noise, the clusterer, label aggregation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from probe_core.defuse import labels as label_tools
from probe_core.defuse.cluster import FailureClusterer, projection_for, sample_cluster_latents
from probe_core.defuse.distill_step import DistillRequest
from probe_core.defuse.identification import REAL_SIZE_NOISE, SMALL_IMAGE_NOISE, default_noise, perturbation_noise
from probe_core.errors import ProbeError


def test_noise_modes_have_the_documented_moments():
    rng = np.random.default_rng(0)
    paper = perturbation_noise((20000, 8), "paper", 50, 50, 0.15, rng)
    centered = perturbation_noise((20000, 8), "centered", 50, 50, 0.15, rng)
    assert abs(paper.mean() - 0.5) < 0.002 and abs(paper.std() - 0.0498) < 0.002
    assert abs(centered.mean()) < 0.003 and abs(centered.std() - 0.15) < 0.003
    with pytest.raises(ProbeError, match="noise mode"):
        perturbation_noise((2, 2), "gaussian", 50, 50, 0.15, rng)
    with pytest.raises(ProbeError, match="a > 0"):
        perturbation_noise((2, 2), "paper", 0, 50, 0.15, rng)


def test_the_noise_a_request_leaves_open_is_chosen_from_the_image_size():
    from probe_core.defuse.identify_step import IdentifyRequest, with_data_noise

    assert default_noise((1, 8, 8)) == SMALL_IMAGE_NOISE and default_noise((1, 28, 28))["noise"] == "centered"
    assert default_noise((3, 32, 32)) == REAL_SIZE_NOISE
    assert {name: REAL_SIZE_NOISE[name] for name in ("noise", "a", "b")} == {"noise": "paper", "a": 75.0, "b": 75.0}
    open_request = IdentifyRequest()
    assert (open_request.noise, open_request.a, open_request.b, open_request.noise_scale) == (None,) * 4
    chosen = with_data_noise(open_request, (3, 64, 64))
    assert (chosen.noise, chosen.a, chosen.b) == ("paper", 75.0, 75.0)
    assert with_data_noise(open_request, (1, 8, 8)).noise_scale == 0.15
    # a generator declares its noise, its scale included; one that names no scale gets the size's
    flow_like = type("Declared", (), {"perturbation_noise": {"noise": "centered", "a": 50.0, "b": 50.0,
                                                              "noise_scale": 0.5}})()
    assert with_data_noise(open_request, (3, 32, 32), flow_like).noise_scale == 0.5
    assert with_data_noise(IdentifyRequest(noise_scale=0.2), (3, 32, 32), flow_like).noise_scale == 0.2  # named
    no_scale = type("Declared", (), {"perturbation_noise": {"noise": "centered", "a": 50.0, "b": 50.0}})()
    assert with_data_noise(open_request, (3, 32, 32), no_scale).noise_scale == REAL_SIZE_NOISE["noise_scale"]
    named = with_data_noise(IdentifyRequest(noise="centered", a=20.0), (3, 32, 32))
    assert (named.noise, named.a, named.b) == ("centered", 20.0, 75.0)  # what the user names stands
    assert with_data_noise(IdentifyRequest(), (1, 8, 8)).noise == "centered"
    with pytest.raises(ProbeError, match="noise must be one of paper, centered, got 'gaussian'"):
        IdentifyRequest.from_settings(noise="gaussian")
    with pytest.raises(ProbeError, match="a and b must be positive"):
        IdentifyRequest.from_settings(b=-1.0)


def test_failure_clusterer_follows_sklearn_conventions_and_finds_planted_clusters():
    from sklearn.metrics import adjusted_rand_score

    rng = np.random.default_rng(0)
    centres = np.array([[0.0] * 4, [6.0] * 4, [-6.0, 6.0, -6.0, 6.0]])
    truth = np.repeat([0, 1, 2], [600, 300, 100])
    latents = centres[truth] + rng.normal(scale=0.5, size=(1000, 4))
    clusterer = FailureClusterer(n_components=20, max_samples=800, random_state=0)
    assert (clusterer.n_components, clusterer.max_samples) == (20, 800)  # arguments stored as given
    with pytest.raises(ProbeError, match="not fitted"):
        clusterer.predict(latents)
    assert clusterer.fit(latents) is clusterer
    assert clusterer.n_clusters_ == 3
    assert clusterer.weights_ == pytest.approx([0.6, 0.3, 0.1], abs=0.03)
    assert clusterer.means_.shape == (3, 4) and clusterer.covariances_.shape == (3, 4, 4)
    assert adjusted_rand_score(truth, clusterer.labels_) > 0.95
    assert (clusterer.predict(centres) == clusterer.predict(centres[[0, 1, 2]])).all()
    with pytest.raises(ProbeError, match="NaN"):
        FailureClusterer().fit(np.full((10, 2), np.nan))


def test_projected_clusters_are_mapped_back_into_the_code_space_as_probabilistic_pca():
    from sklearn.metrics import adjusted_rand_score

    rng = np.random.default_rng(1)
    basis = np.linalg.qr(rng.normal(size=(200, 3)))[0].T  # (3, 200): clusters differ in 3 of 200 directions
    centres = np.array([[0.0, 0, 0], [8.0, 0, 0], [0.0, 8, 8]]) @ basis
    truth = np.repeat([0, 1, 2], [500, 300, 200])
    latents = centres[truth] + rng.normal(scale=0.3, size=(1000, 200))
    clusterer = FailureClusterer(n_components=10, projection_dim=5, random_state=0).fit(latents)
    assert clusterer.projection_.n_components_ == 5 and clusterer.n_clusters_ == 3
    assert adjusted_rand_score(truth, clusterer.labels_) > 0.95
    assert clusterer.means_.shape == (3, 200) and clusterer.covariances_.shape == (3, 200, 200)
    nearest_centre = np.linalg.norm(clusterer.means_[:, None] - centres[None], axis=2).min(1)
    assert (nearest_centre < 1.0).all()  # 200 coordinates of noise 0.3 each would put a wrong mean 8 away
    for covariance in clusterer.covariances_:
        assert np.allclose(covariance, covariance.T)
        # the discarded directions keep the data's own spread (σ² = 0.09), so review samples are proper
        assert np.linalg.eigvalsh(covariance).min() == pytest.approx(0.09, rel=0.2)
    samples = sample_cluster_latents(clusterer.means_[0], clusterer.covariances_[0], 50, 0.5, rng)
    assert samples.shape == (50, 200)
    assert FailureClusterer(projection_dim=300).fit(latents).projection_ is None  # not below the codes' size


def test_a_light_cluster_holding_most_of_one_class_failures_is_kept_with_a_class_share():
    rng = np.random.default_rng(2)
    # class 0 fails everywhere (two broad regions); class 1, known otherwise, fails in one small tight region
    latents = np.concatenate([rng.normal([0, 0], 1.0, size=(3000, 2)), rng.normal([8, 0], 1.0, size=(3000, 2)),
                              rng.normal([4, 9], 0.1, size=(30, 2)), rng.normal([4, -9], 3.0, size=(5, 2))])
    classes = np.repeat([0, 0, 1, 1], [3000, 3000, 30, 5])
    by_weight = FailureClusterer(n_components=10, random_state=0).fit(latents)
    assert not (by_weight.labels_[6000:6030] >= 0).any()  # at 0.5 % of all failures, ε = 0.01 drops it
    by_class = FailureClusterer(n_components=10, class_share=0.5, random_state=0).fit(latents, classes)
    kept = by_class.labels_[6000:6030]
    assert (kept >= 0).all() and len(set(kept)) == 1
    assert by_class.weights_[kept[0]] < 0.01 and by_class.n_clusters_ == by_weight.n_clusters_ + 1
    with pytest.raises(ProbeError, match="true class"):
        FailureClusterer(class_share=0.5).fit(latents)
    with pytest.raises(ProbeError, match="class_share"):
        FailureClusterer(class_share=1.5).fit(latents, classes)


def test_distillation_projects_only_codes_larger_than_the_papers_and_keeps_class_regions_when_asked():
    assert projection_for(512) == 32 and projection_for(15) == 0 and projection_for(64) == 0
    assert DistillRequest.from_settings(identify_run=1).class_share == 0.0  # the papers' weight threshold alone
    with pytest.raises(ProbeError, match="class share that keeps a light cluster must be a number from 0 to 1"):
        DistillRequest.from_settings(identify_run=1, class_share=2.0)
    assert DistillRequest.from_settings(identify_run=1, projection_dim=0).projection_dim == 0




DIGITS = tuple(str(c) for c in range(10))


def _images(predictions: list[int]) -> list[dict]:
    return [{"id": 100 + position, "position": position, "prediction": p} for position, p in enumerate(predictions)]


def _votes(table: dict[str, list[str | None]]) -> list[dict]:
    """Per-image labels: annotator -> one label (or None: not labelled) per image position."""
    return [{"review_image_id": 100 + position, "annotator": who, "label": label}
            for who, labels in table.items() for position, label in enumerate(labels) if label is not None]


def test_per_image_aggregation_follows_the_paper_on_a_hand_computed_cluster():
    # The classifier says 8 for all ten images; three annotators.
    votes = _votes({
        "ana": ["9"] * 6 + ["9", "8", "none", "9"],
        "bea": ["9"] * 6 + ["9", "8", "none", "8"],
        "cy": ["9"] * 6 + ["8", "8", "9", None],
    })
    result = label_tools.aggregate_images(_images([8] * 10), votes, DIGITS)
    # images 1-7 have a class majority (9 ×7, 8 ×1 for image 8); image 9's majority is "none" (discarded);
    # image 10 is a 1-1 tie (no majority, discarded)
    assert [entry["majority"] for entry in result["per_image"]] == ["9"] * 7 + ["8", "none", None]
    assert (result["images_labelled"], result["images_decided"], result["images_disagreeing"]) == (10, 8, 7)
    assert result["is_failure"] is True and result["label"] == "9" and result["usable"] is True
    agreements = [1.0] * 6 + [2 / 3, 1.0, 2 / 3, 0.5]
    assert result["image_agreements"] == pytest.approx(agreements)
    assert result["agreement"] == pytest.approx(np.mean(agreements))
    assert result["agreement_se"] == pytest.approx(np.std(agreements, ddof=1) / np.sqrt(10))
    assert result["annotators"] == 3 and result["labelled_per"] == "image"


def test_per_image_aggregation_at_rho_exactly_a_half_ties_and_none_of_the_above():
    # two of four decided images differ from the classifier: exactly ρ = 0.5 is not more than ρ
    half = label_tools.aggregate_images(_images([8, 8, 8, 8]), _votes({"ana": ["9", "9", "8", "8"]}), DIGITS)
    assert half["images_disagreeing"] == 2 and half["images_decided"] == 4
    assert half["is_failure"] is False and half["usable"] is False
    assert half["label"] is None  # 9 and 8 tie over the images
    below = label_tools.aggregate_images(_images([8, 8, 8, 8]), _votes({"ana": ["9", "9", "8", "8"]}), DIGITS,
                                         rho=0.4)
    assert below["is_failure"] is True and below["usable"] is False  # a failure, but no majority label
    # a failure region whose images split between two true classes has no label either
    split = label_tools.aggregate_images(_images([8, 8, 8, 8]), _votes({"ana": ["9", "7", "9", "7"]}), DIGITS)
    assert split["is_failure"] is True and split["label"] is None and not split["usable"]
    # "none of the above" images are discarded: nothing decided, no verdict
    mixed = label_tools.aggregate_images(
        _images([8, 8]), _votes({"ana": ["none", "none"], "bea": ["none", "3"], "cy": ["3", "3"]}), DIGITS)
    assert [entry["majority"] for entry in mixed["per_image"]] == ["none", "3"]
    assert mixed["images_decided"] == 1 and mixed["is_failure"] is True and mixed["label"] == "3"
    everything_none = label_tools.aggregate_images(_images([8]), _votes({"ana": ["none"]}), DIGITS)
    assert everything_none["is_failure"] is None and everything_none["label"] is None
    unlabelled = label_tools.aggregate_images(_images([8, 8]), [], DIGITS)
    assert unlabelled["images_labelled"] == 0 and unlabelled["agreement"] is None and unlabelled["is_failure"] is None


def test_agreement_summary_pools_images_by_failure_region():
    failure = {"is_failure": True, "image_agreements": [1.0, 0.6]}
    other = {"is_failure": False, "image_agreements": [0.8]}
    summary = label_tools.agreement_summary([failure, other, {"is_failure": None, "image_agreements": []}])
    assert summary["clusters_labelled"] == 2
    assert summary["failure_regions"]["mean"] == pytest.approx(0.8) and summary["failure_regions"]["images"] == 2
    assert summary["failure_regions"]["se"] == pytest.approx(np.std([1.0, 0.6], ddof=1) / np.sqrt(2))
    assert summary["other_clusters"] == {"mean": pytest.approx(0.8), "se": None, "images": 1}
    assert summary["all"]["mean"] == pytest.approx(0.8) and summary["all"]["images"] == 3


def test_whole_cluster_labels_from_older_workspaces_still_aggregate():
    def entry(who, failure, label):
        return {"annotator": who, "is_failure": failure, "label": label}

    tie = label_tools.aggregate_cluster_votes([entry("a", True, "3"), entry("b", True, "5")])
    assert tie["is_failure"] is True and tie["label"] is None and tie["agreement"] == 0.5 and not tie["usable"]
    nothing = label_tools.aggregate_cluster_votes([entry("a", True, "none"), entry("b", True, "none"),
                                                   entry("c", True, "3")])
    assert nothing["label"] == "none" and not nothing["usable"] and nothing["labelled_per"] == "cluster"
    half = label_tools.aggregate_cluster_votes([entry("a", True, "3"), entry("b", False, "3")])
    assert half["is_failure"] is False  # exactly ρ = 0.5 is not more than half
    assert label_tools.aggregate_cluster_votes([])["is_failure"] is None
    with pytest.raises(ProbeError, match="unknown class"):
        label_tools.normalise_label("eleven", tuple("0123456789"))


def test_review_picks_show_each_look_of_a_cluster_before_any_twice_the_most_typical_first():
    from probe_core.defuse.review import diverse_positions

    rng = np.random.default_rng(0)
    looks = rng.random((3, 1, 6, 6)).astype(np.float32)  # three pictures a person tells apart
    which = np.array([0] * 60 + [1] * 25 + [2] * 15)
    rng.shuffle(which)
    candidates = np.clip(looks[which] + rng.normal(0, 0.01, (len(which), 1, 6, 6)), 0, 1).astype(np.float32)
    picks = diverse_positions(torch.from_numpy(candidates), 3)
    assert sorted(which[picks]) == [0, 1, 2]  # ten plain draws would show look 0 six times, look 2 once or never
    assert which[picks[0]] == 0  # the look most draws share
    many = diverse_positions(torch.from_numpy(candidates), 10)
    assert len(set(many.tolist())) == 10 and list(many[:3]) == list(picks)
    copies = torch.from_numpy(np.repeat(looks[:1], 12, axis=0))  # one look only: still ten different draws
    assert len(set(diverse_positions(copies, 10).tolist())) == 10
    with pytest.raises(ProbeError, match="cannot pick 11 of 10 images"):
        diverse_positions(torch.from_numpy(candidates[:10]), 11)


def test_identification_without_a_judge_is_advised_one_at_real_size_and_a_judge_setting_is_checked():
    from probe_core.defuse.identify_step import IdentifyRequest, judge_advice

    assert judge_advice((1, 28, 28)) is None and judge_advice((3, 31, 64)) is None
    assert "32x32" in judge_advice((3, 32, 32)) and "--judge" in judge_advice((3, 64, 64))
    assert "128x96" in judge_advice((3, 128, 96))
    # left open, the threshold is the judge's own once the judge is loaded (0.9 for a classifier, a vote's majority)
    assert IdentifyRequest.from_settings(judge="clean-model").judge_sure is None
    assert IdentifyRequest.from_settings(judge="clean-model", judge_sure=0.7).judge_sure == 0.7
    with pytest.raises(ProbeError, match="judge sure"):
        IdentifyRequest.from_settings(judge="clean-model", judge_sure=0.0)


def test_at_real_size_identification_spreads_its_budget_over_every_training_image():
    from probe_core.data import ImageDataset
    from probe_core.defuse.identify_step import (
        MIN_SAMPLES_PER_IMAGE,
        REAL_SIZE_PERTURBATIONS,
        REAL_SIZE_SAMPLES_PER_IMAGE,
        IdentifyRequest,
        sized_identification,
    )

    def data(count: int, side: int) -> ImageDataset:  # views of one image: the shape is what counts
        return ImageDataset("d", torch.zeros(1, 3, side, side).expand(count, -1, -1, -1), torch.zeros(count).long(),
                            torch.zeros(2, 3, side, side), torch.zeros(2).long(), ("a",), "test")

    few = sized_identification(IdentifyRequest(), data(500, 32))[0]  # few images: every one, Q at its real-size cap
    assert (few.max_images, few.samples_per_image) == (500, REAL_SIZE_SAMPLES_PER_IMAGE)
    svhn_like = sized_identification(IdentifyRequest(), data(8_000, 32))[0]  # 32x32: every image, the same budget
    assert (svhn_like.max_images, svhn_like.samples_per_image) == (8_000, REAL_SIZE_PERTURBATIONS // 8_000)
    signs = sized_identification(IdentifyRequest(), data(4_000, 64))[0]  # 64x64: every image, the same budget
    assert (signs.max_images, signs.samples_per_image) == (4_000, 25)
    many = sized_identification(IdentifyRequest(), data(40_000, 64))[0]  # too many for the budget: Q's floor
    assert many.samples_per_image == MIN_SAMPLES_PER_IMAGE
    assert many.max_images * many.samples_per_image <= REAL_SIZE_PERTURBATIONS
    named = sized_identification(IdentifyRequest(samples_per_image=40), data(4_000, 64))[0]  # a Q the user named
    assert named.samples_per_image == 40 and named.max_images == REAL_SIZE_PERTURBATIONS // 40


def test_a_judge_trained_on_the_classifiers_own_data_is_flagged():
    from types import SimpleNamespace

    from probe_core.defuse.identify_step import judge_warning

    def model(name: str, dataset: str | None):
        return SimpleNamespace(id=name, record={"spec": {"dataset": dataset}} if dataset else {})

    flawed = model("flawed", "signs[mislabel=bar->bars:0.4]")
    assert "same data" in judge_warning(model("seed-2", "signs[mislabel=bar->bars:0.4]"), flawed)
    assert judge_warning(model("clean", "signs"), flawed) is None
    assert judge_warning(model("plugin", None), flawed) is None  # a plugin's training data is not known
