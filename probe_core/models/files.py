"""Standard model files without a plugin: TorchScript (``.pt``, ``.ts``) and ``torch.export`` (``.pt2``).

A model file ``NAME.pt`` comes with a sidecar ``NAME.json`` beside it::

    {"class_names": ["cat", "dog"],        # classifiers: K names in output order
     "input_shape": [3, 32, 32],            # classifiers: (C, H, W) of the images it takes
     "outputs": "logits",                   # or "probabilities" (default "logits")
     "class_map": {"cat": "felis"},         # optional: model's name -> data set's name
     "latent_dim": 8,                       # generators: z of shape (B, latent_dim)
     "encoder": "NAME-encoder.pt"}          # generators, optional: images -> (mean, log-variance)

A classifier file maps images (B, C, H, W) in [0, 1] to (B, K); a generator file maps z (B, D)
to images (B, C, H, W) in [0, 1] (its ``forward``, or a TorchScript ``decode`` method). Export a ``.pt2``
with a dynamic batch dimension (``dynamic_shapes=({0: torch.export.Dim("batch")},)``): runs use any
batch size. The file is
referred to as ``modelfile:/absolute/path.pt#sha256=HEX`` (:func:`model_file_reference`): the
digest covers the file and its sidecar, so a stored run finds out when either changed.
"""

from __future__ import annotations

import hashlib
import json
import types
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from probe_core.errors import PluginError, excerpt
from probe_core.models.architectures import ProbabilityModel
from probe_core.models.plugins import (
    PLUGIN_PREFIX,
    file_sha256,
    is_plugin_reference,
    parse_plugin_reference,
    validate_classifier,
    validate_generator,
)

MODEL_FILE_PREFIX = "modelfile:"
MODEL_FILE_SUFFIXES = (".pt", ".ts", ".pt2")
_DIGEST_MARK = "#sha256="


def is_model_file_reference(reference: str) -> bool:
    """Whether a reference names a model file (``modelfile:...`` or a path ending in .pt, .ts or .pt2)."""
    return reference.startswith(MODEL_FILE_PREFIX) or reference.endswith(MODEL_FILE_SUFFIXES)


def sidecar_path(path: Path) -> Path:
    """``NAME.json`` beside ``NAME.pt``."""
    return path.with_suffix(".json")


def _digest(path: Path) -> str:
    sha = hashlib.sha256(path.read_bytes())
    sidecar = sidecar_path(path)
    if sidecar.is_file():
        sha.update(sidecar.read_bytes())
    return sha.hexdigest()


def model_file_pin(reference: str) -> tuple[str, str]:
    """What a model file reference resolves to now, without loading it: ``(real path, sha256 of the file and its
    sidecar)``; pinned at an admin's use and compared at an annotator's (as :func:`~probe_core.models.plugins.plugin_pin`).

    Raises
    ------
    PluginError
        If the file is gone.
    """
    body = reference[len(MODEL_FILE_PREFIX):] if reference.startswith(MODEL_FILE_PREFIX) else reference
    path = Path(body.partition(_DIGEST_MARK)[0]).expanduser().resolve()
    if not path.is_file():
        raise PluginError(f"model file {path} not found")
    return str(path), _digest(path)


def model_file_reference(path: str | Path) -> str:
    """``modelfile:/absolute/path#sha256=HEX`` of a model file and its sidecar."""
    path = Path(path).expanduser().resolve()
    return f"{MODEL_FILE_PREFIX}{path}{_DIGEST_MARK}{_digest(path)}"


class FileGenerator(nn.Module):
    """A generator from a model file: ``decode`` is the file's ``decode`` or ``forward``.

    Parameters
    ----------
    decoder : nn.Module
        z (B, latent_dim) to images (B, C, H, W) in [0, 1].
    latent_dim : int
    encoder : nn.Module, optional
        Images (B, C, H, W) to (mean, log-variance), each (B, latent_dim), or to the mean alone.
    """

    def __init__(self, decoder: nn.Module, latent_dim: int, encoder: nn.Module | None = None) -> None:
        super().__init__()
        self.decoder = decoder
        self.latent_dim = int(latent_dim)
        self.encoder = encoder

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        """Images (B, C, H, W) of latents (B, latent_dim)."""
        method = getattr(self.decoder, "decode", None)
        return method(z) if callable(method) else self.decoder(z)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.decode(z)


