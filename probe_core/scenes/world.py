"""A procedural scene world: scene descriptions, their prior, and random-walk proposals over them.

A scene has up to ``max_objects`` object slots. Each slot is 8 numbers of a flat
vector (so scenes batch as (B, 8·N) tensors like latent codes):

====  ==========  ==============================================
0     present     0 or 1
1     shape       index into :data:`SHAPES`
2     colour      index into :data:`COLOURS`
3     size        0 small, 1 large
4     style       0 filled, 1 outlined
5, 6  x, y        centre, in [0, 1] (image width and height)
7     rotation    radians in [0, 2π)
====  ==========  ==============================================

The prior is independent per slot and attribute: presence ~ Bernoulli(p),
categorical attributes ~ their weights, positions uniform on [margin, 1 − margin],
rotation uniform. Attributes of absent slots keep their prior too, so the prior is
one proper distribution over the whole vector and a sampler that moves absent slots
around is still exact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from probe_core.errors import ProbeError
from probe_core.mcmc.rwm import CategoricalResampleProposal

SHAPES = ("circle", "square", "triangle", "star")
NOVEL_SHAPE = "star"
COLOURS = ("red", "green", "blue", "yellow", "purple", "cyan")
SIZES = ("small", "large")
STYLES = ("filled", "outlined")
SLOT = 8
PRESENT, SHAPE, COLOUR, SIZE, STYLE, X, Y, ROTATION = range(SLOT)
DISCRETE_FIELDS = {PRESENT: 2, SHAPE: len(SHAPES), COLOUR: len(COLOURS), SIZE: len(SIZES), STYLE: len(STYLES)}
MARGIN = 0.15

VARIANTS = {
    "standard": (1.0, 1.0, 1.0, 0.0),     # circles, squares, triangles; never the novel star
    "no-squares": (1.0, 0.0, 1.0, 0.0),   # the high-confidence-misclassification prior (paper Sec. 4.6)
    "novel": (1.0, 0.0, 1.0, 1.0),        # stars in, squares out (novel-class extrapolation, Sec. 4.7)
}


@dataclass(frozen=True)
class ScenePrior:
    """The prior over scene vectors.

    Parameters
    ----------
    max_objects : int
        Object slots N.
    presence : float
        Probability that a slot holds an object.
    shape_weights : tuple of float
        Unnormalised weights of :data:`SHAPES` (a zero weight excludes a shape).
    """

    max_objects: int = 5
    presence: float = 0.6
    shape_weights: tuple[float, ...] = VARIANTS["standard"]

    def __post_init__(self) -> None:
        if self.max_objects < 1 or not 0 < self.presence < 1:
            raise ProbeError("a scene prior needs max_objects ≥ 1 and presence in (0, 1)")
        if len(self.shape_weights) != len(SHAPES) or min(self.shape_weights) < 0 or sum(self.shape_weights) <= 0:
            raise ProbeError(f"shape_weights must be {len(SHAPES)} non-negative numbers, not all zero")

    @classmethod
    def variant(cls, name: str, max_objects: int = 5) -> "ScenePrior":
        if name not in VARIANTS:
            raise ProbeError(f"unknown scene prior {name!r}; use one of {', '.join(VARIANTS)}")
        return cls(max_objects=max_objects, shape_weights=VARIANTS[name])

    @property
    def dim(self) -> int:
        return SLOT * self.max_objects

    def category_probabilities(self, field: int) -> np.ndarray:
        """Prior probabilities of a discrete field's categories."""
        if field == PRESENT:
            return np.array([1 - self.presence, self.presence])
        if field == SHAPE:
            weights = np.asarray(self.shape_weights, dtype=np.float64)
            return weights / weights.sum()
        return np.full(DISCRETE_FIELDS[field], 1.0 / DISCRETE_FIELDS[field])

    def sample(self, count: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """Scenes drawn from the prior, shape (count, 8·N), float32."""
        generator = generator or torch.Generator().manual_seed(0)
        slots = torch.zeros(count, self.max_objects, SLOT)
        for field in DISCRETE_FIELDS:
            probs = torch.tensor(self.category_probabilities(field), dtype=torch.float32)
            slots[..., field] = torch.multinomial(probs, count * self.max_objects, replacement=True,
                                                  generator=generator).view(count, self.max_objects).float()
        uniform = torch.rand(count, self.max_objects, 3, generator=generator)
        slots[..., X] = MARGIN + (1 - 2 * MARGIN) * uniform[..., 0]
        slots[..., Y] = MARGIN + (1 - 2 * MARGIN) * uniform[..., 1]
        slots[..., ROTATION] = 2 * math.pi * uniform[..., 2]
        return slots.reshape(count, self.dim)

    def log_prob(self, scenes: torch.Tensor) -> torch.Tensor:
        """Log prior density of (B, 8·N) scenes, (B,); −inf outside the support.

        Categories must be integers in range and positions inside the margins; rotation
        is taken modulo 2π (the random walk wraps it).
        """
        slots = scenes.reshape(len(scenes), self.max_objects, SLOT)
        total = torch.zeros(len(scenes), dtype=scenes.dtype, device=scenes.device)
        for field, count in DISCRETE_FIELDS.items():
            values = slots[..., field]
            index = values.round().long().clamp(0, count - 1)
            valid = (values == index.to(values.dtype)) & (values >= 0) & (values < count)
            log_probs = torch.log(torch.tensor(self.category_probabilities(field), dtype=scenes.dtype,
                                               device=scenes.device))
            term = torch.where(valid, log_probs[index], torch.full_like(values, -math.inf))
            total = total + term.sum(dim=1)
        inside = ((slots[..., [X, Y]] >= MARGIN) & (slots[..., [X, Y]] <= 1 - MARGIN)).all(dim=2).all(dim=1)
        position_density = -2 * self.max_objects * math.log(1 - 2 * MARGIN) - self.max_objects * math.log(2 * math.pi)
        return torch.where(inside, total + position_density, torch.full_like(total, -math.inf))

    def discrete_dims(self) -> tuple[list[int], list[int]]:
        """Coordinates holding categories, and the number of categories of each."""
        dims, counts = [], []
        for slot in range(self.max_objects):
            for field, count in DISCRETE_FIELDS.items():
                dims.append(slot * SLOT + field)
                counts.append(count)
        return dims, counts

    def continuous_dims(self) -> list[int]:
        return [slot * SLOT + field for slot in range(self.max_objects) for field in (X, Y, ROTATION)]


def wrap_rotation(scenes: torch.Tensor, max_objects: int) -> torch.Tensor:
    """Rotations taken modulo 2π (the circle is the rotation's support)."""
    slots = scenes.reshape(len(scenes), max_objects, SLOT).clone()
    slots[..., ROTATION] = torch.remainder(slots[..., ROTATION], 2 * math.pi)
    return slots.reshape(len(scenes), -1)


class SceneProposal:
    """Random-walk proposal over scenes: Gaussian steps on positions and rotation, categorical resampling.

    Each discrete attribute is redrawn uniformly over its categories with probability
    ``resample_rate``; continuous attributes take Gaussian steps of sd ``scale`` (positions
    in image units, rotation scaled by 2π). Both moves are symmetric (rotation wraps on the
    circle), so the log proposal ratio is 0 and the prior enters through the target density.
    """

    def __init__(self, prior: ScenePrior, scale: float | torch.Tensor = 0.05, resample_rate: float = 0.05) -> None:
        self.prior = prior
        self.scale = scale
        dims, counts = prior.discrete_dims()
        self.categorical = CategoricalResampleProposal(dims, counts, resample_rate)
        self.continuous = torch.tensor(prior.continuous_dims())
        rotation = torch.zeros(prior.dim)
        rotation[[slot * SLOT + ROTATION for slot in range(prior.max_objects)]] = 1.0
        self.step_scale = 1.0 + rotation * (2 * math.pi - 1.0)

    def __call__(self, generator: torch.Generator, position: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        proposed, _ = self.categorical(generator, position)
        noise = torch.randn(position.shape, generator=generator).to(position.device)
        mask = torch.zeros(position.shape[1], device=position.device)
        mask[self.continuous] = 1.0
        proposed = proposed + noise * mask * self.step_scale.to(position.device) * self.scale
        return wrap_rotation(proposed, self.prior.max_objects), torch.zeros(len(position), device=position.device)


def describe(scene: torch.Tensor | np.ndarray, max_objects: int) -> list[dict]:
    """The present objects of one scene vector (8·N,) as readable records."""
    slots = np.asarray(scene, dtype=np.float64).reshape(max_objects, SLOT)
    objects = []
    for index, slot in enumerate(slots):
        if round(slot[PRESENT]) != 1:
            continue
        objects.append({
            "slot": index, "shape": SHAPES[int(round(slot[SHAPE]))], "colour": COLOURS[int(round(slot[COLOUR]))],
            "size": SIZES[int(round(slot[SIZE]))], "style": STYLES[int(round(slot[STYLE]))],
            "x": round(float(slot[X]), 3), "y": round(float(slot[Y]), 3),
            "rotation_deg": round(math.degrees(slot[ROTATION]) % 360, 1),
        })
    return objects


def describe_text(scene: torch.Tensor | np.ndarray, max_objects: int) -> str:
    """One line: ``large red filled square at (0.31, 0.70); ...``."""
    objects = describe(scene, max_objects)
    if not objects:
        return "an empty scene"
    return "; ".join(f"{o['size']} {o['colour']} {o['style']} {o['shape']} at ({o['x']:.2f}, {o['y']:.2f})"
                     for o in objects)
