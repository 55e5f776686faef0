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
``class_map``
    Optional ``{classifier's name: data set's name}`` for classes whose names differ from the
    data set's (classes are matched by name, never by position).

A plugin is an ordinary Python file: it can import modules from its own folder, and it finds
files beside it through ``__file__`` (``Path(__file__).parent / "weights.pt"``), whatever the
working directory of the CLI, the dashboard or a worker process.

A loaded plugin is referred to as ``plugin:/absolute/path.py#sha256=HEX`` (:func:`plugin_reference`):
runs store that reference, so it resolves again in another process, from another folder, on
another day, and a plugin that was moved or changed since gives an error naming its path.
"""

from __future__ import annotations

import contextlib
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


PLUGIN_PREFIX = "plugin:"
_DIGEST_MARK = "#sha256="


@dataclass
class Plugin:
    """A loaded, validated plugin file."""

    path: Path
    class_names: tuple[str, ...] | None
    classifier: ProbabilityModel | None
    generator: nn.Module | None
    image_shape: tuple[int, int, int] | None
    sha256: str = ""
    class_map: dict | None = None

    @property
    def reference(self) -> str:
        """``plugin:/absolute/path.py#sha256=HEX``: what runs and models store."""
        return f"{PLUGIN_PREFIX}{self.path}{_DIGEST_MARK}{self.sha256}"


def file_sha256(path: str | Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def is_plugin_reference(reference: str) -> bool:
    """Whether a model reference names a plugin file (``plugin:...`` or a ``.py`` path)."""
    return reference.startswith(PLUGIN_PREFIX) or reference.endswith(".py")


def parse_plugin_reference(reference: str) -> tuple[Path, str | None]:
    """``(absolute path, sha256 or None)`` of ``plugin:PATH[#sha256=HEX]`` or a plain ``.py`` path.

    A relative path is taken relative to the current folder (only a user types those; stored
    references are absolute).
    """
    body = reference[len(PLUGIN_PREFIX):] if reference.startswith(PLUGIN_PREFIX) else reference
    path_text, _, digest = body.partition(_DIGEST_MARK)
    return Path(path_text).expanduser().resolve(), (digest or None)


# How deep below a plugin's folder its pin reads the .py files it may import (packages beside it).
PIN_DEPTH = 3


def plugin_pin(reference: str) -> tuple[str, str]:
    """What a plugin reference resolves to now, without importing it: ``(real path, fingerprint)``.

    The real path follows symlinks. The fingerprint covers the file and what it can load from its folder: the
    sha256 of every ``.py`` file in the folder and its packages (:data:`PIN_DEPTH` levels) and the name, size and
    modification time of every other file beside it (its weights). An admin's use pins it
    (:meth:`~probe_core.store.Store.pin_reference`); an annotator's resolution compares the pin with this, so a
    plugin re-pointed, edited or given new neighbours since is refused before it is imported.

    Raises
    ------
    PluginError
        If the file is gone.
    """
    path, _ = parse_plugin_reference(reference)
    if not path.is_file():
        raise PluginError(f"plugin file {path} not found")
    folder = path.parent
    manifest = hashlib.sha256(str(path).encode())
    for item in sorted(folder.rglob("*")):
        relative = item.relative_to(folder)
        if (len(relative.parts) > PIN_DEPTH or "__pycache__" in relative.parts
                or any(part.startswith(".") for part in relative.parts) or not item.is_file()):
            continue
        if item.suffix == ".py":
            manifest.update(f"{relative}\0{file_sha256(item)}\n".encode())
        elif len(relative.parts) == 1:
            stat = item.stat()
            manifest.update(f"{relative}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return str(path), manifest.hexdigest()


def load_plugin_reference(reference: str, image_shape: tuple[int, int, int] | None = None) -> Plugin:
    """Load the plugin a reference names, checking that it is still the same file.

    Raises
    ------
    PluginError
        If the file is gone (moved or deleted) or its contents changed since the reference
        was made (its sha256 differs), naming the path; or anything :func:`load_plugin` raises.
    """
    path, digest = parse_plugin_reference(reference)
    if not path.is_file():
        hint = " (a stored run or model used it from there: was it moved or deleted?)" if digest else ""
        raise PluginError(f"plugin file {path} not found{hint}")
    if digest is not None:
        current = file_sha256(path)
        if current != digest:
            raise PluginError(f"plugin file {path} changed since it was used (sha256 {digest[:12]}… then, "
                              f"{current[:12]}… now): restore that version, or start a new run with this one")
    return load_plugin(path, image_shape=image_shape)


def _import_file(path: Path):
    name = "probe_plugin_" + hashlib.sha1(str(path).encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise PluginError(f"plugin {path} cannot be imported (is it a .py file?)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        with _own_folder_importable(path):
            spec.loader.exec_module(module)
    except Exception as exc:  # any failure in user code becomes one clear message
        sys.modules.pop(name, None)
        raise PluginError(f"plugin {path} failed to import: {type(exc).__name__}: {exc}") from exc
    return module


@contextlib.contextmanager
def _own_folder_importable(path: Path):
    """Let a plugin import the modules beside it, as ``python plugin.py`` would, while it loads."""
    folder = str(path.parent)
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    try:
        yield
    finally:
        if added and folder in sys.path:
            sys.path.remove(folder)


def _call_factory(module, attribute: str, path: Path) -> nn.Module:
    factory = getattr(module, attribute)
    try:
        with _own_folder_importable(path):
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
    class_map = getattr(module, "class_map", None)
    if class_map is not None and not isinstance(class_map, dict):
        raise PluginError(f"plugin {path}: class_map must be a dict {{classifier's name: data set's name}}")
    return Plugin(path=path, class_names=class_names, classifier=classifier, generator=generator, image_shape=shape,
                  sha256=file_sha256(path), class_map=class_map)
