"""The scene world's renderer, prior and proposal, without a classifier."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from probe_core.errors import ProbeError
from probe_core.scenes.counterfactual import scene_vector
from probe_core.scenes.render import PALETTE, render_scenes
from probe_core.scenes.world import (
    PRESENT,
    SHAPE,
    SHAPES,
    SLOT,
    ScenePrior,
    SceneProposal,
    describe_text,
)


def test_renderer_is_deterministic_and_draws_what_the_description_says():
    prior = ScenePrior()
    scenes = prior.sample(300, torch.Generator().manual_seed(1))
    first, second = render_scenes(scenes, 5), render_scenes(scenes.clone(), 5)
    assert first.shape == (300, 3, 32, 32) and first.dtype == torch.float32
    assert torch.equal(first, second)
    one = scene_vector([{"shape": "square", "colour": "blue", "size": "large", "x": 0.5, "y": 0.5}])
    image = render_scenes(one[None], 5)[0]
    assert torch.allclose(image[:, 16, 16], torch.from_numpy(PALETTE[2]))  # the centre is the blue square
    assert torch.allclose(image[:, 1, 1], torch.tensor([0.55, 0.55, 0.55]))  # the corner is background
    outlined = scene_vector([{"shape": "square", "colour": "blue", "style": "outlined", "x": 0.5, "y": 0.5}])
    assert torch.allclose(render_scenes(outlined[None], 5)[0][:, 16, 16], torch.tensor([0.55, 0.55, 0.55]))
    assert describe_text(one, 5) == "large blue filled square at (0.50, 0.50)"


def test_prior_log_prob_is_minus_infinity_outside_the_support():
    prior = ScenePrior.variant("no-squares")
    scenes = prior.sample(64, torch.Generator().manual_seed(0))
    assert torch.isfinite(prior.log_prob(scenes)).all()
    assert not (scenes.reshape(64, 5, SLOT)[..., SHAPE] == SHAPES.index("square")).any()
    square = scenes.clone()
    square[:, SHAPE] = SHAPES.index("square")
    assert torch.isneginf(prior.log_prob(square)).all()
    half = scenes.clone()
    half[:, PRESENT] = 0.5
    assert torch.isneginf(prior.log_prob(half)).all()


def test_rwm_with_a_flat_likelihood_samples_the_prior():
    """Start far from the prior; with a constant classifier the chains must forget that and match p(scene)."""
    from probe_core.mcmc import rwm

    prior = ScenePrior(max_objects=3, presence=0.3, shape_weights=(3.0, 1.0, 1.0, 0.0))
    chains = 512
    start = prior.sample(chains, torch.Generator().manual_seed(0)).reshape(chains, 3, SLOT)
    start[..., PRESENT] = 1.0
    start[..., SHAPE] = SHAPES.index("triangle")
    generator = torch.Generator().manual_seed(0)
    proposal = SceneProposal(prior, scale=0.05, resample_rate=0.1)
    state = rwm.init(start.reshape(chains, -1), lambda z: (prior.log_prob(z), torch.zeros(len(z), 1)))
    presence, circles = [], []
    for iteration in range(900):
        state, _ = rwm.step(generator, state, lambda z: (prior.log_prob(z), torch.zeros(len(z), 1)), proposal)
        if iteration >= 300 and iteration % 50 == 0:
            slots = state.position.reshape(chains, 3, SLOT)
            presence.append(float(slots[..., PRESENT].mean()))
            circles.append(float((slots[..., SHAPE] == SHAPES.index("circle")).float().mean()))
    # 12 snapshots of 1,536 slots each, 50 steps apart: standard errors about 0.004 and 0.004.
    assert abs(np.mean(presence) - 0.3) < 0.025
    assert abs(np.mean(circles) - 0.6) < 0.025
    assert torch.isfinite(prior.log_prob(state.position)).all()


def test_scene_vectors_reject_unknown_attributes():
    with pytest.raises(ProbeError, match="object 0"):
        scene_vector([{"shape": "hexagon", "x": 0.5, "y": 0.5}])
    assert math.isclose(float(scene_vector([{"shape": "star", "x": 0.4, "y": 0.6}])[SHAPE]), 3.0)
