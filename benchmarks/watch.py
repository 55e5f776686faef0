"""Does watching a run slow it down? A Probe run timed with 0, 1 and 2 headless-Chromium tabs watching it.

    .venv/bin/python benchmarks/watch.py [--workspace DIR]   # the README figure
    .venv/bin/python benchmarks/watch.py --quick             # a shorter run: a smoke test

Side by side in one run, against one dashboard server (``python app.py``, as ``make run``
starts it): the same sampling job (high confidence in 3, the default digits models) is
submitted as the Probe page submits it, to the server's kind of executor (a worker process),
while 0, 1 or 2 tabs show the Probe page with its live view of that run. The run's own time
(started to finished, from the workspace database) is printed for each, and watched ÷ unwatched.
The dashboard's workers leave a core to the server and the browser (``worker_threads``); a worker
with a thread on every core is timed beside them, unwatched and with two tabs, to show the trade.
Needs Debian's ``chromium`` and the ``playwright`` package.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from probe_core.runs.jobs import JobManager  # noqa: E402
from probe_core.runs.launchers import ProcessLauncher, worker_threads  # noqa: E402
from probe_core.runs.lifecycle import submit  # noqa: E402
from probe_core.bayestrex.request import SampleRequest  # noqa: E402
from probe_core.runs.workspace import Workspace  # noqa: E402

FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]


def start_server(workspace: Path) -> tuple[subprocess.Popen, str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "PROBE_WORKSPACE": str(workspace), "PROBE_AUTOTRAIN": "0", "PROBE_LAUNCHER": "process"}
    process = subprocess.Popen([sys.executable, str(ROOT / "app.py"), "--server.port", str(port),
                                "--server.headless", "true", "--server.address", "127.0.0.1"], cwd=ROOT, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            urllib.request.urlopen(url + "/_stcore/health", timeout=1)
            return process, url
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise SystemExit("the dashboard server did not come up")


def timed_run(workspace: Workspace, config: SampleRequest, browser, url: str, tabs: int, threads: int) -> float:
    """Submit one sampling run as the Probe page does, with ``tabs`` Probe pages showing it; its run time in seconds.

    ``threads``: the worker's torch threads (the dashboard's default is :func:`worker_threads`).

    The tabs open after the run is submitted: a new session's run picker then selects the newest
    run, this one, and its live view polls it until it ends (a tab opened before would keep
    showing the run it found).
    """
    manager = JobManager(workspace.store, ProcessLauncher(threads=threads))
    run_id = submit(manager, config)
    pages = [browser.new_page(viewport={"width": 1400, "height": 1000}) for _ in range(tabs)]
    for page in pages:
        page.goto(f"{url}/probe")
        page.get_by_text(f"Run {run_id}: {config.target}").first.wait_for(timeout=120_000)
    run = manager.wait(run_id)
    for page in pages:
        page.close()
    if run.status != "done":
        raise SystemExit(f"run {run.id} ended {run.status}: {run.error}")
    return run.finished_at - run.started_at


def training_seconds(tabs: int, browser, quick: bool) -> float:
    """Default digits training, submitted as the dashboard's first start does, with ``tabs`` Models pages open."""
    from dataclasses import replace

    from probe_core.runs.training import submit_training

    root = Path(tempfile.mkdtemp(prefix="probe-watch-train-"))
    workspace = Workspace(root)
    server, url = start_server(root)
    try:
        pages = [browser.new_page(viewport={"width": 1400, "height": 1000}) for _ in range(tabs)]
        for page in pages:
            page.goto(url)
            page.get_by_role("heading", name="Model Probe").first.wait_for(timeout=120_000)
        specs = workspace.registry.default_specs("digits", seed=0)
        if quick:
            specs = [replace(spec, epochs=1) for spec in specs]
        manager = JobManager(workspace.store, ProcessLauncher())
        run = manager.wait(submit_training(manager, workspace.registry, specs, "digits", "benchmark"))
        for page in pages:
            page.close()
        if run.status != "done":
            raise SystemExit(f"training run {run.id} ended {run.status}: {run.error}")
        return run.finished_at - run.started_at
    finally:
        server.terminate()
        server.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workspace", help="with the default digits models (trained here if missing)")
    parser.add_argument("--quick", action="store_true", help="a short run (a smoke test, not the figure)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of 0, 1 and 2 tabs (default 3)")
    args = parser.parse_args()
    root = Path(args.workspace or tempfile.mkdtemp(prefix="probe-watch-"))
    workspace = Workspace(root)
    for spec in workspace.registry.default_specs("digits", seed=0):
        workspace.registry.get_or_train(spec)
    registry = workspace.registry
    config = SampleRequest.build(registry, dataset="digits", target="high:3", chains=8 if args.quick else 32,
                                 warmup=10 if args.quick else 300, samples=10 if args.quick else 300, keep_every=5)
    rounds = 1 if args.quick else args.rounds
    default_threads, all_cores = worker_threads(), len(os.sched_getaffinity(0))
    # (worker threads, tabs): the dashboard's default worker, watched by 0, 1 and 2 tabs, beside a worker
    # with a thread on every core (unwatched and with two tabs), to show what the core left over buys.
    conditions = [(default_threads, 0), (default_threads, 1), (default_threads, 2)]
    if all_cores != default_threads:
        conditions += [(all_cores, 0), (all_cores, 2)]
    server, url = start_server(root)
    times: dict[tuple[int, int], list[float]] = {condition: [] for condition in conditions}
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=FLAGS)
            # Rounds of every condition interleaved, medians compared: this machine's speed drifts by 20 % or
            # more over minutes, which one run of each would read as the tabs' doing.
            for _ in range(rounds):
                for threads, tabs in conditions:
                    times[threads, tabs].append(timed_run(workspace, config, browser, url, tabs, threads))
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
    medians = {condition: statistics.median(seconds) for condition, seconds in times.items()}
    print(f"Probe run (high:3, {config.chains} chains, {config.warmup} + {config.samples}), run time by tabs watching "
          f"(median of {rounds} interleaved round{'s' if rounds != 1 else ''}; the dashboard's workers use "
          f"{default_threads} torch thread(s) of {all_cores} cores):")
    for (threads, tabs), seconds in medians.items():
        unwatched = medians[threads, 0]
        ratio = "" if tabs == 0 else f"  watched / unwatched = {seconds / unwatched:.2f}"
        each = ", ".join(f"{t:.1f}" for t in times[threads, tabs])
        print(f"  worker with {threads} thread(s), {tabs} tab{'s' if tabs != 1 else ''}: {seconds:6.1f} s{ratio}   "
              f"(runs: {each})", flush=True)
    if (all_cores, 0) in medians:
        print(f"  the default worker unwatched against one with every core: "
              f"{medians[default_threads, 0] / medians[all_cores, 0]:.2f}x the time")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=FLAGS)
        trained = {tabs: training_seconds(tabs, browser, args.quick) for tabs in (0, 1)}
        browser.close()
    print(f"default digits training{' (1 epoch each)' if args.quick else ''} with the Models page open: "
          f"{trained[1]:.0f} s, closed: {trained[0]:.0f} s (ratio {trained[1] / trained[0]:.2f})")


if __name__ == "__main__":
    main()
