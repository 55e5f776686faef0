"""Where the test suite's time goes: ``make test``'s wall time and each tier's worker-seconds.

Run: ``.venv/bin/python benchmarks/suite_tiers.py [--workers auto] [--marks EXPR] [--quick]``

Runs the suite as ``make test`` does (``pytest -n auto --dist loadgroup``) with this file loaded as a pytest
plugin, which adds up every test's setup, call and teardown durations (pytest's own ``--durations`` figures,
reported by the xdist workers) by tier: ``e2e``, ``ray``, ``slow`` (the marks ``tests/conftest.py`` gives; a
test with several counts under the first of these) and ``fast`` (the rest: what ``make test-fast`` runs). The
worker-seconds of all tiers add up to about the workers times the wall time when the workers are busy to the
end. Prints the tiers, the ten slowest tests and the wall time. ``--marks "not slow and not e2e and not ray"``
times what ``make test-fast`` runs. ``--quick``: one small test file (the code path, not the figures). Under
``CI=true`` as in ``.ci/run``.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIERS = ("e2e", "ray", "slow", "fast")
TIMINGS_ENV = "PROBE_SUITE_TIMINGS"
QUICK_TESTS = "tests/unit/test_target_spec.py"


# The plugin pytest loads (written to a folder of its own: benchmarks/ on the tests' PYTHONPATH would let its
# scripts shadow modules in every process the tests start). One line per test phase, in the controller.
PLUGIN = f"""
import json, os

def pytest_runtest_logreport(report):
    if os.environ.get("PYTEST_XDIST_WORKER"):  # the controller gets every worker's reports too
        return
    tier = next((name for name in {TIERS[:-1]!r} if name in report.keywords), "fast")
    with open(os.environ[{TIMINGS_ENV!r}], "a") as out:
        out.write(json.dumps({{"test": report.nodeid.split("@")[0], "when": report.when, "tier": tier,
                              "seconds": report.duration}}) + "\\n")
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="auto", help="pytest-xdist workers (make test: auto, one per core)")
    parser.add_argument("--marks", help="only the tests these marks select (pytest -m), e.g. make test-fast's")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        timings = Path(folder) / "timings.jsonl"
        (Path(folder) / "suite_tiers_plugin.py").write_text(PLUGIN)
        env = {**os.environ, "CI": "true", TIMINGS_ENV: str(timings),
               "PYTHONPATH": os.pathsep.join(filter(None, [folder, os.environ.get("PYTHONPATH")]))}
        command = [sys.executable, "-m", "pytest", "-p", "suite_tiers_plugin", "-n", args.workers, "--dist", "loadgroup",
                   "-q", "-p", "no:cacheprovider", *(["-m", args.marks] if args.marks else []),
                   *([QUICK_TESTS] if args.quick else [])]
        started = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - started
        if done.returncode != 0:
            sys.exit(f"the suite failed (exit {done.returncode}):\n{done.stdout[-3000:]}")
        rows = [json.loads(line) for line in timings.read_text().splitlines()]
    seconds, tests = collections.Counter(), collections.defaultdict(set)
    per_test = collections.Counter()
    for row in rows:
        seconds[row["tier"]] += row["seconds"]
        tests[row["tier"]].add(row["test"])
        per_test[row["test"]] += row["seconds"]
    threads = os.environ.get("OMP_NUM_THREADS", "default")
    chosen = QUICK_TESTS if args.quick else "the whole suite"
    print(f"{chosen}{f' (-m {args.marks!r})' if args.marks else ''}, -n {args.workers}, "
          f"OMP_NUM_THREADS={threads}: wall {wall:.0f} s ({wall / 60:.1f} min), "
          f"{sum(len(t) for t in tests.values())} tests")
    print(f"{'tier':<6}{'tests':>7}{'worker-s':>10}{'share':>8}")
    total = sum(seconds.values()) or 1.0
    for tier in TIERS:
        print(f"{tier:<6}{len(tests[tier]):>7}{seconds[tier]:>10.0f}{seconds[tier] / total:>8.0%}")
    print("slowest tests (setup + call + teardown, s):")
    for test, spent in per_test.most_common(10):
        print(f"  {spent:6.1f}  {test}")


if __name__ == "__main__":
    main()
