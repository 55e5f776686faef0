"""The scene world probed: the README's table of "1 square" / "2 squares" runs and the object-removal figures.

    .venv/bin/python benchmarks/scenes_probe.py            # trains the zoo's scenes classifier if missing (~4 min)
    .venv/bin/python benchmarks/scenes_probe.py --shipped  # uses the weights shipped in tests/data instead
    .venv/bin/python benchmarks/scenes_probe.py --quick    # shipped weights, 8 chains, 20 + 20: a smoke run

Each row is one random-walk Metropolis run (the scene renderer has no gradients) with the scenes
classifier; the counterfactual removes each object of a run's most confident hit in turn.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from probe_core.bayestrex import sample  # noqa: E402
from probe_core.catalog import load_dataset  # noqa: E402
from probe_core.models import ModelSpec  # noqa: E402
from probe_core.runs.workspace import Workspace  # noqa: E402
from probe_core.scenes.counterfactual import object_removal  # noqa: E402
from probe_core.scenes.generator import SceneGenerator  # noqa: E402
from probe_core.scenes.world import ScenePrior, describe_text  # noqa: E402

ROWS = (  # (prior, target, chains, warm-up, samples)
    ("standard", "high:1 square", 32, 150, 150),
    ("no-squares", "high:1 square", 32, 150, 150),
    ("novel", "high:1 square", 32, 150, 150),
    ("standard", "high:2 squares", 64, 300, 200),
)


def scenes_classifier(workspace: Workspace, shipped: bool):
    """The zoo's default scenes classifier: trained by the zoo's recipe, or the tests' shipped copy of it."""
    dataset = load_dataset("scenes")
    spec = ModelSpec(dataset="scenes", kind="classifier", seed=0).resolved(dataset)
    if shipped and not workspace.registry.exists(spec.model_id()):
        from probe_core.models.architectures import CountingClassifier

        module = CountingClassifier(dataset.image_shape, dataset.num_classes)
        module.load_state_dict(torch.load(ROOT / "tests" / "data" / "scenes-classifier.pt", weights_only=True))
        record = asdict(spec)
        record.update(architecture={"class": "CountingClassifier", "args": {
            "image_shape": list(dataset.image_shape), "num_classes": dataset.num_classes}},
            class_names=list(dataset.class_names), original_classes=list(dataset.original_classes),
            dataset_view=dataset.name, image_shape=list(dataset.image_shape))
        workspace.registry.register(module, record, {"shipped": True}, spec.model_id())
    return workspace.registry.get_or_train(spec)


def best_hit(store, run_id: int) -> tuple[torch.Tensor, int] | None:
    """The most confident stored hit's scene vector (D,) and predicted class index."""
    hits = [s for s in store.get_samples(run_id) if s["hit"]]
    if not hits:
        return None
    best = max(hits, key=lambda s: float(s["confidences"].max()))
    return torch.as_tensor(best["z"]), int(best["confidences"].argmax())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workspace", default="workspace")
    parser.add_argument("--shipped", action="store_true", help="use tests/data/scenes-classifier.pt")
    parser.add_argument("--quick", action="store_true", help="shipped weights, 8 chains, 20 + 20 (a smoke run)")
    args = parser.parse_args()
    torch.set_num_threads(2)
    workspace = Workspace(args.workspace)
    classifier = scenes_classifier(workspace, args.shipped or args.quick)
    names = classifier.class_names
    print(f"classifier {classifier.id}")
    print("| generator prior | target | achieved | hit rate | chains with hits |\n|---|---|---|---|---|")
    for prior, target, chains, warmup, samples in ROWS:
        if args.quick:
            chains, warmup, samples = 8, 20, 20
        generator = SceneGenerator(ScenePrior.variant(prior))
        run_id = workspace.store.create_run("sample", {"dataset": "scenes", "target": target, "benchmark": True,
                                                       "generator": f"scene:{prior}", "classifier": classifier.id})
        workspace.store.start_run(run_id)
        result = sample(classifier.module, generator, target, class_names=names, chains=chains, warmup=warmup,
                        samples=samples, seed=0, store=workspace.store, run_id=run_id)
        workspace.store.finish_run(run_id, "done", result={"benchmark": "scenes_probe"})
        entry = result["targets"][0]
        achieved = next(iter(entry["summary"]["achieved"].values()))
        chains_hit = entry["summary"].get("chains_with_hits", "?")
        status = f"{entry['hit_rate'] * 100:.0f} %" + (": failed" if entry["failed"] else "")
        print(f"| {prior} ({chains} chains, {warmup} + {samples}) | {target} ≥ 0.9 | {achieved['mean']:.2f} ± "
              f"{achieved['sd']:.2f} | {status} | {chains_hit} / {chains} |", flush=True)
        found = best_hit(workspace.store, run_id) if target == "high:1 square" and prior != "novel" else None
        if found is not None:
            scene, predicted = found
            removal = object_removal(classifier.module, scene, generator.prior.max_objects, predicted)
            drops = ", ".join(f"{o['shape'] if 'shape' in o else 'object'} {o['confidence_without']:.3f}"
                              for o in removal["objects"])
            print(f"  counterfactual on the best hit ({describe_text(scene, generator.prior.max_objects)}): "
                  f"{removal['confidence']:.3f} in {names[predicted]!r}; without each object: {drops}", flush=True)


if __name__ == "__main__":
    main()
