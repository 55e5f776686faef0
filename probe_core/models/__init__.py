"""Model zoo: architectures, training, registry, plugins."""

from probe_core.models.architectures import (
    VAE,
    ConvClassifier,
    CountingClassifier,
    GANDiscriminator,
    GANGenerator,
    MLPVAE,
    ProbabilityModel,
    make_vae,
)
from probe_core.models.plugins import Plugin, load_plugin, validate_classifier, validate_generator
from probe_core.models.registry import (
    FD_HELP,
    FD_METRIC,
    GENERATOR_KINDS,
    KINDS,
    LoadedModel,
    ModelRegistry,
    ModelSpec,
    default_epochs,
)
from probe_core.models.training import (
    TrainingProgress,
    ambiguous_soft_targets,
    classifier_accuracy,
    feature_frechet_distance,
    train_classifier,
    train_gan,
    train_vae,
)

__all__ = [
    "VAE", "MLPVAE", "make_vae", "ConvClassifier", "CountingClassifier", "GANDiscriminator", "GANGenerator", "ProbabilityModel", "Plugin", "load_plugin",
    "validate_classifier", "validate_generator", "FD_HELP", "FD_METRIC", "GENERATOR_KINDS", "KINDS", "LoadedModel",
    "ModelRegistry", "ModelSpec", "default_epochs", "TrainingProgress", "ambiguous_soft_targets",
    "classifier_accuracy", "feature_frechet_distance", "train_classifier", "train_gan", "train_vae",
]
