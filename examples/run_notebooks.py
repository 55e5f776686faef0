"""Execute the example notebooks with nbclient in a throw-away workspace (CI runs this: ``make notebooks``).

    .venv/bin/python examples/run_notebooks.py [NOTEBOOK ...]

Each notebook runs top to bottom in a fresh kernel; an error in any cell fails the run (exit 1).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).resolve().parent
# A guard against a hung kernel, not a speed test: unloaded, the quickstart takes about 2 minutes on 2 cores, but
# with another job on the machine its first cell (two-thread torch training) has taken over 10.
CELL_TIMEOUT_S = 1800


def run(path: Path) -> float:
    notebook = nbformat.read(path, as_version=4)
    with tempfile.TemporaryDirectory(prefix="probe-notebook-") as workspace:
        os.environ["PROBE_WORKSPACE"] = workspace
        started = time.perf_counter()
        NotebookClient(notebook, timeout=CELL_TIMEOUT_S, kernel_name="python3", resources={"metadata": {"path": workspace}}).execute()
        return time.perf_counter() - started


def main(paths: list[str]) -> int:
    for path in [Path(p) for p in paths] or sorted(HERE.glob("*.ipynb")):
        print(f"{path.name}: ran in {run(path):.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
