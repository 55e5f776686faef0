"""In-memory models and arrays kept in the workspace as files that resolve again in any process.

The notebook API (:mod:`probe_core.api`) and :func:`probe_core.show` take ``torch.nn.Module`` objects
and ``(x, y)`` arrays. A run stores references, never objects, so they are written once to
``WORKSPACE/kept/`` in the formats a user could have brought themselves:

- a classifier as a ``torch.export`` program (``.pt2``, dynamic batch; TorchScript ``.pt`` where export
  fails) with its sidecar ``.json`` (class names, input shape), referred to as ``modelfile:PATH#sha256=...``;
- a generator as its ``decode`` (and, if it has one, its ``encode``) in the same form, with ``latent_dim``;
- arrays as ``.npz`` (``x``, ``y``, ``class_names``), referred to as ``arrays:PATH``.

File names carry a digest of the content (code, structure, weights), so keeping the same object twice
writes nothing new.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

from probe_core.catalog import canonical_dataset_name, load_dataset
from probe_core.data.files import ARRAYS_SCHEME, load_file_arrays
from probe_core.errors import ProbeError
from probe_core.models.files import model_file_reference
from probe_core.sampling.protocols import Encoder, StructuredPrior, generator_capabilities, is_differentiable

KEPT_FOLDER = "kept"
EXAMPLE_BATCH = 4  # export traces with this batch and declares the batch dimension dynamic


def kept_folder(workspace_root: str | Path) -> Path:
    """``WORKSPACE/kept``, created on first use."""
    folder = Path(workspace_root).expanduser().resolve() / KEPT_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    return folder


class _Decode(nn.Module):
    def __init__(self, generator: nn.Module) -> None:
        super().__init__()
        self.generator = generator

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.generator.decode(z)


class _Encode(nn.Module):
    def __init__(self, generator: nn.Module) -> None:
        super().__init__()
        self.generator = generator

    def forward(self, images: torch.Tensor):
        return self.generator.encode(images)


def _module_digest(module: nn.Module, example: torch.Tensor) -> str:
    """A digest of what the module computes: its classes' code where Python can read it, its structure,
    its weights and buffers, and the example's shape (exported files themselves differ from save to save)."""
    digest = hashlib.sha256(repr(module).encode() + str(tuple(example.shape)).encode())
    for child in module.modules():
        try:
            digest.update(inspect.getsource(type(child)).encode())
        except (OSError, TypeError):  # built-in or not kept by Python: its name and structure stand for it
            digest.update(type(child).__qualname__.encode())
    for name, tensor in module.state_dict().items():
        digest.update(name.encode() + str(tensor.dtype).encode() + str(tuple(tensor.shape)).encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def _write_module(module: nn.Module, example: torch.Tensor, folder: Path, stem: str) -> Path:
    """Write ``module`` as ``STEM-DIGEST.pt2`` (or ``.pt``) in ``folder``, once per content."""
    module = module.eval()
    digest = _module_digest(module, example)
    for suffix in (".pt2", ".pt"):
        if (folder / f"{stem}-{digest}{suffix}").is_file():
            return folder / f"{stem}-{digest}{suffix}"
    with tempfile.TemporaryDirectory(dir=folder) as scratch:
        try:
            program = torch.export.export(module, (example,), dynamic_shapes=({0: torch.export.Dim("batch")},))
            written = Path(scratch) / "module.pt2"
            torch.export.save(program, str(written))
        except Exception as export_error:  # export is strict about Python control flow; tracing is not
            try:
                with torch.no_grad():
                    traced = torch.jit.trace(module, example, check_trace=False)
                written = Path(scratch) / "module.pt"
                torch.jit.save(traced, str(written))
            except Exception as trace_error:
                raise ProbeError(f"cannot keep the {stem} as a file: torch.export failed ({export_error}) and so did "
                                 f"torch.jit.trace ({trace_error}); write a plugin .py for it instead") from trace_error
        target = folder / f"{stem}-{digest}{written.suffix}"
        os.replace(written, target)
    return target


def _write_sidecar(model_path: Path, fields: dict) -> None:
    sidecar = model_path.with_suffix(".json")
    text = json.dumps(fields, indent=1)
    if not sidecar.is_file() or sidecar.read_text() != text:
        sidecar.write_text(text)


def keep_classifier(workspace_root: str | Path, module: nn.Module, class_names: Sequence[str],
                    input_shape: Sequence[int], outputs: str = "logits") -> str:
    """Keep an in-memory classifier as a model file with its sidecar; returns its ``modelfile:`` reference.

    Parameters
    ----------
    module : nn.Module
        Images (B, C, H, W) in [0, 1] to ``outputs`` (B, K).
    class_names : sequence of str
        K names in output order (matched to a data set's by name).
    input_shape : sequence of int
        (C, H, W).
    outputs : {"logits", "probabilities"}

    Raises
    ------
    ProbeError
        When the names or shape are unusable, or the module can be neither exported nor traced.
    """
    names = [str(name) for name in class_names]
    shape = [int(size) for size in input_shape]
    if len(names) < 2 or len(set(names)) != len(names):
        raise ProbeError(f"a classifier needs two or more distinct class names in output order, got {names}")
    if len(shape) != 3 or min(shape) < 1:
        raise ProbeError(f"input_shape must be (C, H, W), got {tuple(input_shape)}")
    path = _write_module(module, torch.rand(EXAMPLE_BATCH, *shape), kept_folder(workspace_root), "classifier")
    _write_sidecar(path, {"class_names": names, "input_shape": shape, "outputs": outputs})
    return model_file_reference(path)


def keep_generator(workspace_root: str | Path, generator: nn.Module) -> str:
    """Keep an in-memory generator (``latent_dim`` and ``decode``; ``encode`` too if it has one) as model files.

    Raises
    ------
    ProbeError
        For a generator that is not differentiable or has its own prior (a renderer, a scene): those are
        code, to be brought as a plugin ``.py``.
    """
    generator_capabilities(generator, source="in-memory generator")
    if not is_differentiable(generator) or isinstance(generator, StructuredPrior):
        raise ProbeError("a renderer or a generator with its own prior cannot be kept as a file: write a plugin .py")
    if isinstance(generator, nn.Module):
        generator.eval()
    folder = kept_folder(workspace_root)
    z = torch.randn(EXAMPLE_BATCH, int(generator.latent_dim))
    decoder = _write_module(_Decode(generator), z, folder, "generator")
    fields = {"latent_dim": int(generator.latent_dim)}
    if isinstance(generator, Encoder):
        with torch.no_grad():
            images = generator.decode(z)
        fields["encoder"] = _write_module(_Encode(generator), images, folder, "encoder").name
    _write_sidecar(decoder, fields)
    return model_file_reference(decoder)


def keep_arrays(workspace_root: str | Path, x, y, class_names: Sequence[str] | None = None) -> str:
    """Keep images and labels as an ``.npz``; returns its ``arrays:`` data set reference.

    Parameters
    ----------
    x : array-like, shape (N, C, H, W) with C = 1 or 3, or (N, H, W)
        Images, floats in [0, 1] or uint8 (stored as uint8, as :mod:`probe_core.data.files` reads them).
    y : array-like of int, shape (N,)
    class_names : sequence of str, optional
        One name per label value (default: the label values).
    """
    images = x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
    labels = y.detach().cpu().numpy() if isinstance(y, torch.Tensor) else np.asarray(y)
    if images.ndim == 4 and images.shape[1] in (1, 3):  # the project's (N, C, H, W) -> the file's (N, H, W, C)
        images = images.transpose(0, 2, 3, 1)
    arrays = {"x": np.ascontiguousarray(images), "y": labels.astype(np.int64)}
    if class_names is not None:
        arrays["class_names"] = np.asarray([str(name) for name in class_names])
    digest = hashlib.sha256()
    for key in sorted(arrays):
        digest.update(key.encode() + str(arrays[key].shape).encode() + str(arrays[key].dtype).encode())
        digest.update(np.ascontiguousarray(arrays[key]).tobytes())
    path = kept_folder(workspace_root) / f"arrays-{digest.hexdigest()[:16]}.npz"
    if not path.exists():
        with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".npz", delete=False) as handle:
            np.savez_compressed(handle, **arrays)
        os.replace(handle.name, path)
    reference = f"{ARRAYS_SCHEME}:{path}"

    load_file_arrays(reference)  # checked now, with the data set's own messages, before any run names it
    return reference


