"""``probe ui``: serve the dashboard, from a source checkout or from an installed wheel.

The wheel installs the dashboard's files (``app.py``, ``pages/``, ``assets/``, ``.streamlit/``) under
``<prefix>/share/model-probe``; a checkout (an editable install) serves its own. The settings of
``.streamlit/config.toml`` are passed as options, so the app is the same whatever the working
directory; the workspace is ``--workspace``, ``$PROBE_WORKSPACE`` or ``./workspace`` as for every command.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from probe_core.cli.common import workspace_from_args
from probe_core.data import OPEN_DATASET_ENV
from probe_core.errors import ProbeError
from probe_core.runs.limits import MAX_RUNS_ENV, MAX_RUNS_PER_PERSON_ENV, ServerLimits
from probe_core.team.accounts import AUTH_ENV, INSECURE_ENV, check_exposure, sign_in_required

SHARED_FOLDER = Path("share") / "model-probe"


def dashboard_folder() -> Path:
    """The folder holding ``app.py``: this checkout's, else the installed copy's.

    Raises
    ------
    ProbeError
        If neither exists (a broken install).
    """
    checkout = Path(__file__).resolve().parents[2]
    candidates = [checkout, *(Path(prefix) / SHARED_FOLDER for prefix in (sys.prefix, sys.exec_prefix))]
    for folder in candidates:
        if (folder / "app.py").is_file() and (folder / "pages" / "ui" / "router.py").is_file():
            return folder
    raise ProbeError("the dashboard's files (app.py, pages/) are not installed beside probe_core; reinstall "
                     f"model-probe (looked in {', '.join(str(c) for c in candidates)})")


def streamlit_options(folder: Path) -> list[str]:
    """The project's ``.streamlit/config.toml`` as ``--section.key value`` options."""
    try:
        import tomllib
    except ImportError:  # Python 3.10: streamlit's own dependency reads it
        import toml as tomllib

    config = folder / ".streamlit" / "config.toml"
    if not config.is_file():
        return []
    options = []
    for section, values in tomllib.loads(config.read_text()).items():
        for key, value in values.items():
            text = str(value).lower() if isinstance(value, bool) else str(value)
            options += [f"--{section}.{key}", text]
    return options


def _ui(args: argparse.Namespace) -> int:
    if not 1 <= args.port <= 65535:
        raise ProbeError(f"--port must be from 1 to 65535, got {args.port}")
    folder = dashboard_folder()
    has_accounts = sign_in_required(workspace_from_args(args).store, forced=False)
    warning = check_exposure(args.host, has_accounts, args.auth, args.insecure_no_auth)
    if warning:
        print(warning, file=sys.stderr, flush=True)
    options = [*streamlit_options(folder), "--server.port", str(args.port), "--server.address", args.host]
    if args.workspace:
        os.environ["PROBE_WORKSPACE"] = os.path.abspath(args.workspace)
    if args.data_dir:
        os.environ["PROBE_DATA_DIR"] = os.path.abspath(args.data_dir)
    if args.dataset:
        os.environ[OPEN_DATASET_ENV] = args.dataset
    if args.auth:
        os.environ[AUTH_ENV] = "1"
    if args.insecure_no_auth:
        os.environ[INSECURE_ENV] = "1"
    for value, name in ((args.max_runs, MAX_RUNS_ENV), (args.max_runs_per_person, MAX_RUNS_PER_PERSON_ENV)):
        if value is not None:
            os.environ[name] = str(value)
    ServerLimits.from_environment()  # a bad value stops here, before the server starts
    print(f"Model Probe: http://{args.host}:{args.port} (Ctrl-C stops it)", file=sys.stderr, flush=True)
    # `python app.py` preloads the heavy libraries into the server before it serves (see app.py)
    os.execv(sys.executable, [sys.executable, str(folder / "app.py"), *options])
    return 0  # not reached


def add_ui_command(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("ui", help="serve the dashboard (the same app as `make run`)")
    parser.add_argument("--port", type=int, default=8501, help="the port to serve on (default 8501)")
    parser.add_argument("--host", default="localhost", help="the address to bind (default localhost: this "
                        "machine only); another address needs accounts (probe users add) or --insecure-no-auth")
    parser.add_argument("--auth", action="store_true", help="ask everyone to sign in (on by itself once the "
                        "workspace has an account)")
    parser.add_argument("--insecure-no-auth", action="store_true", help="serve beyond localhost with no "
                        "accounts: everyone who reaches the port acts as an admin (a warning is printed)")
    parser.add_argument("--dataset", help="the data set the dashboard opens on: a name, a folder or a .npz (default: "
                        "the one this workspace's runs and models were made on last, else digits; $PROBE_DATASET)")
    parser.add_argument("--max-runs", type=int, help="runs working at once over everybody; later ones wait "
                        "(default: the machine's cores, at least 2; $PROBE_MAX_RUNS)")
    parser.add_argument("--max-runs-per-person", type=int, help="runs of one person working at once; their "
                        "later ones wait (default 2; $PROBE_MAX_RUNS_PER_PERSON)")
    parser.set_defaults(handler=_ui)
