"""Exceptions with messages meant for the user.

Every error that the CLI or the dashboard shows to a user is a ``ProbeError``
(a ``ValueError``), so front ends can catch one type and print its message
without a traceback.
"""


import math
import numbers


class ProbeError(ValueError):
    """Bad input or a failed precondition, with a message that says what to do."""


class DataError(ProbeError):
    """A data set is missing, malformed or unknown."""


class PluginError(ProbeError):
    """A user plugin failed to import or returned outputs of the wrong form."""


class ModelNotFoundError(ProbeError):
    """No model with the requested id is in the registry."""


class CancelledError(Exception):
    """Raised inside a background job when the user asked to stop it."""


INPUT_EXCERPT_CHARS = 32


def printable(text: object) -> str:
    """``text`` safe to print on a terminal: every character that is not printable (control characters, ANSI
    escape sequences' ESC, bidirectional overrides) is shown as its ``\\xNN``/``\\uNNNN`` escape instead."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


def excerpt(text: object, limit: int = INPUT_EXCERPT_CHARS) -> str:
    """A bounded, printable quotation of user input for an error message.

    The text is quoted as ``repr`` does, so control characters show as escapes, and cut so that the quotation
    is at most ``limit + 2`` characters: a message never grows with what the user typed.
    """
    text = str(text)
    kept = min(len(text), limit)
    while len(repr(text[:kept])) > limit + 2:
        kept -= 1
    if kept == len(text):
        return repr(text)
    return f"{text[:kept]!r}… ({len(text)} characters)"


def listing(names: "list[str] | tuple[str, ...]", shown: int = 10, name_chars: int = 20) -> str:
    """Up to ``shown`` names, each cut to ``name_chars``, then how many there are, for a message."""
    cut = [name if len(name) <= name_chars else name[: name_chars - 1] + "…" for name in map(str, names[:shown])]
    more = f", … ({len(names)} in all)" if len(names) > shown else ""
    return ", ".join(cut) + more


def check_number_ranges(values: dict, ranges: dict, words: "dict[str, str] | None" = None,
                        error: "type[ProbeError]" = ProbeError) -> None:
    """Refuse a value outside its inclusive range, or not a number, with a :class:`ProbeError` (or ``error``).

    Parameters
    ----------
    values : dict
        Setting name -> value; ``None`` means "not given" and is not checked.
    ranges : dict
        Setting name -> (low, high). Whole-number bounds ask for a whole number; others for a finite number.
    words : dict, optional
        Setting name -> how a message names it; by default the name with spaces for underscores.
    error : type, optional
        The ProbeError subclass raised (a data loader's :class:`DataError`, say).
    """
    for name, value in values.items():
        if value is None:
            continue
        low, high = ranges[name]
        whole = isinstance(low, int) and isinstance(high, int)
        is_number = not isinstance(value, bool) and isinstance(value, numbers.Integral if whole else numbers.Real)
        if not (is_number and math.isfinite(value) and low <= value <= high):
            word = (words or {}).get(name, name.replace("_", " "))
            bounds = f"from {low:,} to {high:,}" if whole else f"from {low:g} to {high:g}"
            shown = repr(value) if isinstance(value, numbers.Number) else excerpt(value)
            raise error(f"{word} must be {'a whole number' if whole else 'a number'} {bounds}, got {shown}")
