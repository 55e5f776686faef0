"""Defuse correction on a problem small enough to reason about by hand: points in the plane as (N, 1, 1, 2)
"images", a linear classifier that is right on the data and wrong on a planted failure region, and the
finetuning objective L(D) + λ·CE(D_f) with its selection rules, sweep and splits (no trained model needed)."""

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers import recording

from probe_core.defuse import correction
from probe_core.defuse.correction import LabelledImages
from probe_core.errors import CancelledError, ProbeError
from probe_core.models.architectures import ProbabilityModel
from probe_core.runs.scaleout import LocalShards, ShardOutcome


def points(generator, count, centre, label, region=-1, spread=0.5):
    """``count`` points around ``centre`` as (N, 1, 1, 2) images, all labelled ``label``."""
    xy = torch.randn(count, 2, generator=generator) * spread + torch.tensor(centre)
    return LabelledImages(xy.view(count, 1, 1, 2), torch.full((count,), label), torch.full((count,), region))


def join(*parts):
    return LabelledImages(*(torch.cat([getattr(p, name) for p in parts]) for name in ("images", "labels", "region")))


def linear_classifier():
    """Class 1 exactly when x > 0: right on data labelled by the sign of x, wrong on (-2, 3) labelled 1."""
    layer = nn.Linear(2, 2)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[-1.0, 0.0], [1.0, 0.0]]))
        layer.bias.zero_()
    return ProbabilityModel(nn.Sequential(nn.Flatten(), layer))


@pytest.fixture(scope="module")
def problem():
    """D: points well away from x = 0, labelled by the sign of x; one failure region around (-2, 3) whose images
    are class 1 (the classifier says 0 there)."""
    generator = torch.Generator().manual_seed(0)
    data = {}
    for split, count in (("train", 128), ("validation", 64), ("test", 64)):
        data[split] = join(points(generator, count, (-2.0, 0.0), 0), points(generator, count, (2.0, 0.0), 1))
    for split, count in (("failures", 64), ("failure_validation", 32), ("failure_test", 64)):
        data[split] = points(generator, count, (-2.0, 3.0), 1, region=0 if split == "failure_test" else -1)
    return data


class Rows(nn.Module):
    """A 'classifier' whose probabilities are its (N, 1, 1, K) input rows, so every accuracy is known by hand."""

    def __init__(self):
        super().__init__()
        self.anchor = nn.Parameter(torch.zeros(()))

    def forward(self, images):
        return images.flatten(1) + 0 * self.anchor


def sweep_splits(problem):
    """The problem's splits in :func:`correction.finetune_sweep`'s order."""
    return [problem[key] for key in ("train", "validation", "failures", "failure_validation", "test", "failure_test")]


def one_lambda(problem, lam, **options):
    settings = {"epochs": 3, "batch_size": 16, "learning_rate": 0.03, "seed": 0, **options}
    return correction.finetune_one_lambda(linear_classifier(), lam, **problem, **settings)


def test_the_loss_is_cross_entropy_on_logits_and_the_log_likelihood_on_probabilities():
    images, labels = torch.randn(5, 1, 1, 2), torch.tensor([0, 1, 1, 0, 1])
    logits_model = linear_classifier()
    logits = logits_model.net(images)
    assert torch.allclose(correction._loss(logits_model, images, labels), F.cross_entropy(logits, labels))
    probabilities = ProbabilityModel(nn.Sequential(logits_model.net, nn.Softmax(-1)), output_kind="probabilities")
    assert torch.allclose(correction._loss(probabilities, images, labels), F.cross_entropy(logits, labels))
    # a probability of 0 is clamped at 1e-12, not turned into an infinite loss
    sure_of_zero = ProbabilityModel(Rows(), output_kind="probabilities")
    one_hot = torch.tensor([[1.0, 0.0]] * 3).view(3, 1, 1, 2)
    assert correction._loss(sure_of_zero, one_hot, torch.ones(3, dtype=torch.long)).item() == pytest.approx(
        -math.log(1e-12))


