"""The workspace: one folder with model files and the SQLite database, composed one way.

``Workspace(root, data_dir)`` builds the :class:`~probe_core.store.Store` and the
:class:`~probe_core.models.registry.ModelRegistry` over it; neither knows the workspace.
"""

from __future__ import annotations

import os
from pathlib import Path

from probe_core.errors import ProbeError
from probe_core.models.registry import ModelRegistry, TrainingAnnouncer
from probe_core.runs.progress import announce_training
from probe_core.store import Store
from probe_core.team.accounts import Actor, Permission, require

WORKSPACE_ENV = "PROBE_WORKSPACE"
DATABASE_NAME = "probe.sqlite"


def default_workspace_path() -> Path:
    """``$PROBE_WORKSPACE`` if set, else ``./workspace``."""
    return Path(os.environ.get(WORKSPACE_ENV) or "workspace").expanduser()


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
                 store: Store | None = None, on_training: TrainingAnnouncer | None = None,
                 actor: Actor | None = None) -> None:
        self.root = Path(root).expanduser() if root is not None else default_workspace_path()
        try:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)  # it holds password hashes: private
            self.models_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ProbeError(f"cannot create workspace folder {self.root}: {exc.strerror}") from exc
        self.store = store if store is not None else Store(self.root / DATABASE_NAME)
        self.data_dir = data_dir or None
        self.registry = ModelRegistry(self.store, self.models_dir, self.data_dir, on_training, actor)

    def for_data_dir(self, data_dir: str | Path | None, actor: Actor | None = None) -> "Workspace":
        """The same workspace (same database connection pool) seen with another data folder, by ``actor``.

        Cheap: the dashboard makes one per page run from the person's own setting. Its registry resolves
        references as ``actor`` (None: the local owner, who may load anything).

        Raises
        ------
        PermissionDenied
            When ``actor`` may not browse runs and reports (every page reads the workspace through this).
        """
        if actor is not None:
            require(actor, Permission.BROWSE)
        return Workspace(self.root, data_dir, store=self.store, on_training=self.registry.on_training, actor=actor)

    @property
    def models_dir(self) -> Path:
        return self.root / "models"

    def __repr__(self) -> str:
        return f"Workspace({str(self.root)!r})"


def open_workspace(workspace=None, data_dir: str | Path | None = None) -> Workspace:
    """A :class:`Workspace` from a path (or the default one) whose training shows a bar; a workspace is
    returned as it is."""
    if isinstance(workspace, Workspace):
        return workspace
    return Workspace(workspace, data_dir=data_dir, on_training=announce_training)
