"""The zoo's default recipes: epochs by image size and data size, the real-size recipe, the default generator
kind and architecture of a data set, and :func:`train_spec`, which trains what a spec describes without storing it.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict

import torch
from torch import nn

from probe_core.catalog import dataset_entry, generator_dataset, load_dataset
from probe_core.data import REAL_SIZE, ImageDataset, is_real_size
from probe_core.models.architectures import (
    CLASSIFIER_ARCHITECTURES,
    VAE_ARCHITECTURES,
    GANGenerator,
    default_vae_architecture,
)
from probe_core.models.autoencoder import AUTOENCODER_ARCHITECTURES, flow_fits, spatial_code_fits, train_autoencoder
from probe_core.models.density import has_codes_enough
from probe_core.models.devices import resolve_device
from probe_core.models.training import perceptual_epochs, train_classifier, train_gan, train_vae
from probe_core.progress import Reporter

# Every zoo architecture by the name a stored model records.
_ARCHITECTURES = {**CLASSIFIER_ARCHITECTURES, "GANGenerator": GANGenerator, **VAE_ARCHITECTURES,
                  **AUTOENCODER_ARCHITECTURES}


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
# The generator trained by default at real size: where the spatial code applies (32x32 and up, with images enough
# for its flow prior), the regularized autoencoder seen through a flow over its codes (rae_architecture); otherwise
# the VAE. On the 64x64 sign-like stand-in the VAE's high:C reached 0 of 16 chains and its reconstructions kept the
# class of 0.64x as many held-out images as the images; the spatial autoencoder's reconstructions kept 0.91x
# (docs/real-size.md, benchmarks/real_size.py --sizes 64). On the 32x32 SVHN-like stand-in the VAE was weak beside
# it (above). The GAN's check is 'weak' at real size (its samples are not like the data: benchmarks/real_size.py)
# and it took a fifth of the defaults' training time; ``probe models train --kind gan`` still trains one.
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
    does, with a spatial code at 32x32 and up where there are images enough for its flow prior
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



def train_spec(spec, dataset: ImageDataset, reporter: Reporter | None = None,
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