def rows(probabilities, labels, regions):
    probabilities = torch.tensor(probabilities)
    return LabelledImages(probabilities.view(len(probabilities), 1, 1, -1), torch.tensor(labels), torch.tensor(regions))


def test_evaluate_reports_test_pooled_and_per_region_accuracy():
    test = rows([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4], [0.3, 0.7]], [0, 1, 1, 1], [-1] * 4)
    # region 0: 1 of 2 right; region 1: 0 of 1; region 2: 3 of 3
    failure_test = rows([[0.9, 0.1], [0.1, 0.9], [0.8, 0.2], [0.3, 0.7], [0.4, 0.6], [0.2, 0.8]],
                        [0, 0, 1, 1, 1, 1], [0, 0, 1, 2, 2, 2])
    result = correction.evaluate(Rows(), test, failure_test)
    assert result == {"test_accuracy": 0.75, "failure_accuracy": pytest.approx(4 / 6), "per_region": [0.5, 0.0, 1.0]}
    empty = LabelledImages(torch.zeros(0, 1, 1, 2), torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long))
    assert correction.evaluate(Rows(), test, empty) == {"test_accuracy": 0.75, "failure_accuracy": None,
                                                        "per_region": []}
    assert correction._accuracy(Rows(), empty) is None


def test_finetuning_adds_lambda_times_the_failure_loss(problem):
    original = linear_classifier().state_dict()
    before = correction.evaluate(linear_classifier(), problem["test"], problem["failure_test"])
    assert before["failure_accuracy"] < 0.05 and before["test_accuracy"] == 1.0
    ignored = one_lambda(problem, 1e-10)
    fixed = one_lambda(problem, 10.0)
    # λ ≈ 0 keeps the data's rule (class 0 at x = -2); λ = 10 makes the region class 1 and keeps the data right
    assert ignored["failure_accuracy"] < 0.2 and fixed["failure_accuracy"] > 0.8
    assert fixed["test_accuracy"] > 0.9 and fixed["per_region"] == [fixed["failure_accuracy"]]
    assert all(torch.equal(original[key], linear_classifier().state_dict()[key]) for key in original)


def test_one_lambda_keeps_the_first_best_epoch_with_its_own_weights(problem):
    reports = []
    three = one_lambda(problem, 1e-10, reporter=recording(reports))
    # the data are separable with a wide margin: every epoch scores 1.0, and the first of equal scores is kept
    assert [(r.epoch, r.score) for r in reports] == [(1, 1.0), (2, 1.0), (3, 1.0)]
    assert (three["lambda"], three["epoch"], three["score"], three["validation_accuracy"]) == (1e-10, 1, 1.0, 1.0)
    first = one_lambda(problem, 1e-10, epochs=1)
    assert all(torch.equal(three["state"][key], first["state"][key]) for key in first["state"])
    assert not torch.equal(three["state"]["net.1.weight"], linear_classifier().state_dict()["net.1.weight"])


def test_selection_rules_score_what_they_say(problem):
    data = one_lambda(problem, 10.0, selection="data")
    assert data["score"] == data["validation_accuracy"]
    both = one_lambda(problem, 10.0, selection="data-and-failures")
    assert both["score"] == pytest.approx((both["validation_accuracy"] + both["failure_validation_accuracy"]) / 2)
    assert both["failure_validation_accuracy"] > 0.8


def test_a_seed_fixes_the_finetuning_whatever_the_global_generator(problem):
    results = []
    for global_seed in (1, 2):
        torch.manual_seed(global_seed)
        results.append(one_lambda(problem, 1.0, epochs=1))
    assert all(torch.equal(results[0]["state"][key], results[1]["state"][key]) for key in results[0]["state"])
    other_seed = one_lambda(problem, 1.0, epochs=1, seed=1)
    assert not torch.equal(other_seed["state"]["net.1.weight"], results[0]["state"]["net.1.weight"])


