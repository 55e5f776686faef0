"""The correction's λ grid and batches per epoch: the paper's on small images, a disclosed budget at real size."""

import pytest
import torch

from probe_core.defuse.correction import (
    PAPER_LAMBDAS,
    PAPER_LEARNING_RATE,
    REAL_SIZE_LAMBDAS,
    REAL_SIZE_LEARNING_RATE,
    REAL_SIZE_SELECTION,
    REAL_SIZE_STEPS_PER_EPOCH,
    SMALL_IMAGE_SELECTION,
    LabelledImages,
    correction_splits,
    finetune_one_lambda,
)
from probe_core.defuse.correct_step import (
    CorrectRequest,
    correction_plan,
    correction_validation,
    finetuning_settings,
)
from probe_core.errors import ProbeError


def test_small_images_keep_the_papers_grid_and_full_passes():
    plan = correction_plan(CorrectRequest(distill_run=1), (1, 8, 8))
    assert plan.lambdas == PAPER_LAMBDAS and plan.steps_per_epoch is None
    assert "full pass" in plan.note and "real-size" not in plan.note


def test_real_size_images_get_a_smaller_budget_and_say_so():
    plan = correction_plan(CorrectRequest(distill_run=1), (3, 32, 32))
    assert plan.lambdas == REAL_SIZE_LAMBDAS and plan.steps_per_epoch == REAL_SIZE_STEPS_PER_EPOCH
    assert set(REAL_SIZE_LAMBDAS) <= set(PAPER_LAMBDAS) and len(REAL_SIZE_LAMBDAS) < len(PAPER_LAMBDAS)
    assert "real-size images (32x32)" in plan.note and "--steps-per-epoch" in plan.note


def test_what_the_user_gives_is_kept_at_real_size():
    asked = CorrectRequest(distill_run=1, lambdas=(0.5, 2.0), steps_per_epoch=7, selection="data")
    plan = correction_plan(asked, (3, 64, 64))
    assert plan.lambdas == (0.5, 2.0) and plan.steps_per_epoch == 7 and plan.selection == "data"
    assert "chosen for real-size" not in plan.note and "7 batches of D" in plan.note
    # one left out is still chosen from the data, and the note names only that one, with its reason only
    plan = correction_plan(CorrectRequest(distill_run=1, lambdas=(1.0,), selection="data"), (3, 64, 64))
    assert plan.steps_per_epoch == REAL_SIZE_STEPS_PER_EPOCH and "batches per epoch chosen" in plan.note
    assert "λ grid" not in plan.note.split(";")[-1] and "dark 3s" not in plan.note


def test_the_selection_rule_is_the_papers_below_real_size_and_the_failure_aware_one_at_real_size():
    small, real = (correction_plan(CorrectRequest(distill_run=1), shape) for shape in ((1, 28, 28), (3, 32, 32)))
    assert (small.selection, real.selection) == (SMALL_IMAGE_SELECTION, REAL_SIZE_SELECTION) == (
        "data", "data-and-failures")
    assert "selected by validation accuracy" in small.note and "real-size" not in small.note
    assert "held-out failure-region samples" in real.note and "selection rule" in real.note.split(";")[-1]
    assert "dark 3s" in real.note and "--selection" in real.note  # why, and how to choose otherwise
    named = correction_plan(CorrectRequest(distill_run=1, selection="data"), (3, 32, 32))
    assert named.selection == "data" and "dark 3s" not in named.note


def test_real_size_selects_on_half_the_test_set_as_the_papers_colour_protocol_unless_asked():
    assert correction_validation(CorrectRequest(distill_run=1), (3, 32, 32)) == "test-half"
    assert correction_validation(CorrectRequest(distill_run=1), (1, 28, 28)) == "training"
    assert correction_validation(CorrectRequest(distill_run=1, validation="training"), (3, 64, 64)) == "training"
    plan = correction_plan(CorrectRequest(distill_run=1), (3, 32, 32))
    assert plan.validation == "test-half" and "half of the test set" in plan.note
    with pytest.raises(ProbeError, match="unknown validation source 'test'; choose one of training, test-half"):
        CorrectRequest.from_settings(distill_run=1, validation="test")


def test_the_test_half_split_keeps_all_training_images_and_splits_the_test_set_in_disjoint_halves():
    train, test = _labelled(40, 0), _labelled(11, 1)
    d, validation, held_out = correction_splits(train.images, train.labels, test.images, test.labels,
                                                "test-half", 0.1, seed=3)
    assert torch.equal(d.images, train.images) and (len(validation), len(held_out)) == (5, 6)
    rows = lambda part: {tuple(image.flatten().tolist()) for image in part.images}  # noqa: E731
    assert not rows(validation) & rows(held_out) and rows(validation) | rows(held_out) == rows(test)
    again = correction_splits(train.images, train.labels, test.images, test.labels, "test-half", 0.1, seed=3)
    assert torch.equal(again[1].images, validation.images)  # the same halves for the same seed
    d, validation, held_out = correction_splits(train.images, train.labels, test.images, test.labels,
                                                "training", 0.1, seed=3)
    assert (len(d), len(validation)) == (36, 4) and torch.equal(held_out.images, test.images)


