"""The documentation stays true: the CLI reference is the parser's, links resolve, the README stays short."""

import re
from pathlib import Path

from probe_core.cli.reference import cli_reference

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted((ROOT / "docs").glob("*.md"))


def test_the_cli_reference_is_generated_from_the_parser():
    written = (ROOT / "docs" / "cli.md").read_text()
    assert written == cli_reference(), "docs/cli.md is stale: python -m probe_core.cli.reference > docs/cli.md"


def test_the_readme_is_short_and_names_no_path_outside_the_repository():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 150  # the user's path; measurements live in docs/
    assert not re.search(r"\.\./", readme)
    assert len((ROOT / "CONTRIBUTING.md").read_text().splitlines()) <= 150
    assert not (ROOT / "DEVELOPERS.md").exists()


def test_every_relative_link_in_the_docs_resolves():
    for page in [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *DOCS]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" in target:
                continue
            assert (page.parent / target).exists(), f"{page.relative_to(ROOT)} links to {target}, which is missing"


def test_every_benchmark_the_docs_cite_exists():
    for page in [ROOT / "README.md", *DOCS]:
        for script in re.findall(r"benchmarks/(\w+)\.py", page.read_text()):
            assert (ROOT / "benchmarks" / f"{script}.py").exists(), (page.name, script)


def test_every_option_the_docs_give_a_benchmark_is_one_it_takes():
    """``benchmarks/X.py --opt ...`` in README and docs/: X's argument parser declares each ``--opt``."""
    for page in [ROOT / "README.md", *DOCS]:
        for script, arguments in re.findall(r"benchmarks/(\w+)\.py((?:\s+--[\w-]+(?:[ =][^\s`|)\]]+)?)*)", page.read_text()):
            source = (ROOT / "benchmarks" / f"{script}.py").read_text()
            for option in re.findall(r"--[\w-]+", arguments):
                assert f'"{option}"' in source, f"{page.name} runs benchmarks/{script}.py {option}, which it does not take"


def _documented_commands() -> list[tuple[str, int, str, bool]]:
    """Every ``probe ...`` the README and docs/ give: (page, line, command, whole) where ``whole`` says it is a
    line of a code block (a full invocation) rather than a command named in the prose."""
    found = []
    for page in [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *DOCS]:
        if page.name == "cli.md":
            continue
        in_block = False
        for number, line in enumerate(page.read_text().replace("\\\n", " ").splitlines(), 1):
            if line.startswith("```"):
                in_block = not in_block
            elif in_block and line.strip().startswith("probe "):
                found.append((page.name, number, re.split(r"\s#\s", line.strip())[0], True))
            elif not in_block:
                found += [(page.name, number, span, False) for span in re.findall(r"`(probe [^`]+)`", line)]
    return found


def test_every_probe_command_the_docs_give_is_one_the_parser_takes():
    """Commands, options and choices as the docs write them parse; placeholders (NAME, ID) stand for a value, and
    a command named in the prose may leave out what it requires."""
    import contextlib
    import io
    import shlex

    from probe_core.cli import build_parser

    commands = _documented_commands()
    assert len(commands) > 50
    for page, number, command, whole in commands:
        tokens = [("1" if re.fullmatch(r"[A-Z][A-Z_0-9]*", token) else token.split("|")[0])
                  for token in shlex.split(command)[1:]]
        said = io.StringIO()
        try:
            with contextlib.redirect_stderr(said), contextlib.redirect_stdout(io.StringIO()):
                build_parser().parse_args(tokens)
        except SystemExit as exit_:
            message = said.getvalue().strip()
            if exit_.code and (whole or "arguments are required" not in message):
                raise AssertionError(f"{page}:{number} gives `{command}`, which probe refuses: {message}") from None