def test_a_learning_rate_of_zero_leaves_the_weights_and_a_step_cap_limits_the_batches(problem):
    still = one_lambda(problem, 10.0, learning_rate=0.0)
    assert all(torch.equal(still["state"][key], linear_classifier().state_dict()[key]) for key in still["state"])
    counted = []

    class Counting(nn.Module):
        def forward(self, images):
            if self.training:
                counted.append(len(images))
            return images

    model = linear_classifier()
    model.net.insert(0, Counting())
    correction.finetune_one_lambda(model, 1.0, **problem, epochs=2, batch_size=32, learning_rate=0.01, seed=0,
                                   steps_per_epoch=3)
    assert counted == [32, 32] * 3 * 2  # per step a batch of D and a batch of failure samples
    counted.clear()
    correction.finetune_one_lambda(model, 1.0, **problem, epochs=1, batch_size=100, learning_rate=0.01, seed=0)
    assert counted == [100, 100, 100, 100, 56, 100]  # a full pass over the 256 images of D


def test_the_sweep_selects_the_best_lambda_reports_progress_and_runs_the_same_in_shards(problem):
    splits = sweep_splits(problem)
    reports = []
    classifier = linear_classifier()
    model, selected, sweep = correction.finetune_sweep(
        classifier, *splits, lambdas=(1e-10, 10.0), epochs=2, batch_size=32, learning_rate=0.05,
        selection="data-and-failures", reporter=recording(reports))
    assert [entry["lambda"] for entry in sweep] == [1e-10, 10.0] and all("state" not in entry for entry in sweep)
    assert selected["lambda"] == 10.0 and selected["score"] == max(entry["score"] for entry in sweep)
    assert not model.training
    assert correction.evaluate(model, problem["test"], problem["failure_test"])["failure_accuracy"] == \
        sweep[1]["failure_accuracy"]
    assert torch.equal(classifier.net[1].weight, linear_classifier().net[1].weight)  # not modified
    assert [(r.phase, r.lambda_index, r.lambda_count, vars(r)["lambda"], r.epoch, r.epochs) for r in reports] == [
        ("defuse", 0, 2, 1e-10, 1, 2), ("defuse", 0, 2, 1e-10, 2, 2), ("defuse", 1, 2, 10.0, 1, 2),
        ("defuse", 1, 2, 10.0, 2, 2)]
    assert [r.progress for r in reports] == [0.25, 0.5, 0.75, 1.0]
    _, sharded_selected, sharded = correction.finetune_sweep(
        classifier, *splits, lambdas=(1e-10, 10.0), epochs=2, batch_size=32, learning_rate=0.05,
        selection="data-and-failures", executor=LocalShards())
    assert sharded == sweep and sharded_selected == selected
    # equal scores: the first λ is kept
    _, tied, _ = correction.finetune_sweep(classifier, *splits, lambdas=(1e-10, 1e-9), epochs=1,
                                           batch_size=32, learning_rate=0.05)
    assert tied["lambda"] == 1e-10


class LosingShards(LocalShards):
    """Runs the shards here, except those of the λ in ``lost`` (as if their worker died), or stops at once."""

    def __init__(self, lost=(), stopped=False):
        self.lost, self.stopped = set(lost), stopped

    def map(self, tasks, on_result, reporter=None):
        outcome = ShardOutcome(cancelled=self.stopped)
        for index, task in enumerate(tasks):
            if self.stopped:
                break
            if task.arguments["lam"] in self.lost:
                outcome.failed[index] = "worker lost"
                continue
            LocalShards().map([task], lambda _, value, index=index: on_result(index, value))
            outcome.done.append(index)
        return outcome


