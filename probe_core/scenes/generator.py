"""The scene renderer as a (non-differentiable) generator, its Pyro prior, and the ``scenes`` and ``colours`` data sets."""

from __future__ import annotations

import functools

import torch
from pyro.distributions import TorchDistribution, constraints
from torch import nn

from probe_core.data.datasets import ImageDataset
from probe_core.scenes.render import count_shape, render_scenes
from probe_core.scenes.world import (
    COLOUR,
    COLOURS,
    MARGIN,
    PRESENT,
    SIZE,
    X,
    Y,
    ScenePrior,
    SceneProposal,
    describe_text,
)

IMAGE_SIZE = 32
QUESTION = "how many squares are there?"
CLASS_NAMES = ("0 squares", "1 square", "2 squares", "3+ squares")
# Square counting needs data: with 6,000 scenes the classifier stayed at the class prior;
# with 24,000 it reached 78 % test accuracy (class prior 41 %).
TRAIN_SCENES, TEST_SCENES = 24000, 2000
CLASSIFIER_EPOCHS = 15
COLOUR_CLASSES = COLOURS[:3]  # red, green, blue
# Small enough to train the zoo's classifier and VAE in about a minute on 2 cores.
TRAIN_COLOURS, TEST_COLOURS = 3000, 600
# The grey background dominates the likelihood: with the ELBO (β = 1) the 15-epoch VAE collapsed to
# one grey blob (FD-clf 1294, every decoding one class); β = 0.1 keeps colour and rough shape (FD-clf 466).
COLOURS_VAE_BETA = 0.1


class ScenePriorDistribution(TorchDistribution):
    """The scene prior as a Pyro distribution over (batch, 8·N) vectors, so the Pyro model can use it."""

    arg_constraints: dict = {}
    support = constraints.real_vector

    def __init__(self, prior: ScenePrior, batch: int) -> None:
        self.prior = prior
        super().__init__(batch_shape=torch.Size([batch]), event_shape=torch.Size([prior.dim]), validate_args=False)

    def sample(self, sample_shape=torch.Size()) -> torch.Tensor:
        count = int(torch.Size(sample_shape).numel()) * self.batch_shape.numel()
        return self.prior.sample(count, torch.Generator().manual_seed(int(torch.randint(0, 2**31, (1,)))))\
            .reshape(*sample_shape, *self.batch_shape, *self.event_shape)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        flat = value.reshape(-1, self.prior.dim)
        return self.prior.log_prob(flat).reshape(value.shape[:-1])


class SceneGenerator(nn.Module):
    """Scene vectors (B, 8·N) -> rendered images (B, 3, H, W); sampled with random-walk Metropolis.

    Besides ``latent_dim`` and ``decode`` (what every generator has), it tells the samplers
    about its structured prior: ``differentiable = False``, :meth:`prior_distribution`,
    :meth:`sample_prior`, :meth:`proposal` and :meth:`describe`.
    """

    differentiable = False

    def __init__(self, prior: ScenePrior = ScenePrior(), image_size: int = IMAGE_SIZE) -> None:
        super().__init__()
        self.prior = prior
        self.image_size = image_size
        self.latent_dim = prior.dim
        self.register_buffer("_device_anchor", torch.zeros(1))  # so next(parameters/buffers) finds a device

    def decode(self, scenes: torch.Tensor) -> torch.Tensor:
        return render_scenes(scenes, self.prior.max_objects, self.image_size).to(self._device_anchor.device)

    def forward(self, scenes: torch.Tensor) -> torch.Tensor:
        return self.decode(scenes)

    def prior_distribution(self, batch: int) -> ScenePriorDistribution:
        return ScenePriorDistribution(self.prior, batch)

    def sample_prior(self, count: int, generator: torch.Generator) -> torch.Tensor:
        return self.prior.sample(count, generator)

    def proposal(self, scale: float | torch.Tensor) -> SceneProposal:
        return SceneProposal(self.prior, scale)

    def describe(self, scene: torch.Tensor) -> str:
        return describe_text(scene, self.prior.max_objects)


def scene_labels(scenes: torch.Tensor, max_objects: int) -> torch.Tensor:
    """The question's answer as a class index: the number of squares, capped at 3 ("3+")."""
    return torch.from_numpy(count_shape(scenes.numpy(), max_objects)).clamp(max=len(CLASS_NAMES) - 1).long()


@functools.lru_cache(maxsize=2)
def load_scenes_dataset(variant: str = "standard", seed: int = 0) -> ImageDataset:
    """The ``scenes`` data set: rendered scenes from a prior variant, labelled with the number of squares.

    Deterministic for a seed: 24,000 training and 2,000 test scenes, 3×32×32, rendered in
    a few seconds and kept for the process.
    """
    prior = ScenePrior.variant(variant)
    generator = torch.Generator().manual_seed(seed)
    scenes = prior.sample(TRAIN_SCENES + TEST_SCENES, generator)
    images = render_scenes(scenes, prior.max_objects, IMAGE_SIZE)
    labels = scene_labels(scenes, prior.max_objects)
    name = "scenes" if variant == "standard" else f"scenes-{variant}"
    return ImageDataset(
        name=name, train_images=images[:TRAIN_SCENES], train_labels=labels[:TRAIN_SCENES],
        test_images=images[TRAIN_SCENES:], test_labels=labels[TRAIN_SCENES:], class_names=CLASS_NAMES,
        source=f"procedural scenes ({variant} prior, up to {prior.max_objects} objects, seed {seed}), "
               f"question: {QUESTION}", default_latent_dim=prior.dim)


@functools.lru_cache(maxsize=1)
def load_colours_dataset(seed: int = 0) -> ImageDataset:
    """The ``colours`` data set: one rendered object per RGB 32×32 image, labelled with its colour.

    An embedded colour data set that needs no download, for the zoo's classifier and VAE (unlike
    ``scenes``, whose generator is the renderer): the object's shape (circle, square, triangle),
    outline, rotation and a small offset from the centre vary; the class is its colour (red,
    green or blue). Measured: on objects of the scene world's sizes and positions the zoo VAE
    decoded only the background after 15 epochs, and blurred blobs after 40, so the objects are
    large and near the centre, the question is one that a VAE's reconstructions can answer, and
    the zoo VAE is a β-VAE with β = :data:`COLOURS_VAE_BETA` < 1.
    Deterministic for a seed: 3,000 training and 600 test images.
    """
    prior = ScenePrior(max_objects=1, shape_weights=(1.0, 1.0, 1.0, 0.0))
    scenes = prior.sample(TRAIN_COLOURS + TEST_COLOURS, torch.Generator().manual_seed(seed))
    scenes[:, PRESENT] = 1.0
    scenes[:, SIZE] = 1.0
    scenes[:, COLOUR] = scenes[:, COLOUR] % len(COLOUR_CLASSES)
    scenes[:, [X, Y]] = 0.4 + 0.2 * (scenes[:, [X, Y]] - MARGIN) / (1 - 2 * MARGIN)
    images = render_scenes(scenes, prior.max_objects, IMAGE_SIZE)
    labels = scenes[:, COLOUR].long()
    return ImageDataset(
        name="colours", train_images=images[:TRAIN_COLOURS], train_labels=labels[:TRAIN_COLOURS],
        test_images=images[TRAIN_COLOURS:], test_labels=labels[TRAIN_COLOURS:], class_names=COLOUR_CLASSES,
        source=f"procedural objects (one per image, three shapes, seed {seed}), 3x32x32 RGB; "
               f"question: which colour is it?", default_latent_dim=16)
