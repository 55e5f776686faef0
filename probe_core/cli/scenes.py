"""``probe scenes show|counterfactual``: the scene world from the command line.

Sampling uses ``probe sample --dataset scenes`` like any data set (random-walk Metropolis is
chosen automatically); the generator ``scene:no-squares`` or ``scene:novel`` swaps the prior.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch

from probe_core.bayestrex import best_samples
from probe_core.cli.common import workspace_from_args
from probe_core.data.classes import class_index
from probe_core.errors import ProbeError
from probe_core.reporting.render import image_grid, png_bytes
from probe_core.scenes.counterfactual import object_removal, removal_table
from probe_core.scenes.generator import SceneGenerator
from probe_core.scenes.world import ScenePrior, describe_text


def _hit_scene(store, run_id: int, sample_id: int | None) -> dict:
    """A stored sample of a run: the one named, else the hit closest to its target."""
    samples = store.get_samples(run_id)
    if not samples:
        raise ProbeError(f"run {run_id} has no stored samples")
    if sample_id is not None:
        chosen = [s for s in samples if s["id"] == sample_id]
        if not chosen:
            raise ProbeError(f"sample {sample_id} is not in run {run_id}")
        return chosen[0]
    return best_samples(samples, 1, 1)[0]


def _counterfactual(args: argparse.Namespace) -> int:
    workspace = workspace_from_args(args)
    run = workspace.store.get_run(args.run)
    if run is None:
        raise ProbeError(f"no run {args.run} in {workspace.root}")
    dataset = run.config.get("dataset", "scenes")
    generator = workspace.registry.resolve(run.config.get("generator") or "default", "generator", dataset,
                                           device=args.device)
    if not isinstance(generator.module, SceneGenerator):
        raise ProbeError(f"run {args.run} used the generator {generator.id}; object removal needs a run whose "
                         "generator is the scene renderer (scene:...)")
    classifier = workspace.registry.resolve(run.config.get("classifier") or "default", "classifier", dataset,
                                            device=args.device)
    max_objects = generator.module.prior.max_objects
    sample = _hit_scene(workspace.store, args.run, args.sample)
    scene = torch.as_tensor(sample["z"])
    names = classifier.class_names
    target = int(np.argmax(sample["confidences"])) if args.target_class is None else class_index(
        args.target_class, names)
    result = object_removal(classifier.module, scene, max_objects, target, generator.module.image_size)
    rows = removal_table(result)
    print(f"sample {sample['id']} of run {args.run}: {describe_text(scene, max_objects)}")
    print(f"confidence in {names[target]!r}: {result['confidence']:.3f}")
    print(f"{'slot':>4}  {'object':<32} {'position':<13} {'without':>8} {'drop':>8}")
    for row in rows:
        mark = "  <- decisive" if row["decisive"] else ""
        print(f"{row['slot']:>4}  {row['object']:<32} {row['position']:<13} {row['confidence_without']:8.3f} "
              f"{row['drop']:+8.3f}{mark}")
    if args.preview:
        pictures = torch.stack([result["image"], *[r["image_without"] for r in result["objects"]]])
        with open(args.preview, "wb") as handle:
            handle.write(png_bytes(image_grid(pictures, columns=len(pictures), scale=4)))
        print(f"wrote {args.preview}: the scene, then the scene without each object in the order above")
    if args.out:
        with open(args.out, "w") as handle:
            json.dump({"run": args.run, "sample": sample["id"], "scene": describe_text(scene, max_objects),
                       "target_class": names[target], "confidence": result["confidence"], "objects": rows},
                      handle, indent=1)
    return 0


def _show(args: argparse.Namespace) -> int:
    generator = SceneGenerator(ScenePrior.variant(args.prior))
    scenes = generator.sample_prior(args.count, torch.Generator().manual_seed(args.seed))
    for index, scene in enumerate(scenes):
        print(f"{index:>3}: {generator.describe(scene)}")
    if args.preview:
        with open(args.preview, "wb") as handle:
            handle.write(png_bytes(image_grid(generator.decode(scenes), columns=min(8, args.count), scale=4)))
        print(f"wrote {args.preview}")
    return 0


def add_scene_commands(commands: argparse._SubParsersAction) -> None:
    scenes = commands.add_parser("scenes", help="the procedural scene world: prior samples, object removal")
    sub = scenes.add_subparsers(dest="scenes_command", required=True)
    show = sub.add_parser("show", help="draw scenes from a prior and describe them")
    show.add_argument("--prior", default="standard", help="standard | no-squares | novel")
    show.add_argument("--count", type=int, default=8)
    show.add_argument("--seed", type=int, default=0)
    show.add_argument("--preview", help="write the rendered scenes as a PNG")
    show.set_defaults(handler=_show)
    counterfactual = sub.add_parser("counterfactual", help="remove each object of a sampled scene in turn and "
                                    "show the classifier's confidence drop (paper Fig. 2)")
    counterfactual.add_argument("--run", type=int, required=True, help="a `probe sample --dataset scenes` run")
    counterfactual.add_argument("--sample", type=int, help="sample id (default: the run's best hit)")
    counterfactual.add_argument("--target-class", help="class to track (default: the predicted one)")
    counterfactual.add_argument("--preview", help="write the scene and its variants as a PNG strip")
    counterfactual.add_argument("--out", help="write the table as JSON")
    counterfactual.set_defaults(handler=_counterfactual)
