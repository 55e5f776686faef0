"""``probe runs``: every run in the workspace."""

from __future__ import annotations

import argparse
import json
import time

from probe_core.bayestrex.latent_map import latent_map, sampling_report
from probe_core.cli.common import workspace_from_args
from probe_core.reporting.export import format_table, write_file
from probe_core.runs import history


def _stamp(seconds: float | None) -> str:
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
             _stamp(r.finished_at) or history.describe_time_left(history.time_left(r)),
             (r.error or r.message or "")[:70]] for r in runs]
    print(format_table(rows, ["id", "kind", "status", "progress", "started", "ended (or time left)", "message"]))
    return 0


def _report(args: argparse.Namespace) -> int:
    workspace = workspace_from_args(args)
    if args.latent_map:
        mapped = latent_map(workspace.store, args.run)
        print(f"latent map: {len(mapped['hits_xy'])} hits among {len(mapped['prior_xy'])} prior draws (cached)")
    run = workspace.store.get_run(args.run)
    dataset = workspace.registry.dataset(run.config["dataset"]) if run is not None and run.config.get("dataset") else None
    write_file(args.out, sampling_report(workspace.store, args.run, dataset=dataset).encode())
    print(f"report of run {args.run} written to {args.out}")
    return 0


def add_runs_command(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("runs", help="every run in the workspace: kind, status, progress, start and end")
    parser.add_argument("--kind", help="only runs of this kind (sample, train, defuse-identify, ...)")
    parser.add_argument("--limit", type=int, default=50)
    parser.add_argument("--json", action="store_true", help="as JSON, with each run's configuration")
    parser.set_defaults(handler=_runs)

    report = commands.add_parser("report", help="a sampling run's one-page HTML report (the Probe page's download)")
    report.add_argument("--run", type=int, required=True)
    report.add_argument("--out", required=True, help="the .html file to write")
    report.add_argument("--latent-map", action="store_true",
                        help="compute (once; it is cached) and include the map of the hits among prior draws")
    report.set_defaults(handler=_report)

