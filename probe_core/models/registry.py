"""The model registry: trained models as ``state_dict`` files plus metadata in the store.

A model is identified by its :class:`ModelSpec` (data set, kind, class subset,
variant, hyperparameters, seed). Lookups never train: :meth:`ModelRegistry.load` and
:meth:`ModelRegistry.resolve` raise :class:`ModelNotFoundError` for a model that is not
trained yet. Training is always asked for by name: :meth:`ModelRegistry.get_or_train`
(a spec) and :meth:`ModelRegistry.get_or_train_reference` (a reference whose default may
still need training), both with progress.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import pickle
import re
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from probe_core.catalog import (
    DATASETS,
    classifier_dataset,
    dataset_entry,
    generator_dataset,
    generator_source,
    load_dataset,
)
from probe_core.data import DATA_DIR_ENV, DEFAULT_DATASET, REAL_SIZE, ImageDataset, is_real_size, split_view
from probe_core.data.classes import ClassMatch, match_classes, split_class_map, with_class_map
from probe_core.data.files import is_file_reference, reference_pin, short_name
from probe_core.errors import DataError, ModelNotFoundError, ProbeError, check_number_ranges, excerpt
from probe_core.models.aligned import AlignedClassifier
from probe_core.models.architectures import (
    CLASSIFIER_ARCHITECTURES,
    VAE_ARCHITECTURES,
    GANGenerator,
    ProbabilityModel,
    default_vae_architecture,
)
from probe_core.models.autoencoder import AUTOENCODER_ARCHITECTURES, flow_fits, spatial_code_fits, train_autoencoder
from probe_core.models.density import has_codes_enough
from probe_core.models.devices import resolve_device
from probe_core.models.files import is_model_file_reference, load_model_file, model_file_pin
from probe_core.models.plugins import (
    PluginError,
    is_plugin_reference,
    load_plugin_reference,
    plugin_pin,
    validate_classifier,
)
from probe_core.models.resized import seen_at
from probe_core.models.training import (
    FEATURE_NETWORK_SEED_OFFSET,
    PERCEPTUAL_NETWORKS,
    epochs_of,
    feature_frechet_distance,
    perceptual_epochs,
    train_classifier,
    train_gan,
    train_vae,
)
from probe_core.progress import Reporter
from probe_core.sampling.protocols import ClassConditionalPrior, GeneratorCapabilities, generator_capabilities
from probe_core.store import Store
from probe_core.team.accounts import Actor, Permission, refuse_unlisted, require

log = logging.getLogger(__name__)

KINDS = ("classifier", "vae", "gan", "rae")
PLUGIN_ARCHITECTURE = "plugin"  # a registered model whose module comes from a plugin file
MODEL_FILE_ARCHITECTURE = "modelfile"  # ... or from a TorchScript / torch.export file with its sidecar
MODEL_SEED_ENV = "PROBE_MODEL_SEED"
GENERATOR_KINDS = ("vae", "gan", "rae")
# Each zoo kind in words, for buttons and messages.
KIND_WORDS = {"classifier": "classifier", "vae": "VAE", "gan": "GAN",
              "rae": "autoencoder with a fitted code density"}
# Seeds of models and runs: what torch, numpy and Python's random all take.
SEED_RANGE = (0, 2**31 - 1)
# A model spec's whole-number settings, inclusive (the Home page's training widgets take their bounds from here).
MODEL_RANGES = {"epochs": (1, 100_000), "seed": SEED_RANGE, "latent_dim": (1, 4096), "kl_warmup": (0, 100_000),
                "feature_epochs": (1, 100_000), "image_size": (8, 4096)}
MODEL_SETTING_WORDS = {"epochs": "training epochs", "latent_dim": "the latent size", "kl_warmup": "KL warm-up epochs",
                       "feature_epochs": "the perceptual network's training epochs",
                       "image_size": "the generator's image size"}
_ARCHITECTURES = {**CLASSIFIER_ARCHITECTURES, "GANGenerator": GANGenerator, **VAE_ARCHITECTURES,
                  **AUTOENCODER_ARCHITECTURES}
FD_METRIC = "fd_classifier_features"
FD_HELP = (
    "FD-clf: Fréchet distance between generated and real test images on the default classifier's "
    "penultimate-layer features (lower is better). A stand-in for FID, whose Inception weights "
    "are not available offline; compare only generators of the same data set."
)


def default_epochs(kind: str, image_shape: tuple[int, int, int]) -> int:
    """Epochs that train well within minutes on 2 CPU cores for this image size."""
    small = image_shape[1] <= 16
    return {"classifier": 20 if small else 4, "vae": 400 if small else 15, "gan": 150 if small else 15,
            "rae": 200 if small else 15}[kind]


# A user's folder or array file gets at least this many optimisation steps (batches of 64) per default model:
# the image-size defaults are epochs made for the embedded sets (digits' 1,437 and MNIST's 8,000 images), which
# left a small set with a few dozen steps (a VAE that decodes noise; on 72 8x8 images, a classifier so unsure
# that no test image and no chain reached high confidence).
MIN_TRAINING_STEPS = {"classifier": 500, "vae": 2000, "gan": 2000, "rae": 2000}
MAX_SIZED_EPOCHS = 2000


def epochs_for_size(kind: str, image_shape: tuple[int, int, int], train_images: int, batch_size: int = 64) -> int:
    """Default epochs for a user's data: the image-size default, raised so training takes
    :data:`MIN_TRAINING_STEPS` steps however few the images (at most :data:`MAX_SIZED_EPOCHS`)."""
    steps_per_epoch = max(1, math.ceil(train_images / batch_size))
    return min(MAX_SIZED_EPOCHS, max(default_epochs(kind, image_shape),
                                     math.ceil(MIN_TRAINING_STEPS[kind] / steps_per_epoch)))


# Real-size images (32x32 and up, a user's folder or .npz): optimisation steps (batches of 64) of the default
# models at 32x32. The VAE needs the most: on 8,000 SVHN-like images its reconstructions kept the class of 0.62x
# as many held-out images as the classifier gets right after 2,400 steps, 0.78x after 5,000 and 0.82x after
# 7,500 (on augmented batches; the generator check wants 0.8x). Its feature network trains first, for
# REAL_SIZE_FEATURE_STEPS (a third of the VAE's at 32x32).
REAL_SIZE_STEPS = {"classifier": 3000, "vae": 7500, "gan": 1500, "rae": 3000}
# A VAE step's convolutions run at the image's full size, so its cost grows with the pixels: above 32x32 it
# takes proportionally fewer steps, never fewer than this. At 64x64 (sign-like stand-in, 3,870 images) 2,400 steps
# left reconstructions that kept the class of 0.20x as many held-out images as the images, 4,900 with the feature
# network's 2,500 steps 0.40x (0.63x with the pixel weight of training.perceptual_pixel_weight).
REAL_SIZE_MIN_VAE_STEPS = 4900
# The regularized autoencoder's steps fall the same way, to at least this many; with its spatial code (above 32x32),
# to at least REAL_SIZE_SPATIAL_MIN_STEPS. On the 64x64 sign-like stand-in, 2,000 steps left it weak (FD-clf 51x the
# data's own, limit 50x); 4,000 made it 'ok' at 40.0x, its reconstructions keeping the class of 0.91x as many held-out
# images as the images, in 935 s (benchmarks/real_size.py --sizes 64; docs/real-size.md).
REAL_SIZE_MIN_RAE_STEPS = 2000
REAL_SIZE_SPATIAL_MIN_STEPS = 4000
# The feature network's stem is strided above 32x32, so its steps cost about the same at any size: it keeps the
# steps it has at 32x32 (at 64x64 a third of the VAE's epochs left it at 800 steps).
REAL_SIZE_FEATURE_STEPS = 2500
REAL_SIZE_EPOCHS = (8, 200)
REAL_SIZE_PERCEPTUAL = "trained"
REAL_SIZE_VAE_LATENT = 32
# The regularized autoencoder keeps a spatial code from 32x32 up (SpatialDensityAutoencoder: 8 channels of 8x8). On
# the 64x64 sign-like stand-in, with the same steps, the flat code of REAL_SIZE_VAE_LATENT kept the class of 0.38x
# as many held-out images as the images (0/16 high:C chains hit); the spatial code 0.89x, and 10/16 chains hit
# (docs/real-size.md, benchmarks/generators.py --size 64 --recipes rae). On the 32x32 SVHN-like stand-in, in one
# run beside the VAE (benchmarks/generators.py --size 32 --recipes rae-spatial,vae), it kept the class of 0.96x
# (the VAE 0.76x, weak) and trained in 434 s (the VAE 663 s). Its density needs twice as many training images as
# code dimensions: smaller sets keep the VAE.
REAL_SIZE_SPATIAL_SIDE = 32
REAL_SIZE_SPATIAL_LATENT = 512
# Generators of images with a side above this train on the data resized to it (the Defuse authors' 64x64
# generator of 128x128 signs) and are seen through a differentiable resize (probe_core.models.resized): a
# generator's training cost grows with its pixels, a classifier's far less.
REAL_SIZE_GENERATOR_SIDE = 64
# A classifier reference ``features:GENERATOR`` (``features:default``) names that generator's feature network
# (ModelRegistry.feature_network_id): a judge of another seed than the data's default classifier, at no training cost.
FEATURES_PREFIX = "features:"
# The generator trained by default at real size: where the spatial code applies (32x32 and up, with images enough
# for its density), the regularized autoencoder with its fitted density; otherwise the VAE. On the 64x64 sign-like
# stand-in the VAE's high:C reached 0 of 16 chains and its reconstructions kept the class of 0.64x as many held-out
# images as the images; the spatial autoencoder's reached 16 of 16, an independent judge agreeing with 63 % of the
# hits from class starts, and kept 0.91x (docs/real-size.md, benchmarks/real_size.py --sizes 64). On the 32x32
# SVHN-like stand-in the VAE was weak beside it (above). The GAN's check is 'weak' at real size (its samples
# are not like the data: benchmarks/real_size.py) and it took a fifth of the defaults' training time;
# ``probe models train --kind gan`` still trains one.
REAL_SIZE_ZOO_GENERATORS = ("vae",)
SPATIAL_SIZE_ZOO_GENERATORS = ("rae",)


def real_size_recipe(kind: str, image_shape: tuple[int, int, int], num_classes: int,
                     train_images: int, batch_size: int = 64) -> dict | None:
    """The default model recipe for a user's real-size data (images of 32x32 and up), None for smaller images.

    The classifier is a small ResNet (:class:`~probe_core.models.architectures.ResNetClassifier`) trained with
    standard augmentation (a chance-level plain CNN was the old default on colour 32x32 data). The VAE is the
    convolutional one trained with a perceptual term in the features of a small ResNet of its own
    (:data:`REAL_SIZE_PERCEPTUAL`) and a latent of :data:`REAL_SIZE_VAE_LATENT`: with the pixel loss alone, at
    the papers' latent sizes (10 for SVHN, 15 for the German signs) or at 32, its samples and reconstructions
    on the SVHN-like set were colour blurs without a digit (``benchmarks/real_size.py``). The VAE trains on
    augmented batches, as the classifier does: trained longer without them on 8,000 SVHN-like images, its
    reconstructions kept the class of far more training images than held-out ones (it learnt the images, not
    the digits; ``benchmarks/real_size.py`` prints both). The regularized autoencoder (``rae``) trains as the VAE
    does, with a spatial code at 32x32 and up where there are images enough for its density
    (:data:`REAL_SIZE_SPATIAL_LATENT`). The GAN keeps the papers' latent sizes. Epochs are chosen for
    :data:`REAL_SIZE_STEPS` optimisation steps (the VAE's scaled down by the image's pixels beyond 32x32, to at
    least :data:`REAL_SIZE_MIN_VAE_STEPS`; its feature network's for :data:`REAL_SIZE_FEATURE_STEPS`), within
    :data:`REAL_SIZE_EPOCHS`.

    Returns
    -------
    dict or None
        ``architecture``, ``epochs`` and, as they apply, ``augment``, ``latent_dim``, ``kl_warmup``,
        ``perceptual``, ``feature_epochs``.
    """
    if not is_real_size(image_shape):
        return None
    steps_per_epoch = max(1, math.ceil(train_images / batch_size))
    steps = REAL_SIZE_STEPS[kind]
    resized = {}
    if kind != "classifier" and generator_image_shape(image_shape) != tuple(image_shape):
        resized = {"image_size": REAL_SIZE_GENERATOR_SIDE}
        image_shape = generator_image_shape(image_shape)
    spatial = kind == "rae" and has_spatial_code(image_shape, train_images)
    pixels = image_shape[1] * image_shape[2]
    if kind in ("vae", "rae") and pixels > REAL_SIZE ** 2:  # at 32x32 the recipe's steps stand
        fewest = (REAL_SIZE_MIN_VAE_STEPS if kind == "vae" else
                  REAL_SIZE_SPATIAL_MIN_STEPS if spatial else REAL_SIZE_MIN_RAE_STEPS)
        steps = max(fewest, round(steps * REAL_SIZE ** 2 / pixels))
    low, high = REAL_SIZE_EPOCHS
    epochs = min(high, max(low, math.ceil(steps / steps_per_epoch)))
    if kind == "classifier":
        return {"architecture": "ResNetClassifier", "epochs": epochs, "augment": True}
    if kind == "vae":
        feature_epochs = min(high, max(low, math.ceil(REAL_SIZE_FEATURE_STEPS / steps_per_epoch)))
        return {**resized, "architecture": "VAE", "epochs": epochs, "latent_dim": REAL_SIZE_VAE_LATENT,
                "kl_warmup": epochs // 2, "perceptual": REAL_SIZE_PERCEPTUAL, "augment": True,
                # unset where it is the default third, so that the models it trained keep their ids
                "feature_epochs": None if feature_epochs == perceptual_epochs("trained", epochs) else feature_epochs}
    if kind == "rae":
        feature_epochs = min(high, max(low, math.ceil(REAL_SIZE_FEATURE_STEPS / steps_per_epoch)))
        latent = REAL_SIZE_SPATIAL_LATENT if spatial else REAL_SIZE_VAE_LATENT
        return {**resized, "architecture": rae_architecture(spatial, flow_fits(train_images, latent)),
                "epochs": epochs, "latent_dim": latent,
                "perceptual": REAL_SIZE_PERCEPTUAL, "augment": True,
                "feature_epochs": None if feature_epochs == perceptual_epochs("trained", epochs) else feature_epochs}
    return {**resized, "architecture": "GANGenerator", "epochs": epochs,
            "latent_dim": 10 if num_classes <= 10 else 15}


def rae_architecture(spatial: bool, flow: bool) -> str:
    """The real-size recipe's regularized autoencoder: seen through a flow prior over its codes where there are
    codes enough (:func:`~probe_core.models.autoencoder.flow_fits`), else through the kernel density. On the 32x32
    SVHN-like stand-in the kernel density's high:C hits were 81-92 % near copies of training images, one training
    image per chain; the flow's 2 % (docs/real-size.md, "A prior that generates"; benchmarks/generators.py)."""
    if flow:
        return "SpatialFlowAutoencoder" if spatial else "FlowAutoencoder"
    return "SpatialDensityAutoencoder" if spatial else "DensityAutoencoder"


def generator_image_shape(image_shape: tuple[int, int, int]) -> tuple[int, int, int]:
    """The (C, H, W) a zoo generator of images of ``image_shape`` is trained at: the images' own, or
    :data:`REAL_SIZE_GENERATOR_SIDE` square where their side is larger (seen through a differentiable resize)."""
    channels, height, width = image_shape
    if max(height, width) > REAL_SIZE_GENERATOR_SIDE:
        return (channels, REAL_SIZE_GENERATOR_SIDE, REAL_SIZE_GENERATOR_SIDE)
    return (channels, height, width)


def has_spatial_code(generator_shape: tuple[int, int, int], train_images: int) -> bool:
    """Whether the regularized autoencoder keeps a spatial code for a generator of ``generator_shape`` (C, H, W):
    a side of :data:`REAL_SIZE_SPATIAL_SIDE` and up that halves to the code's maps
    (:func:`~probe_core.models.autoencoder.spatial_code_fits`), and codes enough (one per training image) for the
    density fitted on them (:func:`~probe_core.models.density.has_codes_enough`)."""
    return (min(generator_shape[1:]) >= REAL_SIZE_SPATIAL_SIDE
            and spatial_code_fits(generator_shape, REAL_SIZE_SPATIAL_LATENT)
            and has_codes_enough(train_images, REAL_SIZE_SPATIAL_LATENT)
            and flow_fits(train_images, REAL_SIZE_SPATIAL_LATENT))


def _real_size_generators(dataset: str) -> tuple[str, ...] | None:
    """The zoo generators a data set's defaults train when it gets the real-size defaults (a user's data, an entry
    with ``sized_defaults``, of 32x32 images and up: its images are read to know their size), else None:
    :data:`SPATIAL_SIZE_ZOO_GENERATORS` where the spatial code applies, else :data:`REAL_SIZE_ZOO_GENERATORS`."""
    if not dataset_entry(dataset).sized_defaults:
        return None
    data = load_dataset(generator_dataset(dataset))
    if not is_real_size(data.image_shape):
        return None
    spatial = has_spatial_code(generator_image_shape(data.image_shape), len(data.train_images))
    return SPATIAL_SIZE_ZOO_GENERATORS if spatial else REAL_SIZE_ZOO_GENERATORS


def default_generator_kind(dataset: str) -> str:
    """The zoo kind behind a data set's ``default`` generator: the VAE, and at real size the first of
    :func:`_real_size_generators`."""
    return (_real_size_generators(dataset) or ("vae",))[0]


def default_architecture(kind: str, image_shape: tuple[int, int, int]) -> str:
    """Architecture class name used by the zoo for a kind and image size."""
    if kind == "classifier":
        return "ConvClassifier"
    if kind == "gan":
        return "GANGenerator"
    if kind == "rae":
        return "DensityAutoencoder"
    return default_vae_architecture(image_shape)


def default_model_seed() -> int:
    """The training seed of zoo models that name none: ``$PROBE_MODEL_SEED``, else 0.

    Raises
    ------
    ProbeError
        If the variable is set to something that is not an integer.
    """
    text = os.environ.get(MODEL_SEED_ENV, "").strip()
    if not text:
        return 0
    try:
        return int(text)
    except ValueError:
        raise ProbeError(f"{MODEL_SEED_ENV} must be an integer seed, got {text!r}") from None


@dataclass(frozen=True)
class ModelSpec:
    """Everything that determines a trained zoo model.

    Parameters
    ----------
    dataset : str
        Base data set name (``digits``, ``mnist``, ...).
    kind : {"classifier", "vae", "gan"}
    classes : tuple of int, optional
        Train only on these classes of the data set (None: all).
    ambiguous : bool
        Classifier only: the "always ambiguous" variant.
    latent_dim : int, optional
        Generators only; default from the data set.
    epochs : int, optional
        Default from :func:`default_epochs`.
    seed : int, optional
        Default :func:`default_model_seed` (0 unless ``$PROBE_MODEL_SEED`` says otherwise).
    architecture : str, optional
        Default from :func:`default_architecture`.
    kl_warmup : int, optional
        VAEs only: epochs over which the KL weight rises to ``beta`` (default: half of the epochs).
    beta : float, optional
        VAEs only: the KL term's weight in the loss, a β-VAE for β > 1 (Defuse used β = 4 on
        MNIST); default the data set's (:attr:`~probe_core.data.DatasetEntry.vae_beta`), else 1.
    augment : bool, optional
        Classifiers and VAEs: train on batches through :func:`~probe_core.models.training.augment_batch` (the
        real-size recipe turns it on; default off).
    perceptual : {"random", "trained"}, optional
        VAEs only: train with a perceptual term in a small ResNet's features
        (:func:`~probe_core.models.training.perceptual_vae_loss`; the real-size recipe's); default none.
    feature_epochs : int, optional
        VAEs with a "trained" perceptual network: that network's training epochs (default a third of the VAE's;
        the real-size recipe sets it from :data:`REAL_SIZE_FEATURE_STEPS` when it also chooses the VAE's epochs).
    image_size : int, optional
        Generators only: train on the data resized to this side and serve it through a differentiable resize
        (:mod:`probe_core.models.resized`); the real-size recipe sets :data:`REAL_SIZE_GENERATOR_SIDE` for larger
        images. Default: the data's own size.
    """

    dataset: str = DEFAULT_DATASET
    kind: str = "classifier"
    classes: tuple[int, ...] | None = None
    ambiguous: bool = False
    latent_dim: int | None = None
    epochs: int | None = None
    seed: int | None = None
    architecture: str | None = None
    kl_warmup: int | None = None
    beta: float | None = None
    augment: bool | None = None
    perceptual: str | None = None
    feature_epochs: int | None = None
    image_size: int | None = None

    def __post_init__(self) -> None:
        if self.seed is None:
            object.__setattr__(self, "seed", default_model_seed())
        if self.kind not in KINDS:
            raise ProbeError(f"unknown model kind {self.kind!r}; use one of {', '.join(KINDS)}")
        if self.ambiguous and self.kind != "classifier":
            raise ProbeError("--ambiguous applies to classifiers only")
        check_number_ranges({name: getattr(self, name) for name in MODEL_RANGES}, MODEL_RANGES,
                            MODEL_SETTING_WORDS)
        if self.latent_dim is not None and self.kind == "classifier":
            raise ProbeError("latent_dim applies to generators (vae, gan)")
        allowed = {"classifier": tuple(CLASSIFIER_ARCHITECTURES), "vae": tuple(VAE_ARCHITECTURES),
                   "gan": ("GANGenerator",), "rae": tuple(AUTOENCODER_ARCHITECTURES)}[self.kind]
        if self.architecture is not None and self.architecture not in allowed:
            raise ProbeError(f"architecture {self.architecture!r} is not a {self.kind}; use one of {', '.join(allowed)}")
        if self.kl_warmup is not None and self.kind != "vae":
            raise ProbeError("kl_warmup applies to VAEs")
        if self.beta is not None and (self.kind != "vae" or not self.beta > 0):
            raise ProbeError(f"beta applies to VAEs and must be > 0, got {self.beta}")
        if self.augment and self.kind == "gan":
            raise ProbeError("augmentation applies to classifiers and VAEs")
        if self.perceptual is not None and (self.kind not in ("vae", "rae")
                                            or self.perceptual not in PERCEPTUAL_NETWORKS):
            raise ProbeError(f"a perceptual term applies to VAEs and autoencoders, with a network one of "
                             f"{', '.join(PERCEPTUAL_NETWORKS)}; got {self.perceptual!r} for a {self.kind}")
        if self.feature_epochs is not None and (self.kind not in ("vae", "rae") or self.perceptual != "trained"):
            raise ProbeError("feature_epochs applies to generators with a trained perceptual network "
                             "(perceptual='trained')")
        if self.image_size is not None and (self.kind not in GENERATOR_KINDS or self.image_size % 4):
            raise ProbeError(f"image_size applies to generators and must be a multiple of 4, got {self.image_size} "
                             f"for a {self.kind}")
        if self.epochs is not None and self.epochs < 1:
            raise ProbeError(f"epochs must be >= 1, got {self.epochs}")
        if self.classes is not None:
            object.__setattr__(self, "classes", tuple(sorted({int(c) for c in self.classes})))

    def describe_recipe(self) -> str:
        """What this (resolved) spec trains, in words, for the line printed when training starts."""
        parts = [self.architecture or "", f"{self.epochs} epochs"]
        if self.latent_dim:
            parts.append(f"latent {self.latent_dim}")
        if self.beta:
            parts.append(f"β {self.beta:g}")
        if self.augment:
            parts.append("augmentation: random crops, brightness and contrast")
        if self.perceptual:
            parts.append(f"perceptual term in a {self.perceptual} ResNet's features"
                         + (f" ({self.feature_epochs} epochs)" if self.feature_epochs else ""))
        feature = self.feature_network_spec()
        if feature is not None:
            parts.append(f"that ResNet kept as the classifier {feature.model_id()}, a judge: "
                         f"--judge features:{self.model_id()}")
        if self.image_size:
            parts.append(f"trained at {self.image_size}x{self.image_size} on the images resized, its samples resized "
                         f"to the data's size for the classifier")
        return ", ".join(part for part in parts if part)

    def feature_network_spec(self) -> "ModelSpec | None":
        """The classifier this (resolved) generator's perceptual term trains first, as a spec of its own, or None.

        A generator with a trained feature network (``perceptual="trained"``) at the data's own size gets it from
        the registry: trained and stored as a classifier (the data's real-size recipe, the generator's seed plus
        :data:`~probe_core.models.training.FEATURE_NETWORK_SEED_OFFSET`, ``feature_epochs``), or the stored one.
        So it is trained once and serves as a judge of another seed than the data's default classifier
        (``--judge features:default``) at no training cost. The generator's weights are those it had when it
        trained its own. A generator trained smaller than the data (``image_size``) keeps its own
        (it is a classifier of the resized images, not of the data).
        """
        if self.kind not in ("vae", "rae") or self.perceptual != "trained" or self.image_size or not self.epochs:
            return None
        return ModelSpec(dataset=self.dataset, kind="classifier", seed=self.seed + FEATURE_NETWORK_SEED_OFFSET,
                         classes=self.classes, architecture="ResNetClassifier", augment=True,
                         epochs=perceptual_epochs("trained", self.epochs, self.feature_epochs))

    def dataset_view(self) -> str:
        """The data set name with the class subset, as :func:`load_dataset` reads it."""
        return self.dataset if self.classes is None else f"{self.dataset}[keep={','.join(map(str, self.classes))}]"

    def resolved(self, dataset: ImageDataset) -> "ModelSpec":
        """This spec with epochs, latent size and architecture filled in from the data set and its entry."""
        entry = dataset_entry(self.dataset)
        classifier = self.kind == "classifier"
        entry_epochs = {"classifier": entry.classifier_epochs, "vae": entry.vae_epochs}.get(self.kind)
        recipe = real_size_recipe(self.kind, dataset.image_shape, dataset.num_classes,
                                  len(dataset.train_labels)) if entry.sized_defaults else None
        if recipe is not None:
            perceptual = self.perceptual if self.perceptual is not None else recipe.get("perceptual")
            return replace(self, epochs=self.epochs or recipe["epochs"],
                           latent_dim=self.latent_dim or recipe.get("latent_dim"),
                           kl_warmup=self.kl_warmup if self.kl_warmup is not None else recipe.get("kl_warmup"),
                           beta=self.beta, architecture=self.architecture or recipe["architecture"],
                           augment=self.augment if self.augment is not None else recipe.get("augment"),
                           perceptual=perceptual, feature_epochs=self.feature_epochs
                           or (recipe.get("feature_epochs") if perceptual == "trained" and not self.epochs else None),
                           image_size=self.image_size or recipe.get("image_size"))
        if entry.sized_defaults:  # a user's data: epochs by its size
            sized = epochs_for_size(self.kind, dataset.image_shape, len(dataset.train_labels))
        else:
            sized = default_epochs(self.kind, dataset.image_shape)
        epochs = self.epochs or entry_epochs or sized
        latent = self.latent_dim or (dataset.default_latent_dim if self.kind in GENERATOR_KINDS else None)
        kl_warmup = self.kl_warmup if self.kl_warmup is not None else (epochs // 2 if self.kind == "vae" else None)
        beta = self.beta if self.beta is not None else (entry.vae_beta if self.kind == "vae" else None)
        return replace(self, epochs=epochs, latent_dim=latent, kl_warmup=kl_warmup,
                       beta=None if beta == 1.0 else beta,
                       architecture=self.architecture or (classifier and entry.classifier_architecture)
                       or default_architecture(self.kind, dataset.image_shape))

    def model_id(self) -> str:
        """A readable, stable id: ``digits-vae-s0-1a2b3c``."""
        fields = asdict(self)
        # unset, the newer fields keep the ids of the models trained before they existed
        for newer in ("kl_warmup", "beta", "augment", "perceptual", "feature_epochs", "image_size"):
            if fields[newer] is None:
                del fields[newer]
        digest = hashlib.sha1(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:6]
        variant = "-ambiguous" if self.ambiguous else ""
        if self.classes is not None:
            variant += "-k" + ("".join(map(str, self.classes)) if max(self.classes) < 10 else str(len(self.classes)))
        base, view = split_view(self.dataset)
        readable = short_name(base) + (f"[{view}]" if view else "") if is_file_reference(base) else self.dataset
        slug = re.sub(r"[^A-Za-z0-9]+", "-", readable).strip("-")
        return f"{slug}-{self.kind}{variant}-s{self.seed}-{digest}"


def train_spec(spec: ModelSpec, dataset: ImageDataset, reporter: Reporter | None = None,
               device: str | torch.device = "cpu",
               feature_network: nn.Module | None = None) -> tuple[nn.Module, dict, dict]:
    """Train the zoo model ``spec`` describes, without storing it: what a worker process, here or on a Ray
    cluster, runs for :meth:`ModelRegistry.register_trained` to store in the workspace's process.

    Parameters
    ----------
    spec : ModelSpec
        Resolved (:meth:`ModelSpec.resolved`): its epochs and recipe set.
    dataset : ImageDataset
        The data set of ``spec.dataset_view()``; a generator with an ``image_size`` trains on it resized.
    reporter : Reporter, optional
        Told each epoch (:func:`~probe_core.models.training.report_epoch`).
    feature_network : nn.Module, optional
        A generator's trained feature network, the classifier of :meth:`ModelSpec.feature_network_spec` (its
        ``net``); without it the generator trains its own and nothing keeps it.

    Returns
    -------
    module : nn.Module
        In eval mode, on ``device``.
    record : dict
        The spec's fields with the architecture, class names and the data it serves, for the registry.
    metrics : dict
        The trainer's metrics and ``train_seconds``.
    """
    started = time.perf_counter()
    device = resolve_device(device)
    common = {"epochs": spec.epochs, "seed": spec.seed, "device": device, "reporter": reporter}
    served = dataset  # a generator smaller than the data trains on the images resized, and serves the data
    if spec.image_size and spec.kind != "classifier":
        dataset = dataset.resized(spec.image_size)
    if spec.kind == "classifier":
        module, metrics = train_classifier(dataset, ambiguous=spec.ambiguous, architecture=spec.architecture,
                                           augment=bool(spec.augment), **common)
        args = {"image_shape": list(dataset.image_shape), "num_classes": dataset.num_classes}
    elif spec.kind == "rae":
        module, metrics = train_autoencoder(dataset, latent_dim=spec.latent_dim, perceptual=spec.perceptual,
                                            augment=bool(spec.augment), feature_epochs=spec.feature_epochs,
                                            architecture=spec.architecture, feature_network=feature_network,
                                            **common)
        args = {"image_shape": list(dataset.image_shape), "latent_dim": spec.latent_dim,
                "class_names": list(dataset.class_names)}
    elif spec.kind == "vae":
        module, metrics = train_vae(dataset, latent_dim=spec.latent_dim, architecture=spec.architecture,
                                    kl_warmup_epochs=spec.kl_warmup, beta=spec.beta or 1.0,
                                    perceptual=spec.perceptual, augment=bool(spec.augment),
                                    feature_epochs=spec.feature_epochs, feature_network=feature_network, **common)
        args = {"image_shape": list(dataset.image_shape), "latent_dim": spec.latent_dim}
    else:
        module, metrics = train_gan(dataset, latent_dim=spec.latent_dim, **common)
        args = {"image_shape": list(dataset.image_shape), "latent_dim": spec.latent_dim}
    metrics["train_seconds"] = round(time.perf_counter() - started, 2)
    record = asdict(spec)
    record.update(
        architecture={"class": type(module).__name__, "args": args},
        class_names=list(dataset.class_names),
        original_classes=list(dataset.original_classes),
        dataset_view=served.name,
        image_shape=list(served.image_shape),
    )
    feature_spec = spec.feature_network_spec()
    if feature_network is not None and feature_spec is not None:
        record["feature_network"] = feature_spec.model_id()
    return module, record, metrics


@dataclass
class LoadedModel:
    """A model ready to use.

    ``module`` is a :class:`ProbabilityModel` (probabilities out) for classifiers
    and the generator (``latent_dim``, ``decode``) for VAEs and GANs.
    """

    id: str
    kind: str
    module: nn.Module
    class_names: tuple[str, ...]
    record: dict = field(default_factory=dict)
    capabilities: GeneratorCapabilities | None = None  # generators only, checked when loaded
    class_match: ClassMatch | None = None  # classifiers resolved for a data set: how outputs meet its classes

    def __post_init__(self) -> None:
        if self.is_generator and self.capabilities is None:
            self.capabilities = generator_capabilities(self.module, source=self.id)

    @property
    def metrics(self) -> dict:
        return self.record.get("metrics", {})

    @property
    def feature_network(self) -> str | None:
        """The id of the classifier this generator's perceptual term was trained with, where it stored one
        (:meth:`ModelSpec.feature_network_spec`); None otherwise."""
        return (self.record.get("spec") or {}).get("feature_network")

    @property
    def is_generator(self) -> bool:
        return self.kind in GENERATOR_KINDS or self.kind in ("plugin-generator", "file-generator", "built-generator")

    @property
    def native_class_names(self) -> tuple[str, ...]:
        """The classifier's own class names in its own output order (before matching to a data set)."""
        return self.class_match.model_names if self.class_match is not None else self.class_names


def in_memory_classifier(module: nn.Module, class_names, input_shape: tuple[int, int, int],
                         outputs: str = "logits", name: str = "in-memory") -> LoadedModel:
    """An in-memory ``torch.nn.Module`` as a classifier, checked like a plugin's (API use).

    Parameters
    ----------
    module : nn.Module
        Images (B, C, H, W) in [0, 1] to (B, K) logits or probabilities.
    class_names : sequence of str
        K names in output order; matched to a data set's by name (:func:`align_classifier`).
    input_shape : tuple of int
        (C, H, W) to check it with.
    outputs : {"logits", "probabilities"}
    name : str
        Shown in messages; the model is ``memory:NAME`` (it is not stored, so no run can refer to it later).
    """
    names = tuple(str(n) for n in class_names)
    wrapped = validate_classifier(module.eval(), outputs, tuple(input_shape), len(names), source=f"classifier {name}")
    return LoadedModel(f"memory:{name}", "memory-classifier", wrapped, names, {"metrics": {}})


def align_classifier(loaded: LoadedModel, dataset: ImageDataset, class_map: dict | None = None) -> LoadedModel:
    """The classifier with its outputs matched to the data set's classes by name (:func:`match_classes`).

    Outputs are reordered to follow the data set's label order, so output i means the data set's
    (i-th covered) class everywhere downstream: targets, Defuse, suites, reports.

    Raises
    ------
    ClassMismatchError
        If the names do not match (the message lists both sides and how to map them).
    """
    given = class_map or loaded.record.get("class_map") or (loaded.record.get("spec") or {}).get("class_map")
    match = match_classes(loaded.class_names, dataset.class_names, given,
                          model=f"classifier {loaded.id.split('#')[0]}", data=f"data set {dataset.name}")
    module = loaded.module
    if not match.is_identity:
        if not isinstance(module, ProbabilityModel):
            raise ProbeError(f"classifier {loaded.id}: its outputs cannot be reordered to the data set's classes")
        module = AlignedClassifier(module.net, module.output_kind, match.output_order).eval()
    return replace(loaded, module=module, class_names=match.aligned_names, class_match=match)


TrainingAnnouncer = Callable[["ModelSpec", str], "Reporter | None"]


def _names_model_file(reference: str | None) -> bool:
    """Whether a reference names a plugin or a model file (what the registry would import or load from a path)."""
    if not reference:
        return False
    return is_model_file_reference(reference) or is_plugin_reference(reference) or Path(reference).is_file()


def _model_pin_now(reference: str) -> tuple[str, str] | None:
    """``(real path, fingerprint)`` of a plugin or model file reference now; None when its file is gone."""
    try:
        return model_file_pin(reference) if is_model_file_reference(reference) else plugin_pin(reference)
    except (PluginError, OSError):
        return None


class ModelRegistry:
    """The trained models of one workspace.

    Parameters
    ----------
    store : Store
        Where model metadata is recorded.
    models_dir : str or Path
        Where the weight files are written.
    data_dir : str or Path, optional
        Folder of file-based data sets (default ``$PROBE_DATA_DIR``); it belongs to whoever
        made this registry and is never changed on a shared one.
    on_training : callable, optional
        ``on_training(spec, model_id)`` is called before a model is trained that the caller did
        not give a reporter for (a missing default met by :meth:`get_or_train_reference`,
        the reference classifier of a generator, a recipe's variant); it says so to the user
        (the CLI prints a line, a job reports it) and returns the :class:`~probe_core.progress.Reporter` to use.
        Without it such training is logged.
    actor : Actor, optional
        Who resolves references through this registry (None: the local owner). An actor who may not load
        files gets only an allowlist, decided on what a reference resolves to, never on how it is spelled:
        ``default``, stored model ids, built generators, embedded data sets and the data sets the
        workspace's models and suites were made on (see :meth:`dataset`).

    Notes
    -----
    :meth:`remembering` gives a registry that resolves each reference once: one run's validation,
    preparation and job share the loaded models instead of loading them again.
    """

    # One lock per model file, shared by every registry of the process (each dashboard
    # session has its own registry), so two sessions never train the same model at once.
    _locks: dict[str, threading.Lock] = {}
    _locks_guard = threading.Lock()

    def __init__(self, store: Store, models_dir: str | Path, data_dir: str | Path | None = None,
                 on_training: TrainingAnnouncer | None = None, actor: Actor | None = None) -> None:
        self.store = store
        self.models_dir = Path(models_dir)
        self.data_dir = data_dir
        self.on_training = on_training
        self.actor = actor
        self._resolved: dict[tuple, LoadedModel] | None = None

    def _with(self, on_training: TrainingAnnouncer | None, resolved: dict | None) -> "ModelRegistry":
        registry = ModelRegistry(self.store, self.models_dir, self.data_dir, on_training, self.actor)
        registry._resolved = resolved
        return registry

    def acting_as(self, actor: Actor | None) -> "ModelRegistry":
        """This registry (same store, files and data folder) resolving references as ``actor``."""
        registry = ModelRegistry(self.store, self.models_dir, self.data_dir, self.on_training, actor)
        registry._resolved = None if self._resolved is None else {}
        return registry

    # -- what an actor may resolve -----------------------------------------------------------
    def _trusted(self) -> bool:
        return self.actor is None or self.actor.may(Permission.LOAD)

    def dataset(self, name: str) -> ImageDataset:
        """Load a data set as this registry's actor.

        Raises
        ------
        PermissionDenied
            When the actor may not load files and ``name`` is neither an embedded data set (a view of one
            included) nor one the workspace holds (:meth:`Store.known_references`); the message names no path.
        DataError
            As :func:`~probe_core.catalog.load_dataset`.
        """
        base, _ = split_view(name)
        if not self._trusted():
            if self.data_dir is not None and str(self.data_dir) != os.environ.get(DATA_DIR_ENV, ""):
                refuse_unlisted(self.actor, "the server's data folder")
            if not (base in DATASETS or base in {split_view(known)[0] for known in self.store.known_references()}):
                refuse_unlisted(self.actor, "the embedded data sets and those an admin has added to the workspace")
            if is_file_reference(base) and self._pin_now(base) != self.store.reference_pin(base):
                # the folder or file was re-pointed or changed since an admin used it: not what was allowed
                refuse_unlisted(self.actor, "the data sets an admin has added, as they were when added")
        elif is_file_reference(base):
            pin = self._pin_now(base)
            if pin is not None and pin != self.store.reference_pin(base):
                self.store.pin_reference(base, *pin)
        return load_dataset(name, self.data_dir)

    @staticmethod
    def _pin_now(reference: str) -> tuple[str, str] | None:
        try:
            return reference_pin(reference)
        except DataError:
            return None

    def _check_model_reference(self, reference: str | None) -> None:
        if self._trusted() or reference in (None, "default"):
            return
        source = generator_source(reference)
        if source is not None and reference in source.choices:
            return
        known = self.store.known_references()
        if self.store.get_model(reference) is None and reference not in known | {split_class_map(k)[0] for k in known}:
            refuse_unlisted(self.actor, "the default models, stored models and built generators")
        self._require_pinned(reference)

    def _require_pinned(self, reference: str) -> None:
        """For an actor who may not load files: a plugin or model file reference must resolve to what it was pinned
        to when an admin last used it (:func:`~probe_core.models.plugins.plugin_pin`,
        :func:`~probe_core.models.files.model_file_pin`); one re-pointed, edited or never pinned is refused, and
        the refusal is in the account log (``probe users log``), before anything is imported."""
        if not _names_model_file(reference) or self.store.get_model(reference) is not None:
            return
        now, pinned = _model_pin_now(reference), self.store.reference_pin(reference)
        if now is None or now != pinned:
            self.store.log_account_event("reference-refused", self.actor.name,
                                         detail=f"{reference}: {'gone' if now is None else 'changed or re-pointed'} "
                                                f"since an admin used it" if pinned
                                         else f"{reference}: never pinned by an admin's use")
            refuse_unlisted(self.actor, "the plugins and model files an admin has used, as they were when used")

    def _pin_model_reference(self, *references: str) -> None:
        """An admin's (or the local owner's) use of a plugin or model file pins what it resolves to now, under each
        name it is recorded by (as typed, and the loaded model's ``plugin:``/``modelfile:`` reference)."""
        for reference in references:
            if reference and _names_model_file(reference) and self.store.get_model(reference) is None:
                pin = _model_pin_now(reference)
                if pin is not None and pin != self.store.reference_pin(reference):
                    self.store.pin_reference(reference, *pin)

    def announcing(self, on_training: TrainingAnnouncer) -> "ModelRegistry":
        """This registry (same store, files, data folder and remembered models) with another training announcer."""
        return self._with(on_training, self._resolved)

    def remembered(self, key: tuple, compute: Callable[[], object]) -> object:
        """``compute()``, once per ``key`` for a remembering registry (:meth:`remembering`; e.g. a model check a
        request's preparation and its run would otherwise both make); every time for any other."""
        if self._resolved is None:
            return compute()
        key = ("remembered", *key)
        if key not in self._resolved:
            self._resolved[key] = compute()
        return self._resolved[key]

    def remembering(self) -> "ModelRegistry":
        """This registry, remembering what it resolves: each ``(reference, kind, dataset, device)`` is
        loaded once. For one run's lifetime (its modules are shared, so never for training on them); a
        registry that already remembers keeps what it remembers."""
        return self._with(self.on_training, {} if self._resolved is None else self._resolved)

    # -- queries -------------------------------------------------------------------------
    def list(self, dataset: str | None = None, kind: str | None = None) -> list[dict]:
        """Metadata of stored models, newest first."""
        return self.store.list_models(dataset=dataset, kind=kind)

    def exists(self, model_id: str) -> bool:
        record = self.store.get_model(model_id)
        return record is not None and Path(record["path"]).is_file()

    def load(self, model_id: str, device: str | torch.device | None = "cpu") -> LoadedModel:
        """Load a stored model by id (weights with ``torch.load(weights_only=True)``).

        Raises
        ------
        ModelNotFoundError
            If the id is unknown or its file is missing.
        """
        record = self.store.get_model(model_id)
        if record is None:
            known = ", ".join(m["id"] for m in self.list()[:8]) or "none yet"
            raise ModelNotFoundError(f"no model {excerpt(model_id)} in this workspace (known: {known})")
        path = Path(record["path"])
        if not path.is_file():
            raise ModelNotFoundError(f"model {model_id!r} is registered but its weights file is missing from the "
                                     f"workspace's models folder")
        arch = record["spec"]["architecture"]
        device = resolve_device(device)
        try:
            weights = torch.load(path, map_location=device, weights_only=True)
        except (pickle.UnpicklingError, RuntimeError, EOFError, OSError, ValueError, AttributeError) as exc:
            raise ProbeError(f"model {model_id!r}: its weights file cannot be loaded as plain tensors "
                             f"({type(exc).__name__}); only tensors are ever loaded, never pickled code: train "
                             f"it again, or register a file saved with torch.save(state_dict)") from exc
        if arch["class"] in (PLUGIN_ARCHITECTURE, MODEL_FILE_ARCHITECTURE):
            # a finetuned plugin or model-file classifier: its own module, our weights
            shape = tuple(record["spec"]["image_shape"]) if record["spec"].get("image_shape") else None
            reference = arch["args"]["reference"]
            if self._trusted():
                self._pin_model_reference(reference)
            else:
                self._require_pinned(reference)
            if arch["class"] == MODEL_FILE_ARCHITECTURE:
                module = load_model_file(reference, record["kind"], shape).module
            else:
                plugin = load_plugin_reference(reference, image_shape=shape)
                module = plugin.classifier if record["kind"] == "classifier" else plugin.generator
                if module is None:
                    raise PluginError(f"plugin {plugin.path} no longer defines the {record['kind']} of model "
                                      f"{model_id!r}")
            target = module.net if isinstance(module, ProbabilityModel) else module
            target.load_state_dict(weights)
            module.to(device).eval()
            return LoadedModel(model_id, record["kind"], module, tuple(record["spec"]["class_names"]),
                               {**record, "class_map": record["spec"].get("class_map")})
        module = _ARCHITECTURES[arch["class"]](**arch["args"])
        module.load_state_dict(weights)
        module.to(device).eval()
        if record["kind"] == "classifier":
            module = ProbabilityModel(module, "logits").eval()
        return LoadedModel(model_id, record["kind"], module, tuple(record["spec"]["class_names"]), record)

    # -- training ------------------------------------------------------------------------
    def _lock(self, model_id: str) -> threading.Lock:
        key = str((self.models_dir / model_id).resolve())
        with self._locks_guard:
            return self._locks.setdefault(key, threading.Lock())

    def get_or_train(self, spec: ModelSpec, reporter: Reporter | None = None,
                     device: str | torch.device | None = "cpu") -> LoadedModel:
        """The stored model for ``spec``, training and registering it first if needed, with its epochs reported to
        ``reporter`` (:func:`~probe_core.models.training.report_epoch`).

        Raises
        ------
        PermissionDenied
            When the model must be trained and this registry's actor may not train (an annotator): training
            runs only as an admin's run, within the server's limits, never inside a page's lookup.
        """
        dataset = load_dataset(spec.dataset_view(), self.data_dir)
        spec = spec.resolved(dataset)
        model_id = spec.model_id()
        with self._lock(model_id):
            if not self.exists(model_id):
                self.require_training()
                if reporter is None:
                    if self.on_training is not None:
                        reporter = self.on_training(spec, model_id)
                    else:
                        log.warning("training %s (%s on %s, %s epochs): it is not in %s yet", model_id, spec.kind,
                                    spec.dataset_view(), spec.epochs, self.models_dir)
                self._train_and_register(spec, dataset, reporter, resolve_device(device))
        return self.load(model_id, device)

    def require_training(self) -> None:
        """Raise :class:`~probe_core.team.accounts.PermissionDenied` unless this registry's actor may train (no
        actor: a local user, who may)."""
        if self.actor is not None:
            require(self.actor, Permission.RUN)

    def _train_and_register(self, spec: ModelSpec, dataset: ImageDataset, reporter: Reporter | None,
                            device: torch.device) -> None:
        module, record, metrics = train_spec(spec, dataset, reporter, device, self.feature_network(spec, reporter,
                                                                                                     device))
        self.register_trained(spec, dataset, module, record, metrics, device)

    def feature_network(self, spec: ModelSpec, reporter: Reporter | None = None,
                        device: str | torch.device = "cpu") -> nn.Module | None:
        """The trained feature network of the generator ``spec`` (resolved), as a module, or None where it has none
        of its own (:meth:`ModelSpec.feature_network_spec`): the stored classifier, trained and stored first if it
        is missing, its epochs reported to ``reporter`` as the first of the generator's (one bar from 0 to 1)."""
        feature_spec = spec.feature_network_spec()
        if feature_spec is None:
            return None
        shared = None if reporter is None else epochs_of(reporter, spec.kind, 0, feature_spec.epochs + spec.epochs)
        return self.get_or_train(feature_spec, shared, device).module.net

    def register_trained(self, spec: ModelSpec, dataset: ImageDataset, module: nn.Module, record: dict,
                         metrics: dict, device: str | torch.device = "cpu") -> str:
        """Store what :func:`train_spec` made of ``spec`` (in this process or another), adding a generator's
        FD-clf (:data:`FD_METRIC`) where the data set's default classifier is already stored; returns its id.

        Parameters
        ----------
        spec : ModelSpec
            Resolved (:meth:`ModelSpec.resolved`), as it was trained.
        dataset : ImageDataset
            The data set of ``spec.dataset_view()``, at its own size (a generator trained smaller serves it).
        module, record, metrics
            :func:`train_spec`'s three results.
        """
        metrics = dict(metrics)
        if record.get("feature_network") and self.exists(record["feature_network"]):
            # what the generator cost from scratch: its feature network (a stored classifier of its own) included
            features = self.store.get_model(record["feature_network"])["metrics"].get("train_seconds", 0.0)
            metrics.update(feature_network_seconds=features,
                           train_seconds=round(metrics.get("train_seconds", 0.0) + features, 2))
        if spec.kind in GENERATOR_KINDS:
            # FD-clf needs the data set's default classifier; it is not trained just for this metric (nothing
            # trains unless the run uses it), and the generator check scores any generator with the run's own
            reference_spec = ModelSpec(dataset=spec.dataset, kind="classifier", seed=spec.seed)
            reference_id = self.model_id(reference_spec)
            if self.exists(reference_id):
                reference = self.load(reference_id, device)
                seen = seen_at(module.to(resolve_device(device)), dataset.image_shape)
                metrics[FD_METRIC] = feature_frechet_distance(reference.module.net, seen, dataset.test_images)
                metrics["fd_reference_classifier"] = reference.id
        return self.register(module, record, metrics, spec.model_id())

    def register(self, module: nn.Module, record: dict, metrics: dict, model_id: str) -> str:
        """Store a module's weights and metadata under ``model_id`` (atomic file write).

        ``record`` must hold ``dataset``, ``kind``, ``architecture`` ({class, args})
        and ``class_names``; anything else (parent model, hyperparameters) is kept as is.
        """
        for key in ("dataset", "kind", "architecture", "class_names"):
            if key not in record:
                raise ProbeError(f"model metadata needs {key!r}")
        path = self.models_dir / f"{model_id}.pt"
        temporary = path.with_suffix(".pt.tmp")
        torch.save({k: v.detach().cpu() for k, v in module.state_dict().items()}, temporary)
        os.replace(temporary, path)
        self.store.put_model(model_id, record["kind"], record["dataset"], str(path), record, metrics)
        return model_id

    # -- defaults and references ------------------------------------------------------------
    @staticmethod
    def default_spec(dataset: str, kind: str, seed: int | None = None) -> ModelSpec | None:
        """The zoo spec behind ``default`` for a kind (``classifier`` or ``generator``) of a data set.

        None when the data set's default generator is built rather than trained (the scene renderer).
        """
        if kind == "classifier":
            return ModelSpec(dataset=classifier_dataset(dataset), kind="classifier", seed=seed)
        if kind != "generator":
            raise ProbeError(f"a default is a 'classifier' or a 'generator', got {kind!r}")
        if dataset_entry(dataset).default_generator is not None:
            return None
        return ModelSpec(dataset=generator_dataset(dataset), kind=default_generator_kind(dataset), seed=seed)

    @staticmethod
    def default_specs(dataset: str = DEFAULT_DATASET, seed: int | None = None) -> list[ModelSpec]:
        """What the data set's defaults train: its classifier first (it scores generators), then its zoo generators.

        A user's real-size data (a folder or ``.npz`` of 32x32 images and up: an entry with ``sized_defaults``)
        trains only one generator, chosen from its size (:func:`_real_size_generators`); its images are read to know
        their size.
        """
        kinds = _real_size_generators(dataset) or dataset_entry(dataset).zoo_generators
        generators = [ModelSpec(dataset=generator_dataset(dataset), kind=kind, seed=seed) for kind in kinds]
        return [ModelSpec(dataset=classifier_dataset(dataset), kind="classifier", seed=seed), *generators]

    def missing_defaults(self, dataset: str = DEFAULT_DATASET) -> list[ModelSpec]:
        """Default specs of a data set that are not trained yet."""
        return [s for s in self.default_specs(dataset) if not self.exists(self.model_id(s))]

    def model_id(self, spec: ModelSpec) -> str:
        """The id of the model ``spec`` trains, resolved on its data (trained or not)."""
        return spec.resolved(load_dataset(spec.dataset_view(), self.data_dir)).model_id()

    def default_id(self, dataset: str, kind: str) -> str:
        """The reference ``default`` stands for: a model id (trained or not) or a built generator's reference.

        ``kind`` is ``classifier``, ``generator``, or a zoo kind (``vae``, ``gan``).
        """
        if kind in GENERATOR_KINDS:
            return self.model_id(ModelSpec(dataset=generator_dataset(dataset), kind=kind))
        spec = self.default_spec(dataset, kind)
        return dataset_entry(dataset).default_generator if spec is None else self.model_id(spec)

    def generator_choices(self, dataset: str) -> list[str]:
        """Generator references for a data set: what its entry offers, then the workspace's trained generators."""
        trained = [m["id"] for m in self.list(dataset=generator_dataset(dataset)) if m["kind"] in GENERATOR_KINDS]
        return [*dataset_entry(dataset).generator_choices, *trained]

    def classifier_choices(self, dataset: str) -> list[str]:
        """The workspace's trained classifiers of a data set, views of it included (a classifier trained on
        ``digits[mislabel=9->8:0.4]`` is one of digits')."""
        base = split_view(dataset)[0]
        return [m["id"] for m in self.list(kind="classifier") if split_view(m["dataset"])[0] == base]

    def can_start_in_classes(self, generator, dataset: str) -> bool:
        """Whether chains may start in a generator's class components (``init="classes"``), without training it:
        a loaded generator (a :class:`LoadedModel`) or a stored one says so in its capabilities, a ``default`` not
        trained yet by the architecture its spec trains."""
        if not isinstance(generator, str):
            return generator.capabilities.class_starts
        spec = self.default_spec(dataset, "generator") if generator == "default" else None
        if spec is None or self.exists(self.model_id(spec)):
            return self.resolve(generator, "generator", dataset).capabilities.class_starts
        data = load_dataset(spec.dataset_view(), self.data_dir)
        architecture = spec.resolved(data).architecture or default_architecture(spec.kind, data.image_shape)
        return issubclass(_ARCHITECTURES[architecture], ClassConditionalPrior)

    def resolve(self, reference: str | None, kind: str, dataset: str = DEFAULT_DATASET,
                device: str | torch.device | None = "cpu") -> LoadedModel:
        """A classifier or generator from a reference; never trains.

        Parameters
        ----------
        reference : str or None
            Model id; ``default`` / None (the data set's default, see :meth:`default_id`); a plugin
            reference or ``.py`` path; for classifiers ``features:GENERATOR``, a generator's feature network
            (:meth:`feature_network_id`); or for generators a built generator's reference such as
            ``scene:novel``.
        kind : {"classifier", "generator"}
            What is wanted; a generator reference may name a VAE or a GAN.
        dataset : str
            The data set it is used on (for ``default`` and a plugin classifier's input shape).

        Raises
        ------
        ModelNotFoundError
            If the reference names a model that is not trained; the message says how to train it.
        """
        if kind not in ("classifier", "generator"):
            raise ProbeError(f"resolve() wants kind 'classifier' or 'generator', got {kind!r}")
        key = (reference, kind, dataset, str(device))
        if self._resolved is not None and key in self._resolved:
            return self._resolved[key]
        data = self.dataset(dataset)  # refused before anything is resolved, as the reference below
        if kind == "classifier":
            base, class_map = split_class_map(reference or "default")
            if base.startswith(FEATURES_PREFIX):
                base = self.feature_network_id(base[len(FEATURES_PREFIX):] or "default", dataset, device)
            self._check_model_reference(base)
            loaded = self._resolve_unmatched(base, kind, dataset, device)
            if self._trusted():
                self._pin_model_reference(base, loaded.id)
            aligned = align_classifier(loaded, data, class_map)
            loaded = replace(aligned, id=with_class_map(aligned.id, class_map))
        else:
            self._check_model_reference(reference)
            loaded = self._resolve_unmatched(reference, kind, dataset, device)
            if self._trusted():
                self._pin_model_reference(reference, loaded.id)
            served = seen_at(loaded.module, data.image_shape)  # a smaller generator, resized to the data's size
            if served is not loaded.module:
                loaded = replace(loaded, module=served, capabilities=None)
        if self._resolved is not None:
            self._resolved[key] = self._resolved[(loaded.id, kind, dataset, str(device))] = loaded
        return loaded

    def feature_network_id(self, generator: str, dataset: str = DEFAULT_DATASET,
                           device: str | torch.device | None = "cpu") -> str:
        """The id of the stored feature network of ``generator`` (a reference, ``default`` included): the classifier
        its perceptual term was trained with (:meth:`ModelSpec.feature_network_spec`), of another seed than the
        data's default classifier, so a judge that costs no training; ``features:GENERATOR`` names it wherever a
        classifier is.

        Raises
        ------
        ModelNotFoundError
            When the generator keeps none: trained before generators stored it, without a trained feature network,
            or smaller than the data.
        """
        loaded = self.resolve(generator, "generator", dataset, device)
        feature = loaded.feature_network
        if not feature or not self.exists(feature):
            raise ModelNotFoundError(
                f"the generator {loaded.id} keeps no feature network to judge with: only zoo generators with a "
                "trained perceptual network at the data's own size store one (real-size defaults trained since "
                "they began to); give another classifier trained on data you trust")
        return feature

    def _resolve_unmatched(self, reference: str | None, kind: str, dataset: str,
                           device: str | torch.device | None) -> LoadedModel:
        if reference is None or reference == "default":
            reference = self.default_id(dataset, kind)
            if generator_source(reference) is None and not self.exists(reference):
                raise ModelNotFoundError(
                    f"the default {kind} of {dataset} ({reference}) is not trained yet: train it with "
                    f"`probe models defaults --dataset {dataset}` or the Train button on the Home page")
        source = generator_source(reference)
        if source is not None:
            if kind != "generator":
                raise ProbeError(f"{reference!r} is a generator, not a {kind}")
            if reference not in source.choices:
                raise ProbeError(f"unknown generator {reference!r}; use one of {', '.join(source.choices)}")
            module = source.build(reference).to(resolve_device(device))
            return LoadedModel(reference, "built-generator", module, (), {"metrics": {}})
        if is_model_file_reference(reference):
            image_shape = load_dataset(dataset, self.data_dir).image_shape if kind == "classifier" else None
            model_file = load_model_file(reference, kind, image_shape)
            return LoadedModel(model_file.reference, f"file-{kind}", model_file.module.to(resolve_device(device)),
                               model_file.class_names, {"path": str(model_file.path), "sha256": model_file.sha256,
                                                        "metrics": {}, "class_map": model_file.class_map,
                                                        "image_shape": model_file.image_shape})
        if is_plugin_reference(reference) or Path(reference).is_file():
            image_shape = load_dataset(dataset, self.data_dir).image_shape if kind == "classifier" else None
            plugin = load_plugin_reference(reference, image_shape=image_shape)
            module = plugin.classifier if kind == "classifier" else plugin.generator
            if module is None:
                raise PluginError(f"plugin {plugin.path} defines no {kind}() function")
            names = plugin.class_names or ()
            return LoadedModel(plugin.reference, f"plugin-{kind}", module.to(resolve_device(device)), names,
                               {"path": str(plugin.path), "sha256": plugin.sha256, "metrics": {},
                                "class_map": plugin.class_map})
        loaded = self.load(reference, device)
        if (kind == "classifier") != (loaded.kind == "classifier"):
            raise ProbeError(f"model {reference!r} is a {loaded.kind}, not a {kind}")
        return loaded

    def get_or_train_reference(self, reference: str | None, kind: str, dataset: str = DEFAULT_DATASET,
                               device: str | torch.device | None = "cpu",
                               reporter: Reporter | None = None) -> LoadedModel:
        """Like :meth:`resolve`, but a ``default`` that is not trained yet is trained first.

        The training is announced (``on_training``) unless ``reporter`` is given; used by jobs and
        commands that promise to train what they need.
        """
        base, _ = split_class_map(reference or "default")
        if base == "default":
            spec = self.default_spec(dataset, kind)
            if spec is not None and not self.exists(self.model_id(spec)):
                self.get_or_train(spec, reporter=reporter, device=device)
        return self.resolve(reference, kind, dataset, device)
