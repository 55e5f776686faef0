"""Where tensors live: the ``--device`` option and the sidebar's device setting, resolved once."""

from __future__ import annotations

import torch

from probe_core.errors import ProbeError


def resolve_device(name: str | torch.device | None = "auto") -> torch.device:
    """``auto`` picks CUDA when present, else the CPU; ``cpu``/``cuda[:N]`` are taken as given.

    Raises
    ------
    ProbeError
        For an unknown name or CUDA asked for on a machine without it.
    """
    if isinstance(name, torch.device):
        return name
    text = (name or "auto").strip().lower()
    if text == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if text == "cpu":
        return torch.device("cpu")
    if text.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ProbeError(f"device {name!r} requested but no CUDA device is available; use --device cpu")
        return torch.device(text)
    raise ProbeError(f"unknown device {name!r}: use auto, cpu or cuda[:N]")