class _EncodingFileGenerator(FileGenerator):
    def encode(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and log-variance (B, latent_dim) of the images' codes (log-variance -inf-like when not given)."""
        out = self.encoder(images)
        if isinstance(out, (tuple, list)):
            return out[0], out[1]
        return out, torch.full_like(out, -20.0)


@dataclass
class ModelFile:
    """A loaded, validated model file."""

    path: Path
    kind: str
    module: nn.Module
    class_names: tuple[str, ...]
    class_map: dict = field(default_factory=dict)
    image_shape: tuple[int, int, int] | None = None
    sha256: str = ""

    @property
    def reference(self) -> str:
        return f"{MODEL_FILE_PREFIX}{self.path}{_DIGEST_MARK}{self.sha256}"


def _load_module(path: Path) -> nn.Module:
    try:
        if path.suffix == ".pt2":
            module = torch.export.load(str(path)).module()
            # an exported program runs in the mode it was exported in; its train()/eval() raise, so they
            # become no-ops and the module can sit inside wrappers that switch modes
            module.train = types.MethodType(lambda self, mode=True: self, module)
            module.eval = types.MethodType(lambda self: self, module)
            return module
        return torch.jit.load(str(path), map_location="cpu")
    except Exception as exc:  # any unreadable file becomes one clear message
        kind = "torch.export program (.pt2)" if path.suffix == ".pt2" else "TorchScript file (torch.jit.save)"
        raise PluginError(f"model file {path} is not a readable {kind}: {type(exc).__name__}: {exc}. "
                          f"A plain state_dict cannot be loaded without its code: write a plugin .py instead") from exc


def read_sidecar(path: Path) -> dict:
    """The sidecar's fields; raises :class:`PluginError` when it is missing or not JSON."""
    sidecar = sidecar_path(path)
    if not sidecar.is_file():
        raise PluginError(f"model file {path} needs a sidecar {sidecar} with its class_names and input_shape "
                          f"(classifiers) or latent_dim (generators)")
    try:
        fields = json.loads(sidecar.read_text())
    except json.JSONDecodeError as exc:
        raise PluginError(f"sidecar {sidecar} is not valid JSON: {exc}") from exc
    if not isinstance(fields, dict):
        raise PluginError(f"sidecar {sidecar} must hold a JSON object")
    return fields


def load_model_file(reference: str, kind: str, image_shape: tuple[int, int, int] | None = None) -> ModelFile:
    """Load and check the model file a reference names (a path, or a stored ``modelfile:`` reference).

    Parameters
    ----------
    reference : str
    kind : {"classifier", "generator"}
    image_shape : tuple of int, optional
        (C, H, W) of the data set, when the sidecar gives no ``input_shape``.

    Raises
    ------
    PluginError
        If the file or its sidecar is missing, changed since the reference was made, unreadable,
        or the model's outputs are not of the declared form.
    """
    body = reference[len(MODEL_FILE_PREFIX):] if reference.startswith(MODEL_FILE_PREFIX) else reference
    path_text, _, digest = body.partition(_DIGEST_MARK)
    path = Path(path_text).expanduser().resolve()
    if not path.is_file():
        raise PluginError(f"model file {path} not found" + (" (a stored run or model used it from there)" if digest
                                                             else ""))
    current = _digest(path)
    if digest and current != digest:
        raise PluginError(f"model file {path} or its sidecar changed since it was used (sha256 {digest[:12]}… "
                          f"then, {current[:12]}… now)")
    fields = read_sidecar(path)
    module = _load_module(path).eval()
    source = f"model file {path}"
    class_map = fields.get("class_map") or {}
    if not isinstance(class_map, dict):
        raise PluginError(f"sidecar of {path}: class_map must be an object {{model's name: data set's name}}")
    if kind == "classifier":
        names = fields.get("class_names")
        if not isinstance(names, list) or not names:
            raise PluginError(f"sidecar of {path}: class_names must be a non-empty list of the classifier's classes")
        shape = tuple(fields.get("input_shape") or image_shape or ())
        if len(shape) != 3:
            raise PluginError(f"sidecar of {path}: set input_shape = [C, H, W] so the classifier can be checked")
        wrapped = validate_classifier(module, fields.get("outputs", "logits"), shape, len(names), source=source)
        return ModelFile(path, kind, wrapped, tuple(str(n) for n in names), class_map, shape, current)
    latent_dim = fields.get("latent_dim")
    if not isinstance(latent_dim, int) or latent_dim < 1:
        raise PluginError(f"sidecar of {path}: a generator needs latent_dim, a whole number >= 1")
    encoder = None
    if fields.get("encoder"):
        encoder_path = (path.parent / fields["encoder"]).resolve()
        if not encoder_path.is_file():
            raise PluginError(f"sidecar of {path}: encoder file {encoder_path} not found")
        encoder = _load_module(encoder_path).eval()
    generator = (_EncodingFileGenerator if encoder is not None else FileGenerator)(module, latent_dim, encoder).eval()
    shape = validate_generator(generator, source=source)
    return ModelFile(path, kind, generator, (), class_map, shape, current)


def finetunable_net(module: nn.Module) -> nn.Module:
    """The module whose weights a finetuned copy stores (the classifier inside its probability wrapper)."""
    return module.net if isinstance(module, ProbabilityModel) else module


@dataclass(frozen=True)
class LinkedFile:
    """A plugin or model file a reference names, described for a person to confirm before it is loaded.

    Attributes
    ----------
    path : Path
        Its absolute path.
    kind : str
        ``plugin`` (Python code that runs when loaded) or ``model file``.
    size : int
        Bytes.
    sha256 : str
        Of the file (and its sidecar, for a model file), as a stored reference pins it.
    reference : str
        The reference to load it by, pinned to this content.
    """

    path: Path
    kind: str
    size: int
    sha256: str
    reference: str


def describe_linked_file(reference: str) -> LinkedFile:
    """Describe the file a reference names, without loading it: what a link's reference is shown as.

    Only plugins (``.py``) and model files (``.pt``, ``.pt2``, ``.ts``, with their ``.json`` sidecar) are
    candidates: any other path is refused, whatever exists there.

    Raises
    ------
    PluginError
        For a reference that names no plugin or model file, or a file that does not exist.
    """

    text = str(reference or "")
    if is_plugin_reference(text):
        path, kind = parse_plugin_reference(text)[0], "plugin"
    elif is_model_file_reference(text):
        body = text[len(MODEL_FILE_PREFIX):] if text.startswith(MODEL_FILE_PREFIX) else text
        path, kind = Path(body.partition(_DIGEST_MARK)[0]).expanduser().resolve(), "model file"
    else:
        raise PluginError(f"{excerpt(text)} names no plugin (.py) or model file (.pt, .pt2, .ts): nothing is loaded")
    if not path.is_file():
        raise PluginError(f"{kind} file {path} not found")
    digest = file_sha256(path) if kind == "plugin" else _digest(path)
    pinned = f"{PLUGIN_PREFIX}{path}{_DIGEST_MARK}{digest}" if kind == "plugin" else model_file_reference(path)
    return LinkedFile(path, kind, path.stat().st_size, digest, pinned)
