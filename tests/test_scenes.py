"""The scene world: renderer, prior and proposal, the square-counting classifier, RWM probing, object removal."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from probe_core.errors import ProbeError
from probe_core.scenes.counterfactual import object_removal, removal_table, scene_vector
from probe_core.scenes.generator import CLASS_NAMES, SceneGenerator, load_scenes_dataset
from probe_core.scenes.render import PALETTE, render_scenes
from probe_core.scenes.world import PRESENT, SHAPE, SHAPES, SLOT, ScenePrior, SceneProposal, describe_text


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
    from probe_core.sampling import rwm

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


def test_scene_generator_switches_the_sampler_to_rwm_and_reports_scenes(scene_classifier):
    from probe_core.bayestrex import sample

    generator = SceneGenerator(ScenePrior.variant("standard"))
    result = sample(scene_classifier, generator, "high:1 square", class_names=CLASS_NAMES, chains=16, warmup=60,
                    samples=60, sampler="hmc", seed=0)
    assert result["sampler"] == "rwm"
    [target] = result["targets"]
    assert not target["failed"] and target["summary"]["chains_with_hits"] >= 8
    assert target["summary"]["achieved"]["1 square"]["mean"] > 0.85
    assert target["summary"]["z_norm_hits"] is None and "support" in target["summary"]["prior_check"]
    hit = next(s for s in target["samples"] if s["hit"])
    assert hit["confidences"][1] >= 0.9 and "square" in hit["scene"]


def test_a_prior_without_squares_still_finds_confident_one_square_scenes(scene_classifier):
    """High-confidence misclassification (paper Sec. 4.6): no square can be drawn, yet the classifier sees one."""
    from probe_core.sampling import BayesTrExPosterior, SamplerConfig, run_rwm
    from probe_core.scenes.render import count_shape
    from probe_core.targets import TargetBatch, parse_targets

    generator = SceneGenerator(ScenePrior.variant("no-squares"))
    [target] = parse_targets("high:1", CLASS_NAMES)
    posterior = BayesTrExPosterior(scene_classifier, generator, TargetBatch([target], 24))
    chains = run_rwm(posterior, SamplerConfig(num_warmup=100, num_samples=100, seed=1))
    scenes = chains.positions.reshape(-1, generator.latent_dim)
    hits = target.is_hit(chains.probs.reshape(-1, len(CLASS_NAMES)))
    assert int(hits.sum()) > 0 and int(hits.reshape(24, -1).any(1).sum()) >= 2
    assert count_shape(scenes.numpy(), 5).max() == 0  # not one square anywhere
    assert torch.isfinite(generator.prior.log_prob(scenes)).all()


@pytest.fixture(scope="module")
def scene_classifier():
    from tests.conftest import shipped_scene_classifier

    return shipped_scene_classifier().module


def test_square_counting_classifier_is_clearly_above_chance(scene_classifier):
    dataset = load_scenes_dataset()
    with torch.no_grad():
        predicted = scene_classifier(dataset.test_images).argmax(1)
    accuracy = float((predicted == dataset.test_labels).float().mean())
    majority = float(torch.bincount(dataset.test_labels).max()) / len(dataset.test_labels)
    assert accuracy > majority + 0.2, (accuracy, majority)


def test_counterfactual_finds_the_object_that_decides_the_answer(scene_classifier):
    scene = scene_vector([
        {"shape": "circle", "colour": "red", "x": 0.25, "y": 0.3},
        {"shape": "square", "colour": "green", "x": 0.72, "y": 0.7, "rotation_deg": 20},
        {"shape": "triangle", "colour": "yellow", "x": 0.3, "y": 0.75},
    ])
    result = object_removal(scene_classifier, scene, 5, target_class=CLASS_NAMES.index("1 square"))
    assert result["confidence"] > 0.5
    assert result["decisive"] == 1  # the square
    rows = removal_table(result)
    assert rows[0]["decisive"] and "square" in rows[0]["object"] and rows[0]["drop"] > 0.3
    assert all(abs(row["drop"]) < rows[0]["drop"] for row in rows[1:])
    with pytest.raises(ProbeError, match="not one of"):
        object_removal(scene_classifier, scene, 5, target_class=7)
    with pytest.raises(ProbeError, match="slots"):
        object_removal(scene_classifier, scene[:10], 5, target_class=0)


def test_scene_vectors_reject_unknown_attributes():
    with pytest.raises(ProbeError, match="object 0"):
        scene_vector([{"shape": "hexagon", "x": 0.5, "y": 0.5}])
    assert math.isclose(float(scene_vector([{"shape": "star", "x": 0.4, "y": 0.6}])[SHAPE]), 3.0)


def test_cli_samples_a_scene_target_and_explains_it_by_object_removal(workspace, tmp_path, capsys):
    import json

    from probe_core.cli import main
    from tests.conftest import register_scene_classifier

    register_scene_classifier(workspace)
    root = str(workspace.root)
    out = tmp_path / "run.json"
    assert main(["--workspace", root, "sample", "--dataset", "scenes", "--generator", "scene:novel",
                 "--target", "high:1 square", "--chains", "8", "--warmup", "40", "--samples", "40",
                 "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["sampler"] == "rwm" and "star" in " ".join(s["scene"] for s in result["targets"][0]["samples"])
    run_id = result["run_id"]
    capsys.readouterr()
    strip = tmp_path / "strip.png"
    assert main(["--workspace", root, "scenes", "counterfactual", "--run", str(run_id), "--preview", str(strip),
                 "--out", str(tmp_path / "cf.json")]) == 0
    printed = capsys.readouterr().out
    assert "confidence in '1 square'" in printed and "<- decisive" in printed
    table = json.loads((tmp_path / "cf.json").read_text())
    assert sum(row["decisive"] for row in table["objects"]) == 1 and strip.stat().st_size > 200
    assert main(["--workspace", root, "scenes", "counterfactual", "--run", "999"]) == 2
    assert "no run 999" in capsys.readouterr().err
    assert main(["--workspace", root, "scenes", "show", "--prior", "no-squares", "--count", "3"]) == 0
    assert "square" not in capsys.readouterr().out


def test_scene_variants_are_data_sets_probed_with_the_scenes_classifier(workspace):
    from probe_core.data import load_dataset

    registry = workspace.registry
    no_squares = load_dataset("scenes-no-squares")
    assert int(no_squares.train_labels.max()) == 0 and no_squares.class_names == CLASS_NAMES
    assert registry.resolve("default", "generator", "scenes-novel").id == "scene:novel"
    assert registry.resolve("default", "generator", "scenes").id == "scene:standard"
    assert registry.default_id("scenes-novel", "classifier") == registry.default_id("scenes", "classifier")
    assert [s.dataset for s in registry.default_specs("scenes-no-squares")] == ["scenes"]
    with pytest.raises(ProbeError, match="unknown scene prior"):
        registry.resolve("scene:cubes", "generator", "scenes")
