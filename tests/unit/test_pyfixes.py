"""The work-around for CPython's ``ast.parse`` race between threads (gh-106905, see probe_core.pyfixes)."""

import ast
import gc
import io
import sys
import threading

import numpy as np

import probe_core  # noqa: F401  (importing the core installs the work-around)
from probe_core.pyfixes import ast_parse_needs_lock

SOURCE = "\n".join(f"def f{i}(a, b):\n    return [a + b * {i} for _ in range(3)]" for i in range(8))


def parse_while_another_thread_parses() -> list:
    """Parse in this thread and, from a garbage collection in the middle of it, in another thread.

    A collection that runs Python code (here a ``gc`` callback) lets other threads run; on an
    affected Python the second parse resets the first one's recursion counter and the first
    parse fails with ``SystemError``. Returns both parses' outcomes (``"ok"`` or the error).
    """
    outcomes = []

    def parse_and_record():
        try:
            ast.parse(SOURCE)
            outcomes.append("ok")
        except SystemError as error:
            outcomes.append(error)

    collections_during_parse = []
    other_threads = []

    def on_collection(phase, info):
        caller = sys._getframe(1).f_code
        if phase == "start" and caller.co_name == "parse" and caller.co_filename == ast.__file__:
            collections_during_parse.append(info)
            if len(collections_during_parse) == 5:  # well inside building the tree
                other = threading.Thread(target=parse_and_record)
                other.start()
                other.join(timeout=0.5)  # with the lock it waits for this parse; do not wait forever
                other_threads.append(other)

    thresholds = gc.get_threshold()
    gc.collect()
    gc.callbacks.append(on_collection)
    try:
        gc.set_threshold(1)  # collect at nearly every allocation
        parse_and_record()
    finally:
        gc.set_threshold(*thresholds)
        gc.callbacks.remove(on_collection)
    for other in other_threads:
        other.join()
    assert other_threads, "no collection happened during the parse: the test did not exercise the race"
    return outcomes


def test_a_parse_interrupted_by_another_threads_parse_still_succeeds():
    assert parse_while_another_thread_parses() == ["ok", "ok"]


def test_the_locked_parse_behaves_as_the_original():
    if ast_parse_needs_lock():
        assert getattr(ast.parse, "__probe_serialized__", False)
    assert ast.literal_eval("{'shape': (2, 3), 'fortran_order': False}") == {"shape": (2, 3), "fortran_order": False}
    assert isinstance(ast.parse("x = 1", mode="exec", type_comments=True), ast.Module)
    buffer = io.BytesIO()
    np.save(buffer, np.arange(6, dtype=np.float32).reshape(2, 3))
    assert np.load(io.BytesIO(buffer.getvalue())).shape == (2, 3)
    assert ast_parse_needs_lock((3, 11, 7)) and ast_parse_needs_lock((3, 12, 1))
    assert not ast_parse_needs_lock((3, 13, 0))
