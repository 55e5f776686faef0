"""Model checks kept on disk beside a stored model's weights, so that a new process does not measure again.

Every run in a worker process, every CLI call and every dashboard server checks its models on the data before
any result is shown (:mod:`probe_core.models.checks`). Within a process a check is cached; across processes it
was measured again each time: a generator's check decodes a thousand prior samples and runs the classifier on
them and on as many real images, seconds on 2 cores for a 64x64 generator, paid by every run.

A kept check is keyed by everything its result depends on: the fingerprint of each model's architecture and
weights (:func:`model_fingerprint`), the digest of the exact images and labels it looked at, its settings, and
:data:`KEPT_CHECK_VERSION`. A model whose behaviour its weights do not fix (a plugin's or a model file's code, an
in-memory module) is never kept, nor is any check it takes part in. A file that cannot be read counts as not
kept, and one that cannot be written is skipped: keeping checks saves time and never changes a verdict.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import numpy as np
import torch

from probe_core.models.remedies import FOREIGN_ARCHITECTURES
from probe_core.models.spec import KINDS

# Raise whenever what a check measures or how it judges changes: every kept check is then measured again.
KEPT_CHECK_VERSION = 1
CHECKS_FOLDER = "checks"


def model_fingerprint(model) -> str | None:
    """SHA-256 of a stored model's architecture and weights, as its module holds them now.

    Parameters
    ----------
    model : LoadedModel
        Resolved by the registry.

    Returns
    -------
    str or None
        None for a model that is not a stored one built from probe_core's own architectures (a plugin, a model
        file, a finetuned copy of either, an in-memory module): its code, not only its weights, decides what it
        computes.
    """
    record = model.record or {}
    architecture = (record.get("spec") or {}).get("architecture")
    if (model.kind not in KINDS or not record.get("path") or not isinstance(architecture, dict)
            or architecture.get("class") in FOREIGN_ARCHITECTURES):
        return None
    digest = hashlib.sha256(json.dumps(architecture, sort_keys=True).encode())
    # the wrappers a resolution adds (class alignment, a resize) are part of what the module computes
    digest.update(".".join(type(part).__qualname__ for part in model.module.modules()).encode())
    state = sorted(model.module.state_dict().items())
    digest.update(json.dumps([name for name, _ in state]).encode())
    digest.update(tensors_digest(*(tensor for _, tensor in state)).encode())
    return digest.hexdigest()


def tensors_digest(*tensors: torch.Tensor) -> str:
    """SHA-256 of tensors' shapes, dtypes and values (the images and labels a check looked at)."""
    digest = hashlib.sha256()
    for tensor in tensors:
        tensor = torch.as_tensor(tensor).detach().cpu().contiguous()
        digest.update(f"{tuple(tensor.shape)}{tensor.dtype}".encode())
        digest.update(tensor.view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def kept_check_path(owner, kind: str, models: list, settings: dict, data: tuple) -> Path | None:
    """Where the check of ``kind`` on these models, settings and ``data`` (the tensors it looks at) is kept,
    beside ``owner``'s weights; None when one of ``models`` (``None`` entries, an absent judge, are skipped)
    cannot be fingerprinted, and then nothing is hashed."""
    fingerprints = []
    for model in models:
        if model is None:
            fingerprints.append(None)
            continue
        fingerprint = model_fingerprint(model)
        if fingerprint is None:
            return None
        fingerprints.append([model.id, fingerprint, repr(model.class_match)])
    key = json.dumps([KEPT_CHECK_VERSION, kind, fingerprints, settings, tensors_digest(*data)], sort_keys=True,
                     default=str)
    name = hashlib.sha256(key.encode()).hexdigest()[:40]
    return Path(owner.record["path"]).parent / CHECKS_FOLDER / f"{kind}-{name}"


def read_kept(path: Path | None) -> tuple[dict, np.ndarray | None] | None:
    """A kept check's fields and its sample grid (None when it has none), or None when nothing usable is kept."""
    if path is None:
        return None
    try:
        fields = json.loads(path.with_suffix(".json").read_text())
        grid = None
        if fields.pop("has_samples", False):
            with np.load(path.with_suffix(".npz")) as arrays:
                grid = arrays["samples"]
        return fields, grid
    except (OSError, ValueError, KeyError):
        return None


def keep(path: Path | None, fields: dict, samples: np.ndarray | None = None) -> None:
    """Keep a check's JSON-ready ``fields`` (and a sample grid) at ``path``; the JSON is written last, each file
    whole or not at all, so a reader never sees half a check. A workspace that cannot be written keeps nothing."""
    if path is None:
        return
    try:
        text = json.dumps({**fields, "has_samples": samples is not None})
        path.parent.mkdir(parents=True, exist_ok=True)
        if samples is not None:
            _write_whole(path.with_suffix(".npz"), lambda handle: np.savez(handle, samples=samples))
        _write_whole(path.with_suffix(".json"), lambda handle: handle.write(text.encode()))
    except (OSError, TypeError, ValueError):  # a read-only workspace, or a figure JSON cannot hold
        return


def _write_whole(path: Path, write) -> None:
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "wb") as file:
            write(file)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
