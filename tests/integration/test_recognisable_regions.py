"""Defuse at real size: a judge by default, and no fix of what nobody could label (issue 100)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from helpers import MISLABELLED

from probe_core.defuse import steps
from probe_core.defuse import review as defuse_review
from probe_core.defuse.identification import FailureSet
from probe_core.defuse.identify_step import NO_JUDGE, IdentifyRequest, _judge_choice, default_judge
from probe_core.defuse.labels import NONE_OF_THE_ABOVE, cluster_label_table
from probe_core.defuse.results import CorrectionResult
from probe_core.models import ModelSpec


def test_real_size_identification_is_judged_by_the_generators_feature_network_unless_told_otherwise():
    with_features = SimpleNamespace(id="real-size-32-rae-s0-abc", feature_network="real-size-32-classifier-s7919-x")
    without = SimpleNamespace(id="plugin:/srv/vae.py#sha256=00", feature_network=None)
    judge, reason = default_judge(with_features, (3, 32, 32))
    assert judge == "features:real-size-32-rae-s0-abc"
    assert "feature network" in reason and "mislabelled" in reason  # why it may share a flaw of the labels
    assert default_judge(with_features, (3, 64, 64))[0] == judge
    assert default_judge(with_features, (1, 28, 28))[0] is None  # below real size decodings keep their class
    judge, reason = default_judge(without, (3, 32, 32))
    assert judge is None and "--judge" in reason
    assert _judge_choice(IdentifyRequest(judge=NO_JUDGE), with_features, (3, 32, 32))[0] is None
    assert _judge_choice(IdentifyRequest(judge="some-model"), with_features, (3, 32, 32))[0] == "some-model"


def test_a_region_is_recognisable_only_when_its_judge_surely_calls_most_images_one_class():
    sure_nines = torch.nn.functional.one_hot(torch.tensor([9] * 7 + [3, 4, 5]), 10).float()
    assert defuse_review.recognisability(sure_nines, 0.9, "judge")["recognisable"]
    mixed = torch.nn.functional.one_hot(torch.tensor([1, 2, 3, 4, 5, 9, 9, 9, 9, 9]), 10).float()
    verdict = defuse_review.recognisability(mixed, 0.9, "judge")
    assert not verdict["recognisable"] and verdict["judged_class"] == 9 and verdict["judge_agreeing"] == 5
    unsure = torch.full((10, 10), 0.02)
    unsure[:, 9] = 0.82  # one class every time, but never sure of it
    assert not defuse_review.recognisability(unsure, 0.9, "judge")["recognisable"]


def test_regions_are_judged_the_oracle_abstains_on_unrecognisable_ones_and_the_correction_counts_them(
        trained_workspace):
    registry, store = trained_workspace.registry, trained_workspace.store
    flawed = registry.get_or_train(ModelSpec(dataset=MISLABELLED, kind="classifier"))
    identify_run, identified = steps.run_step(registry, store, IdentifyRequest.build(
        registry, dataset=MISLABELLED, classifier=flawed.id, samples_per_image=100, max_images=600,
        judge=registry.default_id("digits", "classifier"), judge_sure=0.5))
    assert identified.judge and identified.misclassified >= identified.confirmed > 0
    assert "confirmed" in identified.confirmed_words and identified.judge_reason.startswith("the judge given")
    distill_run, distilled = steps.run_step(registry, store, steps.DistillRequest(identify_run=identify_run,
                                                                                  max_samples=3000))
    clusters = store.get_clusters(distill_run)
    assert distilled.recognisable_clusters == sum(c["info"]["recognisable"] for c in clusters) >= 1
    # one region marked as a judge that recognised nothing would: the oracle gives it no class
    blurred = clusters[0]
    store.update_cluster_info(blurred["id"], {"recognisable": False})
    source, _ = defuse_review.auto_label(registry, store, distill_run, "default")
    names = registry.dataset("digits").class_names
    table = {row["id"]: row for row in cluster_label_table(store, distill_run, names, source)}
    assert table[blurred["id"]]["recognisable"] is False
    assert not table[blurred["id"]]["is_failure"] and table[blurred["id"]]["label"] is None
    review_ids = [image["id"] for image in store.get_review_images(blurred["id"])]
    given = {label["label"] for image_id in review_ids for label in store.get_labels(review_image_id=image_id,
                                                                                      source=source)}
    assert given == {NONE_OF_THE_ABOVE}
    result = CorrectionResult(distill_run, "oracle", [{"cluster_id": 1, "label": "8", "recognisable": False},
                                                      {"cluster_id": 2, "label": "9", "recognisable": False},
                                                      {"cluster_id": 3, "label": "9", "recognisable": True}],
                              {}, {}, [], [], 0, {}, "x", "y", 0.0)
    assert result.recognisable_words.startswith("warning: only 1 of 3 corrected regions were recognisable")


class _PixelFeatures(torch.nn.Module):
    """A classifier whose penultimate features are its images' pixels (the vote's geometry, known exactly)."""

    def features(self, images: torch.Tensor) -> torch.Tensor:
        return images.flatten(1)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return torch.full((len(images), 2), 0.5)


def _two_blobs(per_class: int, mislabelled_share: float, seed: int = 0):
    """Images (2 * per_class, 1, 4, 4) of two classes, bright left half or bright right half, with noise; the
    first ``mislabelled_share`` of class 0's images labelled 1."""
    generator = torch.Generator().manual_seed(seed)
    images = 0.1 * torch.rand(2 * per_class, 1, 4, 4, generator=generator)
    images[:per_class, ..., :2] += 0.8
    images[per_class:, ..., 2:] += 0.8
    labels = torch.tensor([0] * per_class + [1] * per_class)
    labels[:int(mislabelled_share * per_class)] = 1
    return images, labels


