"""Classes named by the user: one rule everywhere (data-set views, target specs, labels, CLI options).

A class is given by its name in any case (``bag``, ``Bag``) or by its index (``3``); a name wins
over an index, so a data set whose class names are digits reads the same either way.
"""

from __future__ import annotations

from typing import Sequence

from probe_core.errors import DataError


def class_index(text: str | int, class_names: Sequence[str], where: str = "") -> int:
    """The index of a class given by name (any case) or by index.

    Parameters
    ----------
    text : str or int
    class_names : sequence of str
        K names, index i naming class i.
    where : str, optional
        What the classes belong to, for the message (``for digits``).

    Raises
    ------
    DataError
        If no such class exists; the message lists the valid ones.
    """
    given = str(text).strip()
    lowered = [name.lower() for name in class_names]
    if given.lower() in lowered:
        return lowered.index(given.lower())
    if given.isdigit() and int(given) < len(class_names):
        return int(given)
    suffix = f" {where}" if where else ""
    raise DataError(f"unknown class {given!r}{suffix}; valid: 0..{len(class_names) - 1} or {', '.join(class_names)}")
