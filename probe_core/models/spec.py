"""What determines a trained zoo model: :class:`ModelSpec`, its kinds, ranges and seed, and its stable id.

A spec is checked once, when it is made (``__post_init__``); :meth:`ModelSpec.resolved` fills in the data set's
defaults (:mod:`probe_core.models.recipes`) and :meth:`ModelSpec.model_id` names the model it trains.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass, replace

from probe_core.catalog import dataset_entry
from probe_core.data import DEFAULT_DATASET, ImageDataset, split_view
from probe_core.data.files import is_file_reference, short_name
from probe_core.errors import ProbeError, check_number_ranges
from probe_core.models.architectures import CLASSIFIER_ARCHITECTURES, VAE_ARCHITECTURES
from probe_core.models.autoencoder import AUTOENCODER_ARCHITECTURES
from probe_core.models.recipes import default_architecture, default_epochs, epochs_for_size, real_size_recipe
from probe_core.models.training import FEATURE_NETWORK_SEED_OFFSET, PERCEPTUAL_NETWORKS, perceptual_epochs

KINDS = ("classifier", "vae", "gan", "rae")
PLUGIN_ARCHITECTURE = "plugin"  # a registered model whose module comes from a plugin file
MODEL_FILE_ARCHITECTURE = "modelfile"  # ... or from a TorchScript / torch.export file with its sidecar
MODEL_SEED_ENV = "PROBE_MODEL_SEED"
GENERATOR_KINDS = ("vae", "gan", "rae")
# Each zoo kind in words, for buttons and messages.
KIND_WORDS = {"classifier": "classifier", "vae": "VAE", "gan": "GAN",
              "rae": "autoencoder with a prior fitted on its codes"}
# Seeds of models and runs: what torch, numpy and Python's random all take.
SEED_RANGE = (0, 2**31 - 1)
# A model spec's whole-number settings, inclusive (the Home page's training widgets take their bounds from here).
MODEL_RANGES = {"epochs": (1, 100_000), "seed": SEED_RANGE, "latent_dim": (1, 4096), "kl_warmup": (0, 100_000),
                "feature_epochs": (1, 100_000), "image_size": (8, 4096)}
MODEL_SETTING_WORDS = {"epochs": "training epochs", "latent_dim": "the latent size", "kl_warmup": "KL warm-up epochs",
                       "feature_epochs": "the perceptual network's training epochs",
                       "image_size": "the generator's image size"}
# A classifier reference ``features:GENERATOR`` (``features:default``) names that generator's feature network
# (ModelRegistry.feature_network_id): a judge of another seed than the data's default classifier, at no training cost.
FEATURES_PREFIX = "features:"
FD_METRIC = "fd_classifier_features"
FD_HELP = (
    "FD-clf: Fréchet distance between generated and real test images on the default classifier's "
    "penultimate-layer features (lower is better). A stand-in for FID, whose Inception weights "
    "are not available offline; compare only generators of the same data set."
)



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
