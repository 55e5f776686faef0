"""Object-removal counterfactuals (Bayes-TrEx Fig. 2): which object does the classifier's answer rest on?"""

from __future__ import annotations

import numpy as np
import torch

from probe_core.errors import ProbeError
from probe_core.scenes.render import render_scenes
from probe_core.scenes.world import (
    COLOUR,
    COLOURS,
    PRESENT,
    ROTATION,
    SHAPE,
    SHAPES,
    SIZE,
    SIZES,
    SLOT,
    STYLE,
    STYLES,
    X,
    Y,
    describe,
)


@torch.no_grad()
def object_removal(classifier, scene: torch.Tensor, max_objects: int, target_class: int,
                   image_size: int = 32) -> dict:
    """Remove each present object in turn, re-render, and measure the drop in one class's confidence.

    Parameters
    ----------
    classifier : nn.Module
        Images (B, 3, H, W) -> probabilities (B, K).
    scene : torch.Tensor
        One scene vector, shape (8·N,).
    max_objects : int
        N, the scene's object slots.
    target_class : int
        The class whose confidence is tracked (e.g. the predicted one).
    image_size : int
        Render size the classifier expects.

    Returns
    -------
    dict
        ``confidence`` (float, on the full scene), ``probs`` (K,), ``image`` (3, H, W) and
        ``objects``: one record per present object (the :func:`describe` fields plus
        ``confidence_without``, ``drop`` = confidence − confidence_without, ``probs_without``
        (K,) and ``image_without`` (3, H, W)), sorted by ``drop``, largest first. ``decisive``
        is the slot of the object whose removal drops the confidence most (None for an
        empty scene).
    """
    scene = torch.as_tensor(scene, dtype=torch.float32).reshape(-1)
    if scene.numel() != SLOT * max_objects:
        raise ProbeError(f"a scene with {max_objects} slots has {SLOT * max_objects} numbers, got {scene.numel()}")
    objects = describe(scene, max_objects)
    variants = [scene]
    for record in objects:
        removed = scene.clone()
        removed[record["slot"] * SLOT + PRESENT] = 0.0
        variants.append(removed)
    images = render_scenes(torch.stack(variants), max_objects, image_size)
    device = next((p.device for p in classifier.parameters()), torch.device("cpu"))
    probs = classifier(images.to(device)).detach().cpu()
    num_classes = probs.shape[1]
    if not 0 <= int(target_class) < num_classes:
        raise ProbeError(f"target class {target_class} is not one of the classifier's {num_classes} classes")
    confidence = float(probs[0, target_class])
    rows = []
    for position, record in enumerate(objects, start=1):
        without = float(probs[position, target_class])
        rows.append({**record, "confidence_without": without, "drop": confidence - without,
                     "probs_without": probs[position].numpy(), "image_without": images[position]})
    rows.sort(key=lambda row: row["drop"], reverse=True)
    return {"confidence": confidence, "probs": probs[0].numpy(), "image": images[0], "objects": rows,
            "target_class": int(target_class), "decisive": rows[0]["slot"] if rows else None}


def removal_table(result: dict) -> list[dict]:
    """The counterfactual's objects as plain rows for tables and JSON (no arrays)."""
    return [{"slot": row["slot"], "object": f"{row['size']} {row['colour']} {row['style']} {row['shape']}",
             "position": f"({row['x']:.2f}, {row['y']:.2f})", "confidence_without": round(row["confidence_without"], 4),
             "drop": round(row["drop"], 4), "decisive": row["slot"] == result["decisive"]}
            for row in result["objects"]]


def scene_vector(objects: list[dict], max_objects: int = 5) -> torch.Tensor:
    """Build a scene vector (8·N,) from object records (shape, colour, size, style names; x, y; rotation_deg).

    Unused slots are absent. Handy for constructed scenes in tests, notebooks and the CLI.
    """
    if len(objects) > max_objects:
        raise ProbeError(f"{len(objects)} objects do not fit in {max_objects} slots")
    slots = np.zeros((max_objects, SLOT), dtype=np.float32)
    slots[:, X] = slots[:, Y] = 0.5
    for index, record in enumerate(objects):
        try:
            slots[index, SHAPE] = SHAPES.index(record["shape"])
            slots[index, COLOUR] = COLOURS.index(record.get("colour", "red"))
            slots[index, SIZE] = SIZES.index(record.get("size", "large"))
            slots[index, STYLE] = STYLES.index(record.get("style", "filled"))
        except ValueError as exc:
            raise ProbeError(f"object {index}: {exc}") from None
        slots[index, PRESENT] = 1.0
        slots[index, X], slots[index, Y] = float(record["x"]), float(record["y"])
        slots[index, ROTATION] = np.deg2rad(float(record.get("rotation_deg", 0.0))) % (2 * np.pi)
    return torch.from_numpy(slots.reshape(-1))
