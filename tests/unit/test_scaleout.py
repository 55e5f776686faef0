"""Shard layout, seeds and executor settings (no Ray needed)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers import echo_shard, recording
from probe_core.errors import ProbeError
from probe_core.progress import CallbackReporter
from probe_core.runs.launchers import WORKER_THREADS_ENV, worker_threads
from probe_core.runs.scaleout import (
    LocalShards,
    RayShards,
    ShardTask,
    parse_executor,
    shard_count,
    shard_seed,
    split_evenly,
)


@given(st.integers(0, 5000), st.integers(1, 300))
def test_split_evenly_covers_every_item_once_in_near_equal_ranges(count, shards):
    pieces = split_evenly(count, shards)
    assert [i for piece in pieces for i in piece] == list(range(count))
    sizes = [len(piece) for piece in pieces]
    assert len(pieces) <= shards
    if count:
        assert max(sizes) - min(sizes) <= 1 and min(sizes) >= 1


def test_shard_zero_keeps_the_run_seed_and_shards_get_distinct_seeds():
    assert shard_seed(5, 0) == 5
    assert len({shard_seed(5, i) for i in range(100)}) == 100


@pytest.mark.parametrize("text", ["rya", "ray:", "cluster", "local:x"])
def test_unknown_executors_are_refused_with_the_choices(text):
    with pytest.raises(ProbeError, match="local, ray or ray:ADDRESS"):
        parse_executor(text)


def test_executor_settings_parse():
    assert isinstance(parse_executor(None), LocalShards)
    assert parse_executor("ray").address is None
    assert parse_executor("ray:10.0.0.5:6379").address == "10.0.0.5:6379"
    assert isinstance(parse_executor("ray:10.0.0.5:6379"), RayShards)
    assert shard_count("local", None) == 1 and shard_count("local", 7) == 7
    with pytest.raises(ProbeError):
        shard_count("local", 0)


def test_local_shards_run_in_order_report_progress_and_stop_between_shards():
    seen, progress = [], []
    tasks = [ShardTask("helpers:echo_shard", {"value": n}, description=f"value {n}") for n in (4, 6, 8)]
    outcome = LocalShards().map(tasks, lambda i, v: seen.append((i, v)), recording(progress))
    assert seen == [(0, 4), (1, 6), (2, 8)] and outcome.done == [0, 1, 2] and not outcome.cancelled
    fractions = [p.progress for p in progress]
    assert fractions == sorted(fractions) and fractions[-1] == pytest.approx(1.0)
    assert [p.shards_done for p in progress][-1] == 3 and "3 of 3 shards done" in progress[-1].message
    stopped = LocalShards().map(tasks, lambda i, v: None, CallbackReporter(should_stop=lambda: True))
    assert stopped.cancelled and stopped.done == []
    assert [e["covers"] for e in stopped.not_done(tasks)] == ["value 4", "value 6", "value 8"]


def test_a_stop_raised_by_the_progress_listener_or_a_shard_ends_the_map_keeping_what_was_done():
    tasks = [ShardTask("helpers:echo_shard", {"value": n}) for n in (4, 6, 8)]
    seen = []

    stopped_after_the_first_shard = recording([], lambda report: report.progress > 0.3)  # shard 0 ended (1/3)
    outcome = LocalShards().map(tasks, lambda i, v: seen.append(v), stopped_after_the_first_shard)
    assert outcome.cancelled and seen == [4] and outcome.done == [0]  # shard 0 kept; 1 and 2 never ran
    stopping = [ShardTask("helpers:stopped_shard"), *tasks]
    seen.clear()
    outcome = LocalShards().map(stopping, lambda i, v: seen.append(v))
    assert outcome.cancelled and seen == [] and outcome.done == []


def test_an_unimportable_shard_function_is_one_clear_error():
    with pytest.raises(ProbeError, match="cannot be imported"):
        LocalShards().map([ShardTask("helpers:no_such_shard")], lambda i, v: None)


def test_a_shard_function_is_named_by_itself_and_kept_as_its_import_path():
    task = ShardTask(echo_shard, {"value": 5})
    assert task.function == "helpers:echo_shard"  # what a worker process imports
    seen = []
    assert LocalShards().map([task], lambda i, v: seen.append(v)).done == [0] and seen == [5]

    def nested(models, reporter):
        return None

    with pytest.raises(ProbeError, match="top level"):
        ShardTask(nested)


def test_worker_threads_leave_a_core_unless_told(monkeypatch):
    monkeypatch.delenv(WORKER_THREADS_ENV, raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert worker_threads() == 3
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0})
    assert worker_threads() == 1
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert worker_threads() == 2
    monkeypatch.setenv(WORKER_THREADS_ENV, "4")
    assert worker_threads() == 4
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv(WORKER_THREADS_ENV, bad)
        with pytest.raises(ProbeError, match=WORKER_THREADS_ENV):
            worker_threads()
