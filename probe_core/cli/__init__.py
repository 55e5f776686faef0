"""The ``probe`` command line, one module per command group over :mod:`~probe_core.cli.common`.

- :mod:`~probe_core.cli.data`: ``probe data list|info``
- :mod:`~probe_core.cli.models`: ``probe models train|list|defaults``
- :mod:`~probe_core.cli.sample`: ``probe sample``, ``probe recipe``, ``probe label`` (Bayes-TrEx)
- :mod:`~probe_core.cli.runs`: ``probe runs``
- :mod:`~probe_core.cli.defuse`: ``probe defuse identify|distill|label|correct|run|runs``
- :mod:`~probe_core.cli.scenes`: ``probe scenes show|counterfactual``
- :mod:`~probe_core.cli.suite`: ``probe suite add|score|show|list|report|retire`` (regression suites)
- :mod:`~probe_core.cli.ui`: ``probe ui`` (the dashboard)

A group module adds its sub-parsers; a handler gets the parsed arguments and returns an exit
code. No library package holds CLI code, and nothing in the library imports this package.
Errors print one line, no traceback (set ``PROBE_DEBUG=1`` for one).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Callable, Sequence

from probe_core import __version__
from probe_core.catalog import canonical_dataset_name
from probe_core.cli import data, defuse, models, runs, sample, scenes, suite, team, ui
from probe_core.data.files import CACHE_ENV
from probe_core.errors import ProbeError
from probe_core.models.devices import resolve_device
from probe_core.runs.scaleout import check_executor

COMMAND_GROUPS: list[Callable[[argparse._SubParsersAction], None]] = [
    data.add_data_commands, models.add_model_commands, sample.add_sample_command, runs.add_runs_command,
    defuse.add_defuse_commands, scenes.add_scene_commands, suite.add_suite_commands, ui.add_ui_command,
    team.add_team_commands,
]


class OneLineErrorParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line (exit 2), naming the ``--help`` that shows the usage.

    Sub-parsers inherit the class (``add_subparsers`` makes them of the parent's type).
    """

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(prog="probe", description="Model Probe: find and fix how image classifiers fail.")
    parser.add_argument("--version", action="version", version=f"probe (model-probe) {__version__}")
    parser.add_argument("--workspace", help="workspace folder (default $PROBE_WORKSPACE or ./workspace)")
    parser.add_argument("--data-dir", help="folder with IDX data sets (default $PROBE_DATA_DIR)")
    parser.add_argument("--device", default="auto", help="auto (CUDA when present), cpu or cuda[:N]")
    parser.add_argument("--image-size", type=int, help="a folder you name as data set: resize every image to "
                        "this size (default: the most common size in the folder)")
    parser.add_argument("--skip-bad-images", action="store_true", help="a folder you name as data set: skip "
                        "unreadable image files (counted in its description) instead of stopping")
    parser.add_argument("--executor", default="local", help="where sampling shards, Defuse identification shards, "
                        "the λ sweep and `models defaults`' trainings run: local (this process), ray (the Ray "
                        "instance on this machine, started if none runs) or ray:ADDRESS (a cluster; `ray start "
                        "--head` prints it)")
    commands = parser.add_subparsers(dest="command", required=True)
    for add in COMMAND_GROUPS:
        add(commands)
    return parser


def _canonical_data_names(args: argparse.Namespace) -> None:
    """Data sets typed as paths become references that resolve anywhere (``images:/abs/dir``, ``arrays:…``)."""
    if args.workspace and not os.environ.get(CACHE_ENV):
        os.environ[CACHE_ENV] = os.path.join(os.path.abspath(args.workspace), "cache", "data")
    for field in ("dataset", "name"):
        value = getattr(args, field, None)
        if isinstance(value, str) and not (field == "name" and args.command != "data"):
            setattr(args, field, canonical_dataset_name(value, args.image_size, args.skip_bad_images))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``probe`` command; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        args.device = str(resolve_device(args.device))
        args.executor = check_executor(args.executor, connect=True)
        _canonical_data_names(args)
        return int(args.handler(args) or 0)
    except ProbeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into e.g. `head`, which closed early
        sys.stdout = open(os.devnull, "w")
        return 0
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # last resort: one line, the traceback only on request
        if os.environ.get("PROBE_DEBUG"):
            raise
        print(f"error: unexpected {type(exc).__name__}: {exc} (set PROBE_DEBUG=1 for a traceback)", file=sys.stderr)
        return 1


