"""Everything that leaves Model Probe as a file or as text: plain-text tables and ``.npz`` archives.

One place for each format, shared by the CLI and the pages (HTML reports are in
:mod:`probe_core.reporting.reports`, a Defuse run's label CSV in :mod:`probe_core.defuse.labels`).
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
from pathlib import Path

import numpy as np

from probe_core.errors import ProbeError, printable
from probe_core.team.accounts import Actor, Permission, local_owner, require


def format_table(rows: list[list[str]], header: list[str]) -> str:
    """A left-aligned plain-text table with a dashed rule under the header.

    Parameters
    ----------
    rows : list of list
        One list of cells per row; cells are turned into text with ``str`` and
        :func:`~probe_core.errors.printable`, so stored text (names, messages) cannot send a terminal control
        characters or escape sequences.
    header : list of str
    """
    rows = [[printable(c) for c in row] for row in rows]
    widths = [max(len(str(c)) for c in column) for column in zip(header, *rows)]

    def line(cells) -> str:
        return "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


def npz_bytes(**arrays) -> bytes:
    """A compressed ``.npz`` archive of the named arrays, in memory (for downloads and files alike)."""
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **{name: np.asarray(value) for name, value in arrays.items()})
    return buffer.getvalue()


def sample_arrays(stored: list[dict], *, actor: Actor | None = None) -> dict[str, np.ndarray]:
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
    PermissionDenied
        Unless ``actor`` (default the local owner) may download exports.
    """
    require(actor or local_owner(), Permission.EXPORT)
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


LABEL_EXPORT_FORMATS = ("csv", "json")
LABEL_COLUMNS = ("item", "item_id", "annotator", "source", "label", "is_failure", "labelled_at")
HISTORY_COLUMNS = ("item", "item_id", "annotator", "source", "old_label", "new_label", "changed_at")


def _when(timestamp: float) -> str:
    return dt.datetime.fromtimestamp(timestamp, dt.timezone.utc).isoformat(timespec="seconds")


def label_rows(store, history: bool = False) -> list[dict]:
    """Every label in the workspace with who gave it and when (UTC, ISO 8601), oldest first.

    ``item`` is ``review_image``, ``cluster``, ``sample`` or ``test_image`` (``item_id`` then reads
    ``DATASET:INDEX``). With ``history``, every change instead: ``old_label`` -> ``new_label``.
    """
    if history:
        return [{"item": row["item"], "item_id": row["item_id"], "annotator": row["annotator"],
                 "source": row["source"], "old_label": row["old_label"], "new_label": row["new_label"],
                 "changed_at": _when(row["changed_at"])} for row in store.label_history()]
    rows = []
    for label in store.get_labels():
        item, item_id = next((name, label[f"{name}_id"]) for name in ("review_image", "sample", "cluster")
                             if label[f"{name}_id"] is not None)
        rows.append({"item": item, "item_id": str(item_id), "annotator": label["annotator"],
                     "source": label["source"], "label": label["label"], "is_failure": label["is_failure"],
                     "labelled_at": _when(label["created_at"])})
    for verdict in store.get_test_image_labels(None):
        rows.append({"item": "test_image", "item_id": f"{verdict['dataset']}:{verdict['test_index']}",
                     "annotator": verdict["annotator"], "source": verdict["source"], "label": verdict["label"],
                     "is_failure": None, "labelled_at": _when(verdict["created_at"])})
    return rows


FORMULA_LEADS = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(value):
    """A CSV cell that a spreadsheet shows as text: a string starting like a formula (``=cmd|...``, ``+``,
    ``-``, ``@``, a tab or carriage return) gets a leading apostrophe (OWASP's CSV injection advice); numbers
    and other values are kept."""
    if isinstance(value, str) and value.startswith(FORMULA_LEADS):
        return "'" + value
    return value


def safe_csv_rows(rows):
    """Every cell of ``rows`` (dicts or sequences) through :func:`spreadsheet_safe`."""
    for row in rows:
        if isinstance(row, dict):
            yield {key: spreadsheet_safe(value) for key, value in row.items()}
        else:
            yield [spreadsheet_safe(value) for value in row]


def labels_text(rows: list[dict], file_format: str, history: bool = False, *, actor: Actor | None = None) -> str:
    """:func:`label_rows` as CSV (a header row) or JSON (a list of objects).

    Raises
    ------
    ProbeError
        For a format other than ``csv`` or ``json``.
    PermissionDenied
        Unless ``actor`` (default the local owner) may download exports.
    """
    require(actor or local_owner(), Permission.EXPORT)
    if file_format not in LABEL_EXPORT_FORMATS:
        raise ProbeError(f"--format is one of {', '.join(LABEL_EXPORT_FORMATS)}, got {file_format!r}")
    if file_format == "json":
        return json.dumps(rows, indent=1) + "\n"
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=HISTORY_COLUMNS if history else LABEL_COLUMNS)
    writer.writeheader()
    writer.writerows(safe_csv_rows(rows))  # names and labels are typed by people: never formulas
    return buffer.getvalue()
