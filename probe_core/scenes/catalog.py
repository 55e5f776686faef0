"""What the scene world adds to the catalogue: its data sets and the ``scene:`` generator source.

The three counting data sets share the ``scenes`` classifier (the variants have no squares, so a
classifier of their own would learn one class); their default generator is the renderer whose
prior made them, and no VAE or GAN is trained for them. ``colours`` (one object per image; which
colour?) is the embedded colour data set with the zoo's classifier and VAE (a GAN on request).
"""

from __future__ import annotations

from probe_core.data.datasets import DatasetEntry
from probe_core.sampling.protocols import GeneratorSource
from probe_core.scenes.generator import (
    CLASSIFIER_EPOCHS,
    COLOURS_VAE_BETA,
    SceneGenerator,
    load_colours_dataset,
    load_scenes_dataset,
)
from probe_core.scenes.world import ScenePrior

VARIANTS = {"scenes": "standard", "scenes-no-squares": "no-squares", "scenes-novel": "novel"}
SCENE_GENERATORS = tuple(f"scene:{variant}" for variant in VARIANTS.values())


def build_scene_generator(reference: str) -> SceneGenerator:
    """The renderer with a prior variant: ``scene:standard``, ``scene:no-squares``, ``scene:novel``."""
    return SceneGenerator(ScenePrior.variant(reference.split(":", 1)[1]))


SCENE_SOURCE = GeneratorSource(prefix="scene", choices=SCENE_GENERATORS, build=build_scene_generator)


def _entry(name: str, description: str) -> DatasetEntry:
    variant = VARIANTS[name]
    return DatasetEntry(
        name, description, lambda _dir: load_scenes_dataset(variant), classifier_dataset="scenes",
        default_generator=f"scene:{variant}", generator_choices=SCENE_GENERATORS, zoo_generators=(),
        classifier_architecture="CountingClassifier", classifier_epochs=CLASSIFIER_EPOCHS)


SCENE_DATASETS = (
    _entry("scenes", "procedural 32x32 scenes of shapes (embedded); question: how many squares are there?"),
    _entry("scenes-no-squares", "the scene world with squares removed from the prior (every label is 0)"),
    _entry("scenes-novel", "the scene world with a novel shape (stars) and no squares (every label is 0)"),
    DatasetEntry("colours", "one rendered object per 32x32 RGB image (embedded colour data); question: which "
                 "colour is it? (red, green, blue)", lambda _dir: load_colours_dataset(), zoo_generators=("vae",),
                 vae_beta=COLOURS_VAE_BETA),
)
