"""``probe runs``: every run in the workspace."""

from __future__ import annotations

import argparse
import json

from probe_core.cli.common import format_table, workspace_from_args


def _stamp(seconds: float | None) -> str:
    import time

    return "" if seconds is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds))


def _runs(args: argparse.Namespace) -> int:
    workspace = workspace_from_args(args)
    runs = workspace.store.list_runs(kind=args.kind, limit=args.limit)
    if args.json:
        print(json.dumps([{"id": r.id, "kind": r.kind, "status": r.status, "progress": r.progress,
                           "message": r.message, "error": r.error, "config": r.config, "created_at": r.created_at,
                           "started_at": r.started_at, "finished_at": r.finished_at, "updated_at": r.updated_at}
                          for r in runs], indent=1))
        return 0
    if not runs:
        print(f"no runs in {workspace.root} yet")
        return 0
    rows = [[str(r.id), r.kind, r.status, f"{r.progress * 100:.0f}%", _stamp(r.started_at or r.created_at),
             _stamp(r.finished_at), (r.error or r.message or "")[:70]] for r in runs]
    print(format_table(rows, ["id", "kind", "status", "progress", "started", "ended", "message"]))
    return 0


def add_runs_command(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("runs", help="every run in the workspace: kind, status, progress, start and end")
    parser.add_argument("--kind", help="only runs of this kind (sample, train, defuse-identify, ...)")
    parser.add_argument("--limit", type=int, default=50)
    parser.add_argument("--json", action="store_true", help="as JSON, with each run's configuration")
    parser.set_defaults(handler=_runs)

