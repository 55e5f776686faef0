"""Model zoo: architectures, training, the registry, plugins.

- :mod:`~probe_core.models.architectures`: classifiers, VAEs, GAN; :class:`ProbabilityModel` wraps logits.
- :mod:`~probe_core.models.training`: seeded training loops with a progress callback; FD-clf.
- :mod:`~probe_core.models.registry`: :class:`ModelSpec` (what determines a zoo model) and
  :class:`ModelRegistry` over a store and a models folder. Lookups never train; training is asked
  for by name (``get_or_train``). Data-set capabilities come from :mod:`probe_core.catalog`.
- :mod:`~probe_core.models.plugins`: user ``.py`` files with ``classifier()``/``generator()``,
  referenced as ``plugin:/abs/path.py#sha256=…``.
"""

from probe_core.models.architectures import (
    MLPVAE,
    VAE,
    ConvClassifier,
    CountingClassifier,
    GANDiscriminator,
    GANGenerator,
    ProbabilityModel,
    make_vae,
)
from probe_core.models.plugins import Plugin, load_plugin, validate_classifier, validate_generator
from probe_core.models.loaded import LoadedModel
from probe_core.models.recipes import default_epochs
from probe_core.models.registry import ModelRegistry
from probe_core.models.spec import FD_HELP, FD_METRIC, GENERATOR_KINDS, KIND_WORDS, KINDS, ModelSpec
from probe_core.models.training import (
    ambiguous_soft_targets,
    classifier_accuracy,
    feature_frechet_distance,
    train_classifier,
    train_gan,
    train_vae,
)

__all__ = [
    "VAE", "MLPVAE", "make_vae", "ConvClassifier", "CountingClassifier", "GANDiscriminator", "GANGenerator", "ProbabilityModel", "Plugin", "load_plugin",
    "validate_classifier", "validate_generator", "FD_HELP", "FD_METRIC", "GENERATOR_KINDS", "KIND_WORDS", "KINDS", "LoadedModel",
    "ModelRegistry", "ModelSpec", "default_epochs", "ambiguous_soft_targets",
    "classifier_accuracy", "feature_frechet_distance", "train_classifier", "train_gan", "train_vae",
]
