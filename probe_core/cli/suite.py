"""``probe suite add|score|show|list|report|retire``: regression suites of found failures (see
:mod:`probe_core.suites`). ``score`` exits 1 when a check regresses, so it can gate CI."""

from __future__ import annotations

import argparse
import json
import sys

from probe_core import suites
from probe_core.cli.common import workspace_from_args
from probe_core.defuse.labels import HUMAN
from probe_core.errors import ProbeError
from probe_core.reporting.export import format_table, write_file
from probe_core.suites import DEFAULT_MIN_ACCURACY


def _percent(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:.0f} %"


def _add(args: argparse.Namespace) -> int:
    workspace = workspace_from_args(args)
    registry, store = workspace.registry, workspace.store
    source = args.label_source
    if (args.defuse_run is None) == (args.run is None):
        raise ProbeError("give either --defuse-run (a Defuse distillation run) or --run (a Bayes-TrEx run)")
    if args.defuse_run is not None:
        if args.sample:
            raise ProbeError("--sample goes with --run; a Defuse region is chosen with --cluster")
        if not (args.cluster or args.all_regions):
            raise ProbeError("name the failure regions to add: --cluster ID (repeatable) or --all-regions")
        added = suites.add_region_checks(registry, store, args.suite, args.defuse_run, args.cluster or [],
                                         all_regions=args.all_regions, source=source, name=args.name,
                                         device=args.device)
    else:
        if args.cluster or args.all_regions:
            raise ProbeError("--cluster and --all-regions go with --defuse-run")
        added = suites.add_finding_checks(registry, store, args.suite, args.run, args.sample or None, source=source,
                                          name=args.name, device=args.device)
    for check_id in added:
        check = store.get_suite_check(check_id, with_data=False)
        own = next(s for s in store.get_suite_scores(args.suite, check["found_on"]) if s["check_id"] == check_id)
        print(f"check {check_id} added to {args.suite}: {check['name']} ({own['count']} images; "
              f"{check['found_on']} scores {_percent(own['accuracy'])})")
    print(f"suite {args.suite} is at version {store.get_suite(args.suite)['version']}")
    return 0


def _score(args: argparse.Namespace) -> int:
    registry = workspace_from_args(args).registry
    suites.check_min_accuracy(args.min_accuracy)  # a bad threshold is refused before any work
    baseline = suites.score_now(registry, args.suite, args.against, args.device) if args.against else None
    score = suites.score_now(registry, args.suite, args.classifier, args.device)
    failed = suites.regressions(score, args.min_accuracy, baseline, args.max_drop)
    failed_ids = {f["id"] for f in failed}
    rows = [[str(row["id"]), row["name"][:60], str(row["count"]), _percent(row["accuracy"]),
             _percent(row["found_on_accuracy"]), "–" if row["wrong_confidence"] is None
             else f"{row['wrong_confidence']:.2f}", "REGRESSED" if row["id"] in failed_ids else "ok"]
            for row in score.checks]
    print(f"{score.classifier} on suite {args.suite} (version {score.version}, {score.dataset}):")
    print(format_table(rows, ["check", "name", "images", "accuracy", "found on", "wrong-answer conf.", "status"]))
    for check in score.skipped:
        print(f"skipped: check {check['id']} ({check['name']}) is about the classes {', '.join(check['classes'])}",
              file=sys.stderr)
    for failure in failed:
        print(f"regressed: check {failure['id']} ({failure['name']}): {failure['reason']}", file=sys.stderr)
    if args.out:
        write_file(args.out, json.dumps({**score.to_record(), "min_accuracy": args.min_accuracy, "against": args.against,
                                         "max_drop": args.max_drop, "regressions": failed, "passed": not failed},
                                        indent=1).encode())
    return 1 if failed else 0


