"""Time left on a long step: estimated from the run's own measured rate, shown on the pages and by `probe runs`."""

from __future__ import annotations

import pytest

from probe_core.runs.history import describe_time_left, time_left
from probe_core.store.records import Run


def _run(status="running", progress=0.25, started=1000.0):
    return Run(id=1, kind="defuse-identify", config={}, status=status, progress=progress, message="", details=None,
               result=None, error=None, owner="x", cancel_requested=False, created_at=990.0, started_at=started,
               updated_at=1040.0, finished_at=None)


def test_the_time_left_is_the_measured_rate_times_what_is_left():
    assert time_left(_run(progress=0.25), now=1060.0) == pytest.approx(60 * 0.75 / 0.25)  # 60 s for a quarter
    assert time_left(_run(progress=0.5), now=1100.0) == pytest.approx(100.0)


@pytest.mark.parametrize("change", [{"status": "queued"}, {"status": "done", "progress": 1.0}, {"progress": 0.01},
                                    {"started": None}, {"progress": 0.5, "started": 1059.0}])
def test_no_estimate_while_queued_ended_or_too_early(change):
    assert time_left(_run(**change), now=1060.0) is None


def test_the_estimate_reads_as_minutes_or_seconds():
    assert describe_time_left(None) == ""
    assert describe_time_left(150) == "about 2 min left" and describe_time_left(42) == "about 40 s left"
    assert describe_time_left(1) == "about 5 s left"


def test_the_runs_command_prints_the_time_left_of_a_running_run(tmp_path, capsys):
    import time

    from probe_core.cli import main
    from probe_core.runs.workspace import Workspace

    store = Workspace(tmp_path / "ws").store
    run_id = store.create_run("defuse-identify", {"dataset": "digits"})
    store.start_run(run_id)
    with store.transaction() as connection:  # started two minutes ago, a quarter done
        connection.execute("UPDATE runs SET started_at=?, progress=0.25 WHERE id=?", (time.time() - 120, run_id))
    assert main(["--workspace", str(tmp_path / "ws"), "runs"]) == 0
    assert "about 6 min left" in capsys.readouterr().out
