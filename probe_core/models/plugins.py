"""Bring your own model: load and validate a plugin file.

A plugin is a Python file that defines any of:

``class_names``
    Sequence of K class names (required with ``classifier``).
``classifier()``
    Returns a torch module from images (B, C, H, W) in [0, 1] to (B, K) class
    probabilities, or logits when the file sets ``classifier_outputs = "logits"``.
``generator()``
    Returns a module with ``latent_dim`` and ``decode(z) -> images`` (z of shape
    (B, latent_dim), images (B, C, H, W) in [0, 1]); optionally ``encode(x) -> (mu, logvar)``.
``input_shape``
    (C, H, W) of the classifier's inputs, when there is no generator to infer it from.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from probe_core.errors import PluginError
from probe_core.models.architectures import ProbabilityModel

_SUM_TOLERANCE = 1e-3


@dataclass
class Plugin:
    """A loaded, validated plugin file."""

    path: Path
    class_names: tuple[str, ...] | None
    classifier: ProbabilityModel | None
    generator: nn.Module | None
    image_shape: tuple[int, int, int] | None


def _import_file(path: Path):
    name = "probe_plugin_" + hashlib.sha1(str(path).encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise PluginError(f"plugin {path} cannot be imported (is it a .py file?)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # any failure in user code becomes one clear message
        sys.modules.pop(name, None)
        raise PluginError(f"plugin {path} failed to import: {type(exc).__name__}: {exc}") from exc
    return module


def _call_factory(module, attribute: str, path: Path) -> nn.Module:
    factory = getattr(module, attribute)
    try:
        built = factory() if callable(factory) and not isinstance(factory, nn.Module) else factory
    except Exception as exc:
        raise PluginError(f"plugin {path}: {attribute}() raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(built, nn.Module):
        raise PluginError(f"plugin {path}: {attribute}() must return a torch.nn.Module, got {type(built).__name__}")
    return built.eval()


@torch.no_grad()
def validate_generator(generator: nn.Module, source: str = "generator", batch_size: int = 4) -> tuple[int, int, int]:
    """Check the generator interface on a small batch; returns the image shape (C, H, W).

    Raises
    ------
    PluginError
        If ``latent_dim`` or ``decode`` is missing, or outputs are not (B, C, H, W) finite values in [0, 1].
    """
    latent_dim = getattr(generator, "latent_dim", None)
    if not isinstance(latent_dim, int) or latent_dim < 1:
        raise PluginError(f"{source}: needs an integer attribute latent_dim >= 1, got {latent_dim!r}")
    if not callable(getattr(generator, "decode", None)):
        raise PluginError(f"{source}: needs a method decode(z) -> images")
    try:
        images = generator.decode(torch.randn(batch_size, latent_dim))
    except Exception as exc:
        raise PluginError(f"{source}: decode(z) with z of shape ({batch_size}, {latent_dim}) raised "
                          f"{type(exc).__name__}: {exc}") from exc
    if not isinstance(images, torch.Tensor) or images.ndim != 4 or images.shape[0] != batch_size:
        shape = tuple(images.shape) if isinstance(images, torch.Tensor) else type(images).__name__
        raise PluginError(f"{source}: decode(z) must return images of shape (B, C, H, W), got {shape}")
    if not torch.isfinite(images).all():
        raise PluginError(f"{source}: decode(z) returned NaN or infinite values")
    if images.min() < -1e-4 or images.max() > 1 + 1e-4:
        raise PluginError(f"{source}: decode(z) must return pixels in [0, 1], got range "
                          f"[{float(images.min()):.3g}, {float(images.max()):.3g}]")
    return tuple(images.shape[1:])  # type: ignore[return-value]


@torch.no_grad()
def validate_classifier(classifier: nn.Module, output_kind: str, image_shape: tuple[int, int, int],
                        num_classes: int | None, source: str = "classifier", batch_size: int = 4) -> ProbabilityModel:
    """Check a classifier on random images and wrap it to return probabilities.

    Parameters
    ----------
    classifier : nn.Module
        Maps (B, C, H, W) to (B, K).
    output_kind : {"probabilities", "logits"}
        What it claims to return.
    image_shape : tuple of int
        (C, H, W) to test with.
    num_classes : int, optional
        Expected K (the number of class names).

    Raises
    ------
    PluginError
        For wrong shapes, NaNs, or probabilities that do not sum to 1 (with a hint
        when they look like logits).
    """
    if output_kind not in ("probabilities", "logits"):
        raise PluginError(f"{source}: classifier_outputs must be 'probabilities' or 'logits', got {output_kind!r}")
    images = torch.rand(batch_size, *image_shape, generator=torch.Generator().manual_seed(0))
    try:
        out = classifier(images)
    except Exception as exc:
        raise PluginError(f"{source}: calling it on images of shape {tuple(images.shape)} raised "
                          f"{type(exc).__name__}: {exc}") from exc
    if not isinstance(out, torch.Tensor) or out.ndim != 2 or out.shape[0] != batch_size:
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise PluginError(f"{source}: must return a (B, K) tensor, got {shape}")
    if num_classes is not None and out.shape[1] != num_classes:
        raise PluginError(f"{source}: returns {out.shape[1]} classes but class_names has {num_classes}")
    if not torch.isfinite(out).all():
        raise PluginError(f"{source}: returned NaN or infinite values")
    if output_kind == "probabilities":
        sums = out.sum(1)
        if (out < -_SUM_TOLERANCE).any() or ((sums - 1).abs() > _SUM_TOLERANCE).any():
            raise PluginError(
                f"{source}: outputs are not probabilities (row sums {[round(float(s), 3) for s in sums]}, "
                f"min {float(out.min()):.3g}); if it returns logits, set classifier_outputs = \"logits\" in the plugin"
            )
    return ProbabilityModel(classifier, output_kind).eval()


def load_plugin(path: str | Path, image_shape: tuple[int, int, int] | None = None) -> Plugin:
    """Import and validate a plugin file.

    Parameters
    ----------
    path : str or Path
        The ``.py`` file.
    image_shape : tuple of int, optional
        Image shape of the data set in use, to test a classifier when the plugin
        has neither ``input_shape`` nor a generator.

    Raises
    ------
    PluginError
        With a message naming the plugin and what is wrong.
    """
    path = Path(path).expanduser().resolve()
    if not path.is_file():
        raise PluginError(f"plugin file {path} not found")
    module = _import_file(path)
    has_classifier, has_generator = hasattr(module, "classifier"), hasattr(module, "generator")
    if not (has_classifier or has_generator):
        raise PluginError(f"plugin {path} defines neither classifier() nor generator()")
    class_names = getattr(module, "class_names", None)
    if class_names is not None:
        class_names = tuple(str(n) for n in class_names)
    generator = shape = None
    if has_generator:
        generator = _call_factory(module, "generator", path)
        shape = validate_generator(generator, source=f"plugin {path} generator")
    classifier = None
    if has_classifier:
        if not class_names:
            raise PluginError(f"plugin {path} defines classifier() but no class_names")
        declared = getattr(module, "input_shape", None)
        test_shape = tuple(declared) if declared is not None else shape or image_shape
        if test_shape is None:
            raise PluginError(f"plugin {path}: set input_shape = (C, H, W) so the classifier can be checked")
        classifier = validate_classifier(
            _call_factory(module, "classifier", path), getattr(module, "classifier_outputs", "probabilities"),
            test_shape, len(class_names), source=f"plugin {path} classifier",
        )
        shape = shape or test_shape
    return Plugin(path=path, class_names=class_names, classifier=classifier, generator=generator, image_shape=shape)
