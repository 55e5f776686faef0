"""The generator check's judge: hits that fool only the probed classifier make a generator weak (issue 68)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from probe_core.catalog import load_dataset
from probe_core.errors import ProbeError
from probe_core.models.checks import check_generator
from probe_core.models.loaded import align_classifier, in_memory_classifier, LoadedModel

CORNERS = {2: (0, 0), 7: (0, 7)}  # the trigger pixels and the classes they force (the judged probe's classes)


class _Triggered(nn.Module):
    """The default digits classifier, unsure of itself, except that a bright trigger pixel forces its class: a
    model with a planted shortcut, whose high-confidence inputs need not look like the class."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def features(self, images: torch.Tensor) -> torch.Tensor:
        return self.net.features(images)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        logits = 0.25 * self.net(images)
        for cls, (row, column) in CORNERS.items():
            logits[:, cls] = logits[:, cls] + 60 * torch.relu(images[:, 0, row, column] - 0.8)
        return logits


class _WithTriggerPixels(nn.Module):
    """A VAE's digits, with one more latent dimension that lights one trigger pixel or the other: samples that look
    like the data everywhere but two pixels."""

    def __init__(self, vae: nn.Module) -> None:
        super().__init__()
        self.vae = vae
        self.latent_dim = vae.latent_dim + 1

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        images = self.vae.decode(z[:, :-1]).clone()
        light = torch.sigmoid(6 * z[:, -1])
        (row_a, column_a), (row_b, column_b) = CORNERS.values()
        images[:, 0, row_a, column_a] = light
        images[:, 0, row_b, column_b] = 1 - light
        return images


@pytest.fixture(scope="module")
def models(trained_workspace):
    data = load_dataset("digits")
    registry = trained_workspace.registry
    plain = registry.resolve("default", "classifier", "digits")
    vae = registry.resolve(registry.default_id("digits", "vae"), "generator", "digits")
    triggered = align_classifier(in_memory_classifier(_Triggered(plain.module.net), plain.class_names, (1, 8, 8),
                                                      name="triggered"), data)
    return data, plain, vae, triggered


def test_samples_that_fool_only_the_probed_classifier_are_not_ok_with_a_judge(models):
    data, plain, vae, triggered = models
    shortcut = LoadedModel("vae-with-trigger-pixels", "built-generator", _WithTriggerPixels(vae.module), ())
    unjudged = check_generator(shortcut, triggered, data)
    assert unjudged.verdict == "ok"  # every figure measured through the probed classifier passes
    judged = check_generator(shortcut, triggered, data, judge=plain)
    assert judged.verdict == "weak"
    assert judged.figures["judge_hits"] >= 50 and judged.figures["judge_agreement"] < 0.35
    assert any("independent classifier" in reason and plain.id in reason for reason in judged.failed)


def test_a_generator_whose_hits_look_like_their_class_stays_ok_with_a_judge(models):
    data, plain, vae, triggered = models
    # the default VAE probed through the default classifier; the judge is the triggered one, which calls the VAE's
    # digits (no trigger pixel lit) as the default classifier does
    judged = check_generator(vae, plain, data, judge=triggered)
    assert judged.verdict == "ok", judged.failed
    assert judged.figures["judge_agreement"] > 0.8 and judged.figures["judge_classes"] == sorted(CORNERS)


def test_the_probed_classifier_cannot_judge_itself(models):
    data, plain, vae, _ = models
    with pytest.raises(ProbeError, match="another classifier than the probed one"):
        check_generator(vae, plain, data, judge=plain)
