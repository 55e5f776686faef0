"""The database connection every table group shares: per-thread SQLite connections, write transactions,
the schema migration, and the array packing the tables use for their blobs."""

from __future__ import annotations

import io
import json
import logging
import os
import sqlite3
import stat
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from probe_core.errors import ProbeError
from probe_core.store.schema import MIGRATIONS, SCHEMA_VERSION

log = logging.getLogger(__name__)
PRIVATE_FOLDER, PRIVATE_FILE = 0o700, 0o600
SIDE_FILES = ("-wal", "-shm", "-journal")  # SQLite gives them the main file's permissions


def pack_array(array: Any) -> bytes:
    """Serialise an array to ``.npy`` bytes (keeps dtype and shape)."""
    buffer = io.BytesIO()
    np.save(buffer, np.asarray(array), allow_pickle=False)
    return buffer.getvalue()


def unpack_array(blob: bytes | None) -> np.ndarray | None:
    """Inverse of :func:`pack_array`."""
    return None if blob is None else np.load(io.BytesIO(blob), allow_pickle=False)


def pack_arrays(arrays: dict[str, Any]) -> bytes:
    """Serialise named arrays to ``.npz`` bytes (uncompressed: latents barely compress)."""
    buffer = io.BytesIO()
    np.savez(buffer, **{name: np.asarray(value) for name, value in arrays.items()})
    return buffer.getvalue()


def unpack_arrays(blob: bytes) -> dict[str, np.ndarray]:
    """Inverse of :func:`pack_arrays`."""
    with np.load(io.BytesIO(blob), allow_pickle=False) as archive:
        return {name: archive[name] for name in archive.files}



def loads(text: str | None) -> Any:
    """A JSON column decoded; None stays None."""
    return None if text is None else json.loads(text)


class Database:
    """One workspace database file, opened per thread; the table groups of :class:`~probe_core.store.Store`
    build on it.

    Parameters
    ----------
    path : str or Path
        The SQLite file; created with the current schema when missing.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(mode=PRIVATE_FOLDER, parents=True, exist_ok=True)
        self._keep_private()
        self._local = threading.local()
        self._migrate()

    def _keep_private(self) -> None:
        """The database holds password hashes and the cookie-signing secret: its folder is 0700 and its files
        0600, created so; an older workspace's wider permissions are narrowed on open, with a warning."""
        if not self.path.exists():
            os.close(os.open(self.path, os.O_CREAT | os.O_WRONLY, PRIVATE_FILE))
        candidates = [(self.path.parent, PRIVATE_FOLDER), (self.path, PRIVATE_FILE)]
        candidates += [(self.path.with_name(self.path.name + side), PRIVATE_FILE) for side in SIDE_FILES]
        for candidate, mode in candidates:
            try:
                current = stat.S_IMODE(candidate.stat().st_mode)
                if current & 0o077:
                    os.chmod(candidate, mode)
                    log.warning("%s was readable by other users (mode %o): narrowed to %o, as it holds the "
                                "workspace's password hashes and sign-in secret", candidate, current, mode)
            except FileNotFoundError:
                continue
            except PermissionError as exc:  # not ours to change: say so, never fail a read-only use
                log.warning("cannot narrow the permissions of %s: %s", candidate, exc)

    # -- connections -----------------------------------------------------------------
    def _connection(self) -> sqlite3.Connection:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = sqlite3.connect(self.path, timeout=60.0, isolation_level=None)
            connection.row_factory = sqlite3.Row
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=NORMAL")
            connection.execute("PRAGMA foreign_keys=ON")
            connection.execute("PRAGMA busy_timeout=60000")
            self._local.connection = connection
        return connection

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (``BEGIN IMMEDIATE``), rolled back on any error."""
        connection = self._connection()
        connection.execute("BEGIN IMMEDIATE")
        try:
            yield connection
        except BaseException:
            connection.execute("ROLLBACK")
            raise
        connection.execute("COMMIT")

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        return self._connection().execute(sql, params).fetchall()

    def close(self) -> None:
        """Close this thread's connection (others close when their threads end)."""
        connection = getattr(self._local, "connection", None)
        if connection is not None:
            connection.close()
            self._local.connection = None

    def _migrate(self) -> None:
        with self.transaction() as connection:
            version = connection.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise ProbeError(
                    f"workspace database {self.path} has schema version {version}, newer than this "
                    f"Model Probe ({SCHEMA_VERSION}); upgrade Model Probe or use another workspace"
                )
            for target in range(version + 1, SCHEMA_VERSION + 1):
                for statement in MIGRATIONS[target].split(";"):
                    if statement.strip():
                        connection.execute(statement)
                connection.execute(f"PRAGMA user_version = {target}")

    @property
    def schema_version(self) -> int:
        return int(self._query("PRAGMA user_version")[0][0])