def _show(args: argparse.Namespace) -> int:
    matrix = suites.suite_matrix(workspace_from_args(args).store, args.suite)
    suite = matrix["suite"]
    print(f"suite {suite['name']} ({suite['dataset']}, version {suite['version']}, {len(matrix['checks'])} checks)")
    rows = [[str(check["id"]), check["kind"], check["name"][:60], check["found_on"]]
            + [_percent(matrix["cells"].get((check["id"], c), {}).get("accuracy")) for c in matrix["classifiers"]]
            for check in matrix["checks"]]
    print(format_table(rows, ["check", "kind", "name", "found on"] + matrix["classifiers"]))
    return 0


def _list(args: argparse.Namespace) -> int:
    store = workspace_from_args(args).store
    found = store.list_suites(args.dataset)
    if not found:
        print("no suites yet: `probe suite add --suite NAME ...` makes one")
        return 0
    print(format_table([[s["name"], s["dataset"], str(s["version"]), str(len(store.get_suite_checks(s["name"], False)))]
                        for s in found], ["suite", "data set", "version", "checks"]))
    return 0


def _report(args: argparse.Namespace) -> int:
    write_file(args.out, suites.suite_report(workspace_from_args(args).store, args.suite).encode())
    print(f"report of suite {args.suite} written to {args.out}")
    return 0


def _retire(args: argparse.Namespace) -> int:
    version = suites.retire_check(workspace_from_args(args).store, args.suite, args.check)
    print(f"check {args.check} retired; suite {args.suite} is at version {version}")
    return 0


def add_suite_commands(commands: argparse._SubParsersAction) -> None:
    suite = commands.add_parser("suite", help="regression suites: keep found failures as checks, score new models")
    actions = suite.add_subparsers(dest="action", required=True)
    add = actions.add_parser("add", help="add labelled failures to a suite (made on first use)")
    add.add_argument("--suite", required=True)
    add.add_argument("--defuse-run", type=int, help="a Defuse distillation run: add its labelled failure regions")
    add.add_argument("--cluster", type=int, action="append", help="with --defuse-run: a failure region's cluster id")
    add.add_argument("--all-regions", action="store_true", help="with --defuse-run: every labelled failure region")
    add.add_argument("--run", type=int, help="a Bayes-TrEx run (probe or compare): add its labelled samples")
    add.add_argument("--sample", type=int, action="append", help="with --run: only these sample ids")
    add.add_argument("--label-source", default=HUMAN, help="whose labels: human (default) or oracle:MODEL")
    add.add_argument("--name", help="the check's name (default: where it came from)")
    add.set_defaults(handler=_add)

    score = actions.add_parser("score", help="score a classifier on a suite; exit 1 when a check regresses")
    score.add_argument("--suite", required=True)
    score.add_argument("--classifier", required=True, help="model id, 'default' or a plugin .py")
    score.add_argument("--min-accuracy", type=float, default=DEFAULT_MIN_ACCURACY,
                       help=f"a check regresses below this accuracy (default {DEFAULT_MIN_ACCURACY})")
    score.add_argument("--against", help="also compare with this classifier (e.g. the one in production)")
    score.add_argument("--max-drop", type=float, default=0.0,
                       help="with --against: a check regresses when it is more than this below (default 0)")
    score.add_argument("--out", help="write the scores as JSON")
    score.set_defaults(handler=_score)

    show = actions.add_parser("show", help="a suite's checks × classifiers accuracy matrix")
    show.add_argument("--suite", required=True)
    show.set_defaults(handler=_show)
    listing = actions.add_parser("list", help="the workspace's suites")
    listing.add_argument("--dataset")
    listing.set_defaults(handler=_list)
    report = actions.add_parser("report", help="a self-contained HTML report of a suite")
    report.add_argument("--suite", required=True)
    report.add_argument("--out", required=True)
    report.set_defaults(handler=_report)
    retire = actions.add_parser("retire", help="take a check out of a suite (kept in its history)")
    retire.add_argument("--suite", required=True)
    retire.add_argument("--check", type=int, required=True)
    retire.set_defaults(handler=_retire)
