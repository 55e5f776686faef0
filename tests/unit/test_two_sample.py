"""The classifier two-sample test beside the judge (issue 99): near 50 % for two draws of one distribution, near
100 % for blurred copies of real images."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from probe_core.errors import ProbeError
from probe_core.models.two_sample import two_sample_accuracy


def _textures(count: int, seed: int) -> torch.Tensor:
    """Images (count, 1, 16, 16) of pixel noise over a random brightness: sharp, like real images' grain."""
    rng = torch.Generator().manual_seed(seed)
    return (0.3 * torch.rand(count, 1, 1, 1, generator=rng) + 0.7 * torch.rand(count, 1, 16, 16, generator=rng))


def test_two_draws_of_one_distribution_are_indistinguishable_and_blurs_are_told_apart():
    real = _textures(200, 0)
    same = two_sample_accuracy(_textures(200, 1), real, seed=0)
    assert same["images"] == 200 and 0.35 <= same["accuracy"] <= 0.65
    blurred = F.avg_pool2d(_textures(200, 2), 3, stride=1, padding=1)  # a decoder's smoothing
    assert two_sample_accuracy(blurred, real, seed=0)["accuracy"] >= 0.9


def test_bad_two_sample_input_is_the_projects_error():
    with pytest.raises(ProbeError, match="at least"):
        two_sample_accuracy(torch.rand(5, 1, 8, 8), torch.rand(50, 1, 8, 8))
    with pytest.raises(ProbeError, match="one shape"):
        two_sample_accuracy(torch.rand(50, 1, 8, 8), torch.rand(50, 3, 8, 8))
