"""The scene world: renderer, prior and proposal, the square-counting classifier, RWM probing, object removal."""

from __future__ import annotations

import pytest
import torch

from probe_core.errors import ProbeError
from probe_core.scenes.counterfactual import object_removal, removal_table, scene_vector
from probe_core.scenes.generator import CLASS_NAMES, SceneGenerator, load_scenes_dataset
from probe_core.scenes.world import (
    ScenePrior,
)

pytestmark = pytest.mark.slow  # trains models or runs long steps: left out of make test-fast


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
    from probe_core.sampling.targets import TargetBatch, parse_targets
    from probe_core.scenes.render import count_shape

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
    from helpers import shipped_scene_classifier

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




def test_cli_samples_a_scene_target_and_explains_it_by_object_removal(workspace, tmp_path, capsys):
    import json

    from helpers import register_scene_classifier

    from probe_core.cli import main

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
    from probe_core.catalog import load_dataset

    registry = workspace.registry
    no_squares = load_dataset("scenes-no-squares")
    assert int(no_squares.train_labels.max()) == 0 and no_squares.class_names == CLASS_NAMES
    assert registry.resolve("default", "generator", "scenes-novel").id == "scene:novel"
    assert registry.resolve("default", "generator", "scenes").id == "scene:standard"
    assert registry.default_id("scenes-novel", "classifier") == registry.default_id("scenes", "classifier")
    assert [s.dataset for s in registry.default_specs("scenes-no-squares")] == ["scenes"]
    with pytest.raises(ProbeError, match="unknown generator .scene:cubes."):
        registry.resolve("scene:cubes", "generator", "scenes")
