"""Exceptions with messages meant for the user.

Every error that the CLI or the dashboard shows to a user is a ``ProbeError``
(a ``ValueError``), so front ends can catch one type and print its message
without a traceback.
"""


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
