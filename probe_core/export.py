"""Everything that leaves Model Probe as a file or as text: plain-text tables and ``.npz`` archives.

One place for each format, shared by the CLI and the pages (HTML reports are in
:mod:`probe_core.reports`, label CSVs in :mod:`probe_core.defuse.labels`).
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from probe_core.errors import ProbeError


def format_table(rows: list[list[str]], header: list[str]) -> str:
    """A left-aligned plain-text table with a dashed rule under the header.

    Parameters
    ----------
    rows : list of list
        One list of cells per row; cells are turned into text with ``str``.
    header : list of str
    """
    widths = [max(len(str(c)) for c in column) for column in zip(header, *rows)]

    def line(cells) -> str:
        return "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


def npz_bytes(**arrays) -> bytes:
    """A compressed ``.npz`` archive of the named arrays, in memory (for downloads and files alike)."""
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **{name: np.asarray(value) for name, value in arrays.items()})
    return buffer.getvalue()


def sample_arrays(stored: list[dict]) -> dict[str, np.ndarray]:
    """Stored Bayes-TrEx samples as arrays.

    Returns
    -------
    dict
        ``z`` (N, D) latents, ``confidences`` (N, K), ``images`` (N, C, H, W), ``target_index`` (N,),
        ``chain`` (N,) and ``hit`` (N,) booleans.

    Raises
    ------
    ProbeError
        If there are no samples.
    """
    if not stored:
        raise ProbeError("no samples were stored, nothing to export")
    return {"z": np.stack([s["z"] for s in stored]), "confidences": np.stack([s["confidences"] for s in stored]),
            "images": np.stack([s["image"] for s in stored]),
            "target_index": np.array([s["target_index"] for s in stored]),
            "chain": np.array([s["chain"] for s in stored]), "hit": np.array([bool(s["hit"]) for s in stored])}


def write_file(path: str | Path, content: bytes) -> None:
    """Write an export to a path the user named; a path that cannot be written gives a clear error."""
    try:
        Path(path).write_bytes(content)
    except OSError as exc:
        raise ProbeError(f"cannot write {path}: {exc.strerror}") from exc
