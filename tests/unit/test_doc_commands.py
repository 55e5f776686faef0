"""Every ``probe …`` command line quoted in README.md, CONTRIBUTING.md and docs/ parses with the real CLI parser.

A command is taken from a code block line or an inline code span that starts with ``probe`` (after an optional
``$``, environment assignments or ``.venv/bin/``). It is parsed, not run: value types, choices and required
options are relaxed so that placeholders (``--run N``) and a bare ``probe sample`` pass, while an option the
command does not have, an option in the wrong place (``probe ui --workspace X``) or a command that does not
exist fails with the parser's own message.
"""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest

from probe_core.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
PREFIX = re.compile(r"^(\$\s+)?((?:[A-Z_][A-Z0-9_]*=\S*\s+)*)(?:\.venv/bin/)?(probe(?:\s|$).*)$")
INLINE = re.compile(r"`((?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?:\.venv/bin/)?probe(?:\s[^`]*)?)`")
SHELL_BREAKS = {"|", "||", "&&", ";", ">", ">>", "<", "&"}


def quoted_commands() -> list[tuple[str, str]]:
    """(where, command line) for every ``probe`` command the documents quote."""
    found = []
    for document in DOCUMENTS:
        in_block, pending = False, ""
        for number, line in enumerate(document.read_text().splitlines(), 1):
            where = f"{document.relative_to(ROOT)}:{number}"
            if line.lstrip().startswith("```"):
                in_block, pending = not in_block, ""
                continue
            if in_block:
                text = pending + line.strip()
                if text.endswith("\\"):  # a command continued on the next line
                    pending = text[:-1] + " "
                    continue
                pending = ""
                match = PREFIX.match(text)
                if match:
                    found.append((where, match.group(3)))
            else:
                found += [(where, PREFIX.match(span).group(3)) for span in INLINE.findall(line)]
    return found


def _relaxed(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The parser with value types, choices and required flags dropped, in every sub-parser: structure only."""
    for action in parser._actions:
        action.type, action.choices, action.required = None, None, False
        if isinstance(action, argparse._SubParsersAction):
            action.choices = action._name_parser_map
            for sub in action._name_parser_map.values():
                _relaxed(sub)
    return parser


def _argv(command: str) -> list[str]:
    lexer = shlex.shlex(command, posix=True, punctuation_chars="|&;<>")
    lexer.whitespace_split, lexer.commenters = True, "#"
    words = []
    for word in lexer:
        if word in SHELL_BREAKS:
            break
        words.append(word)
    return words[1:]  # without "probe"


COMMANDS = quoted_commands()


def test_the_documents_quote_many_commands():
    assert len(COMMANDS) > 60 and any(where.startswith("README") for where, _ in COMMANDS)


@pytest.mark.parametrize(("where", "command"), COMMANDS, ids=[where for where, _ in COMMANDS])
def test_a_quoted_command_parses(where, command, capsys):
    parser = _relaxed(build_parser())
    argv = _argv(command)
    try:
        parser.parse_args(argv)
    except SystemExit as stop:
        message = capsys.readouterr().err.strip()
        assert stop.code == 0, f"{where}: `{command}` does not parse: {message}"


def test_a_wrong_order_is_caught():
    with pytest.raises(SystemExit) as stop:
        _relaxed(build_parser()).parse_args(_argv("probe ui --workspace somewhere"))
    assert stop.value.code == 2


@pytest.mark.parametrize("argv", [["sample", "--target", "high:3", "--chains", "abc"], ["ui", "--workspace", "x"],
                                  ["nonsense"], ["defuse", "identify", "--no-such-option"]])
def test_a_usage_error_is_one_line_and_exit_2(argv, capsys):
    """README: bad input prints one line and exits with status 2 (argparse's usage block is not printed)."""
    from probe_core.cli import main

    with pytest.raises(SystemExit) as stop:
        main(argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and len(err.strip().splitlines()) == 1 and "error:" in err and "--help" in err
