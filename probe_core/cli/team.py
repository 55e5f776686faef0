"""``probe users`` (the workspace's accounts) and ``probe labels`` (every label with who gave it and when)."""

from __future__ import annotations

import argparse
import datetime as dt
import getpass
import sys

from probe_core.cli.common import workspace_from_args
from probe_core.errors import ProbeError
from probe_core.reporting.export import LABEL_EXPORT_FORMATS, format_table, label_rows, labels_text
from probe_core.team import accounts


def read_password(prompt: str = "Password: ") -> str:
    """A new password: asked twice at a terminal, else the first line of stdin (for scripts)."""
    if not sys.stdin.isatty():
        return sys.stdin.readline().rstrip("\r\n")
    password = getpass.getpass(prompt)
    if getpass.getpass("Again: ") != password:
        raise ProbeError("the two passwords differ; nothing was changed")
    return password


def _users_add(args: argparse.Namespace) -> int:
    store = workspace_from_args(args).store
    accounts.add_account(store, args.name, args.role, read_password(f"Password for {args.name}: "))
    print(f"added {args.name} ({args.role}); the dashboard now asks everyone to sign in")
    return 0


def _users_list(args: argparse.Namespace) -> int:
    rows = accounts.list_accounts(workspace_from_args(args).store)
    if not rows:
        print("no accounts: the dashboard runs in single-user mode (probe users add NAME --role admin)")
        return 0
    when = lambda t: dt.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M")  # noqa: E731
    print(format_table([[r["name"], r["role"], when(r["created_at"]), when(r["changed_at"])] for r in rows],
                       ["name", "role", "created", "changed"]))
    return 0


def _users_remove(args: argparse.Namespace) -> int:
    accounts.remove_account(workspace_from_args(args).store, args.name)
    print(f"removed {args.name} (their labels and runs keep the name)")
    return 0


def _users_passwd(args: argparse.Namespace) -> int:
    accounts.change_password(workspace_from_args(args).store, args.name,
                             read_password(f"New password for {args.name}: "))
    print(f"changed the password of {args.name}")
    return 0


def _users_role(args: argparse.Namespace) -> int:
    accounts.set_role(workspace_from_args(args).store, args.name, args.role)
    print(f"{args.name} is now an {args.role}")
    return 0


def _users_log(args: argparse.Namespace) -> int:
    events = accounts.account_log(workspace_from_args(args).store, limit=args.limit)
    if not events:
        print("the account log is empty")
        return 0
    when = lambda t: dt.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S")  # noqa: E731
    print(format_table([[when(e["at"]), e["kind"], e["name"], e["client"], e["detail"]] for e in events],
                       ["when", "event", "account", "client", "detail"]))
    return 0


def _labels_export(args: argparse.Namespace) -> int:
    store = workspace_from_args(args).store
    text = labels_text(label_rows(store, history=args.history), args.format, history=args.history)
    if args.output:
        try:
            with open(args.output, "w", newline="") as handle:
                handle.write(text)
        except OSError as exc:
            raise ProbeError(f"cannot write {args.output}: {exc.strerror}") from exc
        print(f"labels written to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def add_team_commands(commands: argparse._SubParsersAction) -> None:
    users = commands.add_parser("users", help="the workspace's accounts: once one exists, the dashboard asks "
                                              "everyone to sign in")
    actions = users.add_subparsers(dest="action", required=True)
    add = actions.add_parser("add", help="add an account (the password is asked for, or read from stdin)")
    add.add_argument("name")
    add.add_argument("--role", choices=accounts.ROLES, required=True,
                     help="annotator: label and browse; admin: also start runs, load files, manage suites "
                          "and accounts")
    add.set_defaults(handler=_users_add)
    actions.add_parser("list", help="the accounts and their roles").set_defaults(handler=_users_list)
    remove = actions.add_parser("remove", help="remove an account")
    remove.add_argument("name")
    remove.set_defaults(handler=_users_remove)
    passwd = actions.add_parser("passwd", help="change an account's password")
    passwd.add_argument("name")
    passwd.set_defaults(handler=_users_passwd)
    role = actions.add_parser("role", help="change an account's role")
    role.add_argument("name")
    role.add_argument("role", choices=accounts.ROLES)
    role.set_defaults(handler=_users_role)
    log = actions.add_parser("log", help="sign-ins, failed sign-ins, lock-outs, sign-outs and account changes, "
                                         "newest first")
    log.add_argument("--limit", type=int, default=200, help="at most this many entries (default 200)")
    log.set_defaults(handler=_users_log)

    labels = commands.add_parser("labels", help="every label in the workspace with who gave it and when")
    label_actions = labels.add_subparsers(dest="action", required=True)
    export = label_actions.add_parser("export", help="write every label (or, with --history, every change of "
                                                     "one) as CSV or JSON")
    export.add_argument("--format", choices=LABEL_EXPORT_FORMATS, default="csv")
    export.add_argument("--history", action="store_true", help="every change (who, when, old -> new label) "
                                                               "instead of the current labels")
    export.add_argument("--output", "-o", help="a file to write (default: standard output)")
    export.set_defaults(handler=_labels_export)
