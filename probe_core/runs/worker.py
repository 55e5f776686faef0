"""A worker process: ``python -m probe_core.runs.worker WORKSPACE RUN_ID`` does one stored run and exits.

Started by :class:`probe_core.runs.launchers.ProcessLauncher`. It rebuilds the job from the run's
stored :class:`JobSpec`, runs it with the usual lifecycle (running, progress, done / failed /
cancelled) and exits 0; the run's outcome is in the database, not in the exit status.
"""

from __future__ import annotations

import logging
import os
import sys


def main(argv: list[str] | None = None) -> int:
    from probe_core.runs.launchers import die_with_parent, worker_threads
    from probe_core.runs.lifecycle import JobSpec

    die_with_parent()
    import torch

    from probe_core.runs.lifecycle import execute_run
    from probe_core.store import Store

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m probe_core.runs.worker WORKSPACE RUN_ID", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    root, run_id = args[0], int(args[1])
    torch.set_num_threads(worker_threads())  # the starter's choice, passed in the environment
    logging.getLogger("probe_core.runs.worker").info(
        "run %d: worker %d with %d torch thread(s) (OpenMP %s, numba %s)", run_id, os.getpid(),
        torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS", "default"),
        os.environ.get("NUMBA_NUM_THREADS", "default"))
    store = Store(f"{root}/probe.sqlite")
    run = store.get_run(run_id)
    if run is None or run.job is None:
        print(f"run {run_id} has no job to do", file=sys.stderr)
        return 2
    try:
        function = JobSpec.of_run(run).build(root)
    except Exception as exc:  # the run records why it could not start
        store.start_run(run_id)
        store.finish_run(run_id, "failed", error=f"could not build the job: {type(exc).__name__}: {exc}")
        return 0
    execute_run(store, run_id, function)
    return 0


if __name__ == "__main__":
    sys.exit(main())
