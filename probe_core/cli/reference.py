"""The CLI reference (``docs/cli.md``), generated from the argument parser so it cannot drift.

``python -m probe_core.cli.reference > docs/cli.md`` writes it; a test fails when the file is stale.
"""

from __future__ import annotations

import argparse

from probe_core.cli import build_parser

WIDTH = 100  # help is wrapped at this width whatever the terminal, so the file is the same everywhere


class _FixedWidthHelp(argparse.HelpFormatter):
    def __init__(self, prog: str) -> None:
        super().__init__(prog, width=WIDTH, max_help_position=32)


def _subcommands(parser: argparse.ArgumentParser):
    for action in parser._actions:  # argparse offers no public way to walk sub-parsers
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.items()


def _sections(parser: argparse.ArgumentParser, path: str, depth: int):
    parser.formatter_class = _FixedWidthHelp
    yield f"{'#' * depth} `{path}`\n\n```text\n{parser.format_help().rstrip()}\n```\n"
    for name, child in _subcommands(parser):
        yield from _sections(child, f"{path} {name}", min(depth + 1, 4))


def cli_reference() -> str:
    """The whole reference as Markdown: every command's ``--help``, in the parser's order."""
    header = ("# Command-line reference\n\nGenerated from the argument parser by "
              "`python -m probe_core.cli.reference > docs/cli.md`; do not edit by hand.\n")
    return "\n".join([header, *_sections(build_parser(), "probe", 2)])


if __name__ == "__main__":
    print(cli_reference(), end="")