def model_reference(workspace_root: str | Path, model, kind: str, class_names: Sequence[str] | None = None,
                    input_shape: Sequence[int] | None = None) -> str:
    """A model reference for what a notebook verb was given: a reference as is, a module kept as a file.

    Raises
    ------
    ProbeError
        For a classifier module without ``class_names``, or anything that is neither.
    """
    if isinstance(model, str):
        return model
    if kind == "classifier" and isinstance(model, nn.Module):
        if class_names is None or input_shape is None:
            raise ProbeError("an in-memory classifier needs class_names (in output order) and an input shape "
                             "(given, or taken from the data)")
        return keep_classifier(workspace_root, model, class_names, input_shape)
    if kind == "generator" and hasattr(model, "decode"):
        return keep_generator(workspace_root, model)
    raise ProbeError(f"a {kind} is a reference (model id, plugin .py, model file) or an in-memory module, "
                     f"not {type(model).__name__}")


def dataset_reference(workspace_root: str | Path, data, class_names: Sequence[str] | None = None) -> str:
    """A data set reference for what a notebook verb was given: a catalogue name as is, a folder or ``.npz``
    path (``str`` or ``pathlib.Path``) as its stored reference, as the CLI takes them (``./my_images`` becomes
    ``images:/abs/my_images``), and ``(x, y)`` kept as an ``.npz``."""
    if isinstance(data, Path):
        data = str(data)
    if isinstance(data, str):
        return canonical_dataset_name(data)
    if isinstance(data, (tuple, list)) and len(data) == 2:
        return keep_arrays(workspace_root, data[0], data[1], class_names)
    raise ProbeError(f"data is a data set name (digits, mnist, a folder or .npz) or a pair (x, y) of arrays, "
                     f"not {type(data).__name__}")


def references(space, dataset, classifier, generator, class_names=None, input_shape=None) -> tuple:
    """``(dataset, classifier, generator)`` references for what a notebook verb was given: references as they
    are, in-memory objects kept as files. ``space`` is the :class:`~probe_core.runs.workspace.Workspace`; the
    classifier's input shape defaults to the data's image shape; a None generator stays None."""
    dataset = dataset_reference(space.root, dataset, class_names)
    if input_shape is None and not isinstance(classifier, str):
        input_shape = load_dataset(dataset, space.registry.data_dir).image_shape
    classifier = model_reference(space.root, classifier, "classifier", class_names, input_shape)
    generator = generator if generator is None else model_reference(space.root, generator, "generator")
    return dataset, classifier, generator
