"""SmoothGrad through Captum on a model whose answer depends on one known pixel."""

import numpy as np
import pytest
import torch

from probe_core.errors import ProbeError
from probe_core.reporting.saliency import overlay, smoothgrad


class OnePixelModel(torch.nn.Module):
    """Two classes; the logit difference depends only on pixel (2, 5)."""

    def forward(self, images):
        evidence = 8.0 * images[:, 0, 2, 5] + 0.0 * images.sum(dim=(1, 2, 3))
        return torch.softmax(torch.stack([evidence, -evidence], dim=1), dim=1)


def test_smoothgrad_finds_the_only_pixel_that_matters():
    images = torch.rand(3, 1, 8, 8, generator=torch.Generator().manual_seed(0)) * 0.2
    maps = smoothgrad(OnePixelModel(), images, 0, noise_level=0.1, samples=20)
    assert maps.shape == (3, 8, 8)
    flat = maps.flatten(1)
    assert (flat.argmax(1) == 2 * 8 + 5).all()
    assert torch.allclose(flat.max(1).values, torch.ones(3))
    again = smoothgrad(OnePixelModel(), images, 0, noise_level=0.1, samples=20)
    assert torch.equal(maps, again)  # seeded


def test_smoothgrad_rejects_bad_input_and_overlay_marks_the_map_in_red():
    with pytest.raises(ProbeError, match="NaN"):
        smoothgrad(OnePixelModel(), torch.full((1, 1, 8, 8), float("nan")), 0)
    with pytest.raises(ProbeError, match="B, C, H, W"):
        smoothgrad(OnePixelModel(), torch.zeros(8, 8), 0)
    heat = np.zeros((8, 8), np.float32)
    heat[2, 5] = 1.0
    picture = overlay(torch.full((1, 8, 8), 0.5), heat)
    assert picture.shape == (8, 8, 3) and picture.dtype == np.uint8
    assert picture[2, 5, 0] > picture[2, 5, 1] and picture[0, 0, 0] == picture[0, 0, 1]
