"""Cold start of the dashboard: time from "server up" to the first page's heading, in headless Chromium.

Run: ``.venv/bin/python benchmarks/cold_start.py [--workspace DIR] [--repeats 3]``

Side by side in one run: ``streamlit run app.py`` (heavy libraries imported on the first
page view) against ``python app.py`` (what ``make run`` does: they are imported before the
server starts). Needs Debian's ``chromium`` and the ``playwright`` package.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[1]
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]


def first_page_seconds(command: list[str], workspace: str, browser) -> tuple[float, float]:
    """(seconds until the server answers, seconds from then until the Models heading is visible)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "PROBE_WORKSPACE": workspace, "PROBE_AUTOTRAIN": "0"}
    started = time.perf_counter()
    process = subprocess.Popen([*command, "--server.port", str(port), "--server.headless", "true",
                                "--server.address", "127.0.0.1"], cwd=ROOT, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=1)
                break
            except OSError:
                time.sleep(0.05)
        up = time.perf_counter()
        tab = browser.new_page()
        tab.goto(f"http://127.0.0.1:{port}/")
        tab.get_by_role("heading", name="Model Probe").first.wait_for(timeout=60_000)
        shown = time.perf_counter()
        tab.close()
        return up - started, shown - up
    finally:
        process.terminate()
        process.wait(timeout=20)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workspace", default="workspace")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one start each (a smoke run, not the figures)")
    args = parser.parse_args()
    if args.quick:
        args.repeats = 1
    modes = {"streamlit run app.py": [sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py")],
             "python app.py (make run)": [sys.executable, str(ROOT / "app.py")]}
    times = {name: [] for name in modes}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=FLAGS)
        for _ in range(args.repeats):
            for name, command in modes.items():  # interleaved, so both see the same machine load
                times[name].append(first_page_seconds(command, args.workspace, browser))
        browser.close()
    for name, runs in times.items():
        print(f"{name:26s} server up {statistics.median(r[0] for r in runs):5.2f} s, first page "
              f"{statistics.median(r[1] for r in runs):5.2f} s after that (median of {len(runs)})")
    plain, warmed = (statistics.median(r[1] for r in times[n]) for n in modes)
    print(f"first page after the server is up: {plain / warmed:.1f}x faster with python app.py")


if __name__ == "__main__":
    main()
