"""User text is never rendered as Markdown: :func:`pages.ui.text.plain`, and the pages' messages that quote it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from pages.ui.text import plain

ROOT = Path(__file__).resolve().parents[2]
MESSAGE_CALLS = {"error", "warning", "info", "success", "toast"}
# names that hold text a person or a file supplied: exceptions (their messages quote the input) and the
# problems pages keep in the session for the next rerun
QUOTING_NAMES = {"exc", "error", "err", "reference", "problem"}


@pytest.mark.parametrize("hostile", [
    "[Session expired, sign in](https://evil.example/login)", "![x](https://evil.example/pixel.png)",
    "<img src=x onerror=alert(1)>", ":red[**urgent**] https://evil.example", "line one\n# heading", "`code` *em*"])
def test_plain_text_keeps_every_character_and_forms_no_markup(hostile):
    import string

    shown = plain(hostile)
    assert shown.replace("\\", "") == hostile.replace("\\", "").replace("\n", " ")
    assert "\n" not in shown
    for position, character in enumerate(shown):  # every punctuation character is escaped: no markup can form
        if character in string.punctuation and character != "\\":
            assert shown[position - 1] == "\\", (shown, position)


def _message_calls(tree):
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MESSAGE_CALLS
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "st" and node.args):
            yield node


def _unescaped_names(node, escaped=False):
    """Names of ``QUOTING_NAMES`` (or ``session_state.pop`` of a problem) used outside a ``plain(...)`` call."""
    if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) == "plain":
        escaped = True
    if not escaped:
        if isinstance(node, ast.Name) and node.id in QUOTING_NAMES:
            yield node.id
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "pop" and "session_state" in ast.unparse(
                node.func):
            yield ast.unparse(node)
    for child in ast.iter_child_nodes(node):
        yield from _unescaped_names(child, escaped)


def test_no_page_shows_an_exception_or_a_reference_without_plain():
    sources = [*ROOT.joinpath("pages").rglob("*.py"), ROOT / "app.py"]
    found = [f"{path.relative_to(ROOT)}:{call.lineno}: {ast.unparse(call)[:100]}"
             for path in sources for call in _message_calls(ast.parse(path.read_text()))
             if list(_unescaped_names(call.args[0]))]
    assert found == [], "messages that quote input without pages.ui.text.plain:\n" + "\n".join(found)
    assert sum(1 for path in sources for call in _message_calls(ast.parse(path.read_text()))
               if "plain" in ast.unparse(call.args[0])) >= 25