def test_sharded_progress_counts_lambdas_and_epochs_and_lost_shards_are_named(problem, caplog):
    splits = sweep_splits(problem)
    settings = {"lambdas": (1e-10, 10.0), "epochs": 2, "batch_size": 32, "learning_rate": 0.05}
    reports = []
    correction.finetune_sweep(linear_classifier(), *splits, **settings, phase="baseline", executor=LocalShards(),
                              reporter=recording(reports))
    # one report per epoch of each λ and one as each shard ends, the λ's index as the shards done so far
    assert [(r.phase, r.lambda_index, r.lambda_count, vars(r)["lambda"], r.epoch, r.epochs) for r in reports] == [
        ("baseline", 0, 2, 1e-10, 1.0, 2), ("baseline", 0, 2, 1e-10, 2.0, 2), ("baseline", 0, 2, 1e-10, 2.0, 2),
        ("baseline", 1, 2, 10.0, 1.0, 2), ("baseline", 1, 2, 10.0, 2.0, 2), ("baseline", 1, 2, 10.0, 2.0, 2)]
    assert all(math.isnan(r.score) for r in reports)
    _, selected, sweep = correction.finetune_sweep(linear_classifier(), *splits, **settings,
                                                   executor=LosingShards(lost={10.0}))
    assert [entry["lambda"] for entry in sweep] == [1e-10] and selected["lambda"] == 1e-10
    assert "λ = 10 not done" in caplog.text
    with pytest.raises(ProbeError, match="no λ of the sweep was done: λ = 1e-10: worker lost; λ = 10: worker lost"):
        correction.finetune_sweep(linear_classifier(), *splits, **settings, executor=LosingShards(lost={1e-10, 10.0}))
    with pytest.raises(CancelledError):
        correction.finetune_sweep(linear_classifier(), *splits, **settings, executor=LosingShards(stopped=True))


def test_the_sweep_takes_a_lambda_of_zero_and_one_step_an_epoch(problem):
    splits = sweep_splits(problem)
    _, selected, sweep = correction.finetune_sweep(linear_classifier(), *splits, lambdas=(0.0,), epochs=1,
                                                   steps_per_epoch=1)
    assert selected == {"lambda": 0.0, "epoch": 1, "score": 1.0} and len(sweep) == 1


@pytest.mark.parametrize("options, message", [
    ({"lambdas": ()}, "at least one λ"),
    ({"lambdas": (1.0, -1.0)}, "non-negative"),
    ({"selection": "test"}, "unknown selection rule 'test'; choose one of data, data-and-failures"),
    ({"steps_per_epoch": 0}, "at least 1, got 0"),
])
def test_the_sweep_refuses_bad_settings(problem, options, message):
    splits = sweep_splits(problem)
    with pytest.raises(ProbeError, match=message):
        correction.finetune_sweep(linear_classifier(), *splits, **options)
    no_failures = copy.copy(splits)
    no_failures[2] = LabelledImages(torch.zeros(0, 1, 1, 2), torch.zeros(0, dtype=torch.long),
                                    torch.zeros(0, dtype=torch.long))
    with pytest.raises(ProbeError, match="no failure samples"):
        correction.finetune_sweep(linear_classifier(), *no_failures)


def test_splits_are_disjoint_complete_and_fixed_by_the_seed():
    images, labels = torch.arange(20.0).view(20, 1, 1, 1), torch.arange(20)
    train, validation = correction.split_validation(images, labels, 0.25, seed=3)
    assert (len(train), len(validation)) == (15, 5)
    assert sorted(train.labels.tolist() + validation.labels.tolist()) == list(range(20))
    assert torch.equal(train.images.flatten().long(), train.labels) and set(train.region.tolist()) == {-1}
    torch.manual_seed(5)
    assert torch.equal(correction.split_validation(images, labels, 0.25, seed=3)[1].labels, validation.labels)
    assert len(correction.split_validation(images, labels, 0.01, seed=3)[1]) == 1  # at least one image validates
    for fraction in (0.0, 1.0):
        with pytest.raises(ProbeError, match=r"in \(0, 1\), got"):
            correction.split_validation(images, labels, fraction, seed=3)
    halves = correction.correction_splits(images, labels, images[:2], labels[:2], "test-half", 0.1, seed=0)
    assert [len(part) for part in halves] == [20, 1, 1] and {int(halves[1].labels), int(halves[2].labels)} == {0, 1}
    assert all(set(part.region.tolist()) == {-1} for part in halves)
    with pytest.raises(ProbeError, match="at least two images"):
        correction.correction_splits(images, labels, images[:1], labels[:1], "test-half", 0.1, seed=0)
    with pytest.raises(ProbeError, match="unknown validation source 'x'; choose one of training, test-half"):
        correction.correction_splits(images, labels, images, labels, "x", 0.1, seed=0)
