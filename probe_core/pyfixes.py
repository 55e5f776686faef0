"""Work-arounds for known bugs of the Python versions the project runs on.

:func:`serialize_ast_parse` is installed when :mod:`probe_core` is imported. On CPython
3.11 and 3.12 before their fixes (gh-106905, fixed in 3.11.8 and 3.12.2), ``ast.parse``
keeps its recursion counter in interpreter-wide state. When a garbage collection during
one thread's parse runs a finaliser that lets another thread parse, the first parse fails
with ``SystemError: AST constructor recursion depth mismatch``. Parsing is everywhere in
a threaded process: ``numpy.load`` parses every ``.npy`` header (the workspace stores its
arrays that way), Streamlit parses each page script, ``traceback`` parses source lines.
The dashboard server reads arrays and runs pages in one thread per session, and tests run
jobs in threads, so a page could fail at random. Parses never run in parallel anyway (they
hold the interpreter lock), so a process-wide lock around ``ast.parse`` costs nothing.
"""

from __future__ import annotations

import ast
import functools
import sys
import threading

_AST_PARSE_LOCK = threading.RLock()


def ast_parse_needs_lock(version: tuple[int, ...] = tuple(sys.version_info[:3])) -> bool:
    """Whether this Python's ``ast.parse`` may fail when threads parse at once.

    Every 3.11 and 3.12 release counts: the fix went into their later patch releases, and
    the lock is harmless where the bug is fixed.

    Parameters
    ----------
    version : tuple of int
        ``(major, minor[, micro])``; this interpreter's by default.

    Returns
    -------
    bool
    """
    return (3, 11) <= version[:2] < (3, 13)


def serialize_ast_parse() -> None:
    """Make ``ast.parse`` (and so ``ast.literal_eval``) take a process-wide lock; idempotent."""
    if not ast_parse_needs_lock() or getattr(ast.parse, "__probe_serialized__", False):
        return
    unlocked_parse = ast.parse

    @functools.wraps(unlocked_parse)
    def parse(*args, **kwargs):
        with _AST_PARSE_LOCK:
            return unlocked_parse(*args, **kwargs)

    parse.__probe_serialized__ = True
    ast.parse = parse
