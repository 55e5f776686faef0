"""Text a person typed or a file named, shown as plain text: never rendered as Markdown or HTML.

``st.error``, ``st.warning``, ``st.info`` and ``st.markdown`` render Markdown: a message that quotes a
``?classifier=`` value such as ``[Session expired, sign in](https://…)`` would show a working link (or load a
remote image) inside the app. Every message that quotes input, an exception's message above all, goes through
:func:`plain` (``tests/unit/test_architecture.py`` checks the pages for unescaped interpolation).
"""

from __future__ import annotations

import string

_MARKDOWN_SPECIALS = frozenset(string.punctuation)  # CommonMark lets any ASCII punctuation be escaped


def plain(text: object) -> str:
    """``text`` escaped so that Streamlit's Markdown shows it as written: every ASCII punctuation character is
    backslash-escaped (no link, image, emphasis, HTML tag, ``:color[...]`` directive or autolinked URL can
    form), and line breaks become spaces (a message stays one paragraph)."""
    escaped = "".join("\\" + c if c in _MARKDOWN_SPECIALS else c for c in str(text))
    return " ".join(escaped.splitlines())