def test_a_neighbour_vote_keeps_a_class_whose_minority_is_mislabelled_and_gives_vote_shares():
    from probe_core.defuse.identification import DEFAULT_JUDGE_SURE, judge_sure_of
    from probe_core.errors import ProbeError
    from probe_core.models.neighbours import NEIGHBOUR_MAJORITY, NeighbourVote

    images, labels = _two_blobs(1000, 0.4)
    vote = NeighbourVote(_PixelFeatures(), images, labels, num_classes=2)
    fresh, _ = _two_blobs(200, 0.0, seed=1)
    shares = vote(fresh)
    assert shares.shape == (400, 2) and torch.allclose(shares.sum(1), torch.ones(400))
    # class 0's images: about 60 % of their neighbours say 0, a majority in most of them (about 8 in 10 of 15
    # votes drawn at 0.6); class 1's: all say 1
    assert shares[:200, 0].mean() > 0.52 and (shares[:200, 0] >= NEIGHBOUR_MAJORITY).float().mean() > 0.6
    assert (shares[200:, 1] == 1).all()
    # a class mislabelled in most of its images is the vote's flaw too
    flipped = NeighbourVote(_PixelFeatures(), *_two_blobs(1000, 0.8), num_classes=2)
    assert (flipped(fresh)[:200, 0] < NEIGHBOUR_MAJORITY).float().mean() > 0.9
    # a vote is read at a majority; a classifier at DEFAULT_JUDGE_SURE
    assert judge_sure_of(vote) == NEIGHBOUR_MAJORITY and judge_sure_of(_PixelFeatures()) == DEFAULT_JUDGE_SURE
    from probe_core.models.architectures import ProbabilityModel

    for featureless in (torch.nn.Linear(16, 2), ProbabilityModel(torch.nn.Linear(16, 2))):  # wrapped: scores only
        with pytest.raises(ProbeError, match="penultimate features"):
            NeighbourVote(featureless, images.flatten(1), labels, num_classes=2)
    assert len(NeighbourVote(ProbabilityModel(_PixelFeatures()), images, labels, num_classes=2)(fresh)) == 400


def test_a_neighbour_vote_judges_identification_at_a_majority_and_says_how_it_may_share_a_flaw(trained_workspace):
    from probe_core.errors import ProbeError
    from probe_core.models.neighbours import NEIGHBOUR_MAJORITY, NEIGHBOURS_PREFIX

    registry, store = trained_workspace.registry, trained_workspace.store
    flawed = registry.get_or_train(ModelSpec(dataset=MISLABELLED, kind="classifier"))
    clean = registry.default_id("digits", "classifier")
    voting = f"{NEIGHBOURS_PREFIX}{clean}"
    request = IdentifyRequest.build(registry, dataset=MISLABELLED, classifier=flawed.id, samples_per_image=60,
                                    max_images=300, judge=voting)
    assert request.judge == voting and request.judge_sure == NEIGHBOUR_MAJORITY  # the vote's own threshold
    assert request.judge_reason.startswith("the judge given") and "own training labels" in request.judge_reason
    run_id, identified = steps.run_step(registry, store, request)
    assert identified.judge == voting and identified.judge_sure == NEIGHBOUR_MAJORITY
    assert "own training labels" in identified.judge_warning and "majority" in identified.judge_warning
    found = FailureSet.from_store(store, run_id)
    judge = registry.resolve(voting, "classifier", MISLABELLED)
    vae = registry.resolve(request.vae, "generator", MISLABELLED)
    with torch.no_grad():
        shares = judge.module(vae.module.decode(torch.from_numpy(found.latents)))
    assert identified.misclassified >= identified.confirmed == len(found) > 0
    assert (shares[torch.arange(len(found)), torch.from_numpy(found.true_labels)] >= NEIGHBOUR_MAJORITY).all()
    runs_before = len(store.list_runs())
    for bad, words in ((f"{voting}#class_map=9=9", "class map"), (f"{NEIGHBOURS_PREFIX}{voting}", "another vote")):
        with pytest.raises(ProbeError, match=words):
            IdentifyRequest.build(registry, dataset=MISLABELLED, classifier=flawed.id, judge=bad)
    assert len(store.list_runs()) == runs_before
