"""The workspace: one folder with model files and the SQLite database."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from probe_core.errors import ProbeError
from probe_core.store import Store

WORKSPACE_ENV = "PROBE_WORKSPACE"
DATABASE_NAME = "probe.sqlite"


def default_workspace_path() -> Path:
    """``$PROBE_WORKSPACE`` if set, else ``./workspace``."""
    return Path(os.environ.get(WORKSPACE_ENV) or "workspace").expanduser()


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


class Workspace:
    """A workspace folder: ``models/`` with state_dict files and ``probe.sqlite``.

    Parameters
    ----------
    root : str or Path, optional
        The folder (created if missing); default :func:`default_workspace_path`.
    data_dir : str or Path, optional
        Folder of file-based data sets for this user (default ``$PROBE_DATA_DIR``); it belongs
        to whoever made this object and is never changed on a shared one (see :meth:`for_data_dir`).
    """

    def __init__(self, root: str | Path | None = None, data_dir: str | Path | None = None,
                 store: Store | None = None, on_training=None) -> None:
        self.root = Path(root).expanduser() if root is not None else default_workspace_path()
        try:
            self.models_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ProbeError(f"cannot create workspace folder {self.root}: {exc.strerror}") from exc
        self.store = store if store is not None else Store(self.root / DATABASE_NAME)
        self.data_dir = data_dir or None
        self.on_training = on_training  # see ModelRegistry: how training a missing model is announced
        self._registry = None

    def for_data_dir(self, data_dir: str | Path | None) -> "Workspace":
        """The same workspace (same database connection pool) seen with another data folder.

        Cheap: the dashboard makes one per page run from the person's own setting.
        """
        return Workspace(self.root, data_dir, store=self.store)

    @property
    def models_dir(self) -> Path:
        return self.root / "models"

    @property
    def registry(self):
        """The :class:`probe_core.models.ModelRegistry` of this workspace."""
        if self._registry is None:
            from probe_core.models.registry import ModelRegistry

            self._registry = ModelRegistry(self, self.data_dir, self.on_training)
        return self._registry

    def __repr__(self) -> str:
        return f"Workspace({str(self.root)!r})"