@pytest.mark.parametrize("bad", [0, -3, 2.5])
def test_a_steps_per_epoch_that_is_not_a_positive_whole_number_is_refused(bad):
    with pytest.raises(ProbeError, match="steps per epoch|whole number"):
        CorrectRequest.from_settings(distill_run=1, steps_per_epoch=bad)


class _CountingClassifier(torch.nn.Module):
    """Logits from a linear layer. It counts training batches on the class, because finetuning trains a deep
    copy of the model it is given."""

    output_kind = "logits"
    batches_scored = 0

    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 2))

    def scores(self, images):
        type(self).batches_scored += 1
        return self.net(images)

    def forward(self, images):
        return torch.softmax(self.net(images), dim=1)


def _labelled(count: int, seed: int) -> LabelledImages:
    generator = torch.Generator().manual_seed(seed)
    images = torch.randn(count, 1, 2, 2, generator=generator)
    labels = (images.flatten(1).sum(1) > 0).long()
    return LabelledImages(images, labels, torch.full((count,), -1))


@pytest.mark.parametrize("steps_per_epoch, batches_per_epoch", [(None, 10), (3, 3), (50, 10)])
def test_steps_per_epoch_caps_the_batches_of_d_each_epoch_takes(monkeypatch, steps_per_epoch, batches_per_epoch):
    monkeypatch.setattr(_CountingClassifier, "batches_scored", 0)
    original = _CountingClassifier()
    before = {name: value.clone() for name, value in original.state_dict().items()}
    result = finetune_one_lambda(original, 1.0, train=_labelled(40, 0), validation=_labelled(8, 2),
                                 failures=_labelled(12, 1), failure_validation=_labelled(4, 3),
                                 test=_labelled(8, 4), failure_test=_labelled(4, 5), epochs=2, batch_size=4,
                                 learning_rate=1e-2, seed=0, steps_per_epoch=steps_per_epoch)
    # 40 images in batches of 4 are 10 batches; each step scores one batch of D and one of failures, 2 epochs
    assert _CountingClassifier.batches_scored == 2 * 2 * batches_per_epoch
    assert result["epoch"] in (1, 2)
    assert all(torch.equal(value, before[name]) for name, value in original.state_dict().items())  # a copy trains


def test_real_size_finetunes_more_gently_and_keeps_batch_statistics_unless_asked():
    assert finetuning_settings(CorrectRequest(distill_run=1), (1, 8, 8)) == (PAPER_LEARNING_RATE, False)
    assert finetuning_settings(CorrectRequest(distill_run=1), (3, 32, 32)) == (REAL_SIZE_LEARNING_RATE, True)
    asked = CorrectRequest(distill_run=1, learning_rate=0.01, keep_batch_statistics=False)
    assert finetuning_settings(asked, (3, 64, 64)) == (0.01, False)
    plan = correction_plan(CorrectRequest(distill_run=1), (3, 32, 32))
    assert (plan.learning_rate, plan.keep_batch_statistics) == (REAL_SIZE_LEARNING_RATE, True)
    assert f"learning rate {REAL_SIZE_LEARNING_RATE:g}, BatchNorm statistics kept" in plan.note


class _NormalisedClassifier(torch.nn.Module):
    output_kind = "logits"

    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3),
                                       torch.nn.Linear(3, 2))

    def forward(self, images):
        return torch.softmax(self.net(images), dim=1)


@pytest.mark.parametrize("keep", [True, False])
def test_kept_batch_statistics_are_the_originals_after_finetuning(keep):
    original = _NormalisedClassifier()
    norm = original.net[2]
    norm.running_mean.fill_(5.0)  # far from any batch's mean: training mode would move it
    result = finetune_one_lambda(original, 1.0, train=_labelled(40, 0), validation=_labelled(8, 2),
                                 failures=_labelled(12, 1), failure_validation=_labelled(4, 3),
                                 test=_labelled(8, 4), failure_test=_labelled(4, 5), epochs=2, batch_size=4,
                                 learning_rate=1e-2, seed=0, keep_batch_statistics=keep)
    finetuned = result["state"]["net.2.running_mean"]
    assert torch.equal(finetuned, norm.running_mean) == keep
    weights_moved = not torch.equal(result["state"]["net.1.weight"], original.net[1].weight)
    assert weights_moved  # the rest of the network trains either way
