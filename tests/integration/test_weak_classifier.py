"""A classifier at chance is refused before any run, and never vouches for a generator."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from probe_core.catalog import load_dataset
from probe_core.models.architectures import make_vae
from probe_core.models.checks import ModelCheckError, check_classifier, check_generator
from probe_core.models.loaded import LoadedModel, align_classifier, in_memory_classifier
from probe_core.runs.validation import check_record, checked_models


class ConstantClassifier(nn.Module):
    """Says class 1 for every image: what the default classifier did on the SVHN-like set (10.8 %)."""

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        logits = torch.zeros(len(images), 10)
        logits[:, 1] = 5.0
        return logits


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits")


def _constant(digits):
    names = digits.class_names
    return align_classifier(in_memory_classifier(ConstantClassifier(), names, digits.image_shape, name="constant"),
                            digits)


def test_a_classifier_at_chance_is_refused_with_its_accuracy_and_what_to_do(digits):
    classifier = _constant(digits)
    check = check_classifier(classifier, digits)
    assert check.near_chance and not check.usable
    assert check.accuracy <= check.chance + 0.05  # a constant answer is right on one class's share of images
    with pytest.raises(ModelCheckError) as refused:
        checked_models(classifier, digits)
    message = str(refused.value)
    assert f"{check.accuracy:.1%}" in message and "chance" in message and "--allow-weak-classifier" in message


def test_a_near_chance_classifier_the_tool_trained_is_told_its_recipe_trained_longer(digits, trained_workspace):
    """The refusal names the fix as a command that runs as written (no placeholders), from the stored recipe."""
    from dataclasses import replace

    trained = trained_workspace.registry.resolve("default", "classifier", "digits")
    # the stored recipe of the zoo's classifier, with weights that say class 1 for every image
    at_chance = replace(_constant(digits), record=trained.record)
    check = check_classifier(at_chance, digits)
    assert check.near_chance and check.remedy is not None
    epochs = trained.record["spec"]["epochs"]
    assert check.remedy.spec.epochs == 2 * epochs and check.remedy.spec.kind == "classifier"
    assert f"`{check.remedy.command}`" in check.message and "--epochs N" not in check.message
    expected = f"probe models train --dataset digits --kind classifier --epochs {2 * epochs}"
    assert check.remedy.command.startswith(expected)
    assert check.to_dict()["remedy"]["command"] == check.remedy.command
    # a model the tool did not train has no recipe to repeat: no command is made up
    assert check_classifier(_constant(digits), digits).remedy is None


def test_insisting_runs_but_flags_the_record(digits):
    classifier = _constant(digits)
    classifier_check, _ = checked_models(classifier, digits, allow_weak_classifier=True)
    record = check_record(classifier_check, None)
    assert record["classifier"]["near_chance"] and "near chance" in record["classifier_warning"]


def test_a_generator_is_never_ok_by_a_classifier_that_has_not_learned(digits, trained_workspace):
    generator = trained_workspace.registry.resolve("default", "generator", "digits")
    learned = trained_workspace.registry.resolve("default", "classifier", "digits")
    assert check_generator(generator, learned, digits).verdict == "ok"  # the shipped default VAE passes
    verdict = check_generator(generator, _constant(digits), digits)
    assert verdict.verdict == "unjudged" and verdict.weak
    assert "cannot be judged" in verdict.warning and "chance" in verdict.warning
    untrained = LoadedModel("untrained-vae", "vae", make_vae(digits.image_shape, 8).eval(), (), {"metrics": {}})
    assert check_generator(untrained, _constant(digits), digits).verdict != "ok"


def test_the_cli_refuses_sampling_with_a_classifier_at_chance_and_stores_nothing(trained_workspace, tmp_path,
                                                                                 capsys):
    from probe_core.cli import main

    plugin = tmp_path / "constant.py"
    plugin.write_text("import torch\nfrom torch import nn\n"
                      "class_names = [str(i) for i in range(10)]\ninput_shape = (1, 8, 8)\nclassifier_outputs = \"logits\"\n"
                      "class Constant(nn.Module):\n"
                      "    def forward(self, x):\n"
                      "        out = torch.zeros(len(x), 10)\n"
                      "        out[:, 1] = 5.0\n"
                      "        return out\n"
                      "def classifier():\n    return Constant()\n")
    runs_before = len(trained_workspace.store.list_runs())
    code = main(["--workspace", str(trained_workspace.root), "sample", "--target", "high:7", "--classifier",
                 str(plugin), "--chains", "2", "--warmup", "2", "--samples", "2"])
    assert code == 2 and "near chance" in capsys.readouterr().err
    assert len(trained_workspace.store.list_runs()) == runs_before


def test_a_request_made_with_a_classifier_at_chance_is_refused_when_made(digits, trained_workspace):
    """The dashboard holds its models resolved: building the request checks the classifier, so a refused one starts
    nothing, and insisting builds it."""
    from probe_core.bayestrex.request import SampleRequest

    registry = trained_workspace.registry
    runs_before = len(trained_workspace.store.list_runs())
    with pytest.raises(ModelCheckError, match="near chance"):
        SampleRequest.build(registry, dataset="digits", target="high:7", classifier=_constant(digits), chains=2)
    assert len(trained_workspace.store.list_runs()) == runs_before
    insisted = SampleRequest.build(registry, dataset="digits", target="high:7", classifier=_constant(digits), chains=2,
                                   allow_weak_classifier=True)
    assert insisted.allow_weak_classifier and insisted.classifier == _constant(digits).id


def test_the_judge_counts_the_hits_it_puts_in_the_target_class(digits):
    from probe_core.models.checks import judge_agreement

    judge = _constant(digits).module  # always says "1"
    images = digits.test_images[:12]
    assert judge_agreement(judge, images, (1,)) == (12, 12)
    assert judge_agreement(judge, images, (7,)) == (0, 12)
    assert judge_agreement(judge, images.numpy(), (0, 1)) == (12, 12)  # a pair, and arrays as stored
    assert judge_agreement(judge, None, (1,)) == (0, 0)


class _ShuffledCodes(nn.Module):
    """The default VAE with its codes handed to the wrong images: each image gets its neighbour's code, so
    prior samples are the default's but reconstructions are of other images."""

    def __init__(self, vae: nn.Module) -> None:
        super().__init__()
        self.vae, self.latent_dim = vae, vae.latent_dim

    def encode(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_variance = self.vae.encode(images)
        return mean.roll(1, 0), log_variance.roll(1, 0)

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        return self.vae.decode(codes)


def test_a_generator_whose_reconstructions_lose_the_class_is_weak(digits, trained_workspace):
    registry = trained_workspace.registry
    learned = registry.resolve("default", "classifier", "digits")
    default = check_generator(registry.resolve("default", "generator", "digits"), learned, digits)
    assert default.figures["reconstruction_class_ratio"] >= 0.8  # the threshold, which the default passes
    inner = registry.resolve("default", "generator", "digits").module
    shuffled = LoadedModel("shuffled-vae", "vae", _ShuffledCodes(inner).eval(), (), {"metrics": {}})
    check = check_generator(shuffled, learned, digits)
    # a neighbour's code keeps the class only where the neighbour has it: at most a few classes' share
    assert check.figures["reconstruction_class_ratio"] < 0.5 and check.weak
    assert any("reconstructions lose the class" in reason for reason in check.failed)
    assert "Defuse" in check.warning and check.figures["real_accuracy"] == default.figures["real_accuracy"]
