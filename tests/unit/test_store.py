import sqlite3
import subprocess
import sys
import threading

import numpy as np
import pytest

from probe_core.errors import ProbeError
from probe_core.store import SCHEMA_VERSION, Store


@pytest.fixture
def store(tmp_path):
    return Store(tmp_path / "probe.sqlite")


def test_schema_is_versioned_and_wal(store, tmp_path):
    assert store.schema_version == SCHEMA_VERSION
    connection = sqlite3.connect(tmp_path / "probe.sqlite")
    assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    connection.commit()
    connection.close()
    with pytest.raises(ProbeError, match="newer than this"):
        Store(tmp_path / "probe.sqlite")


def test_eight_threads_writing_100_labels_each_lose_nothing(store):
    run_id = store.create_run("defuse", {})
    cluster_ids = store.add_clusters(run_id, [
        {"cluster_index": i, "weight": 0.01, "size": 1, "mean": np.zeros(2), "covariance": np.eye(2)}
        for i in range(100)
    ])
    errors = []

    def annotate(worker: int) -> None:
        try:
            for cluster_id in cluster_ids:
                store.set_label(f"annotator-{worker}", cluster_id=cluster_id, label=str(worker % 10),
                                is_failure=worker % 2 == 0)
        except Exception as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=annotate, args=(w,)) for w in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    labels = store.get_labels()
    assert len(labels) == 800
    assert {(l["annotator"], l["cluster_id"]) for l in labels} == {
        (f"annotator-{w}", c) for w in range(8) for c in cluster_ids
    }


def test_relabelling_replaces_and_sources_stay_apart(store):
    run_id = store.create_run("defuse", {})
    [cluster] = store.add_clusters(run_id, [{"cluster_index": 0, "weight": 0.5, "size": 3,
                                             "mean": np.zeros(2), "covariance": np.eye(2)}])
    store.set_label("ana", cluster_id=cluster, label="4", is_failure=True)
    store.set_label("ana", cluster_id=cluster, label="none", is_failure=False)
    store.set_label("ana", cluster_id=cluster, label="9", is_failure=True, source="oracle:clf")
    human = store.get_labels(cluster_id=cluster, source="human")
    assert [(l["label"], l["is_failure"]) for l in human] == [("none", False)]
    assert len(store.get_labels(cluster_id=cluster)) == 2
    with pytest.raises(ProbeError, match="annotator"):
        store.set_label("  ", cluster_id=cluster, label="1")
    with pytest.raises(ProbeError, match="exactly one"):
        store.set_label("ana", label="1")


def test_review_images_are_stored_once_and_labelled_per_image(store):
    run_id = store.create_run("defuse", {})
    [cluster] = store.add_clusters(run_id, [{"cluster_index": 0, "weight": 0.5, "size": 3,
                                             "mean": np.zeros(2), "covariance": np.eye(2)}])
    latents, images = np.arange(6.0).reshape(3, 2), np.zeros((3, 1, 4, 4))
    ids = store.put_review_images(cluster, latents, images, np.array([8, 8, 1]))
    again = store.put_review_images(cluster, latents + 1, images + 1, np.array([0, 0, 0]))
    assert again == ids and len(ids) == 3  # the first images stay: labels point at them
    stored = store.get_review_images(cluster)
    assert np.array_equal(stored[2]["z"], latents[2]) and [s["prediction"] for s in stored] == [8, 8, 1]
    store.set_labels("ana", [(ids[0], "9"), (ids[1], "9")])
    store.set_label("ana", review_image_id=ids[1], label="8")  # a change replaces the earlier label
    store.set_label("ana", cluster_id=cluster, label="4", is_failure=True)  # whole-cluster labels stay apart
    per_image = store.get_labels(cluster_id=cluster, per_image=True)
    assert [(l["review_image_id"], l["label"]) for l in per_image] == [(ids[0], "9"), (ids[1], "8")]
    assert [l["label"] for l in store.get_labels(cluster_id=cluster, per_image=False)] == ["4"]
    with pytest.raises(ProbeError, match="no review image"):
        store.set_labels("ana", [(ids[2], "1"), (999, "1")])
    assert len(store.get_labels(cluster_id=cluster, per_image=True)) == 2  # the failed batch wrote nothing
    with pytest.raises(ProbeError, match="class only"):
        store.set_label("ana", review_image_id=ids[0], label="1", is_failure=True)


def _old_workspace(path, version: int, rows: list[str]):
    """A workspace database at an earlier schema version, holding the rows the statements insert."""
    from probe_core.store.schema import MIGRATIONS as _MIGRATIONS

    connection = sqlite3.connect(path)
    for step in range(1, version + 1):
        connection.executescript(_MIGRATIONS[step])
    connection.execute(f"PRAGMA user_version = {version}")
    for statement in rows:
        connection.execute(statement)
    connection.commit()
    connection.close()
    return Store(path)


def test_a_workspace_from_schema_3_opens_with_its_labels(tmp_path):
    store = _old_workspace(tmp_path / "old.sqlite", 3, [
        "INSERT INTO runs (kind, config, status, owner, created_at, updated_at) "
        "VALUES ('defuse-distill', '{}', 'done', 'x', 0, 0)",
        "INSERT INTO clusters (run_id, cluster_index, weight, size, mean, covariance) "
        "VALUES (1, 0, 0.5, 3, x'00', x'00')",
        "INSERT INTO labels (annotator, source, cluster_id, label, is_failure, created_at) "
        "VALUES ('ana', 'human', 1, '9', 1, 0)"])
    assert store.schema_version == SCHEMA_VERSION
    [old] = store.get_labels(cluster_id=1)
    assert (old["label"], old["is_failure"], old["review_image_id"]) == ("9", True, None)
    store.set_label("ana", cluster_id=1, label="8", is_failure=False)  # still one whole-cluster label per annotator
    assert [l["label"] for l in store.get_labels(cluster_id=1)] == ["8"]


def test_samples_round_trip(store):
    run_id = store.create_run("sample", {"target": "high:3"})
    store.add_samples(run_id, [
        {"chain": c, "step": 5, "z": np.arange(4) + c, "confidences": np.full(10, 0.1),
         "image": np.ones((1, 8, 8)), "target_distance": 0.02, "hit": c == 0, "target_index": 1}
        for c in range(3)
    ])
    samples = store.get_samples(run_id, target_index=1)
    assert store.count_samples(run_id) == 3
    np.testing.assert_array_equal(samples[2]["z"], np.arange(4) + 2)
    assert samples[0]["image"].shape == (1, 8, 8) and samples[0]["hit"] is True and samples[1]["hit"] is False
    assert store.get_samples(run_id, newest_first=True, limit=1)[0]["chain"] == 2
    first, _, third = (sample["id"] for sample in samples)
    store.set_label("ana", sample_id=first, label="3")
    store.set_label("bo", sample_id=first, label="5")
    store.set_label("ana", sample_id=third, label="8", source="oracle:clf")
    other_run = store.create_run("sample", {})
    store.add_samples(other_run, [{"chain": 0, "step": 0, "z": np.zeros(4), "confidences": np.full(10, 0.1),
                                   "image": np.ones((1, 8, 8)), "target_distance": 0.5, "hit": False}])
    store.set_label("ana", sample_id=store.get_samples(other_run)[0]["id"], label="1")
    assert store.sample_labels(run_id) == {first: ["3", "5"], third: ["8"]}
    assert store.sample_labels(run_id, source="human") == {first: ["3", "5"]}


def test_run_lifecycle_and_cancel_flag(store):
    run_id = store.create_run("sample", {"a": 1})
    assert store.get_run(run_id).status == "queued"
    store.start_run(run_id)
    assert store.update_run(run_id, 0.5, "half", {"step": 10}) is False
    store.request_cancel(run_id)
    assert store.update_run(run_id, 0.6) is True
    store.finish_run(run_id, "cancelled")
    run = store.get_run(run_id)
    assert (run.status, run.progress, run.message, run.details) == ("cancelled", 0.6, "half", {"step": 10})
    with pytest.raises(ValueError):
        store.finish_run(run_id, "running")


def test_run_of_a_dead_process_shows_as_interrupted(tmp_path):
    path = tmp_path / "probe.sqlite"
    code = (
        "import sys; sys.path.insert(0, %r)\n"
        "from probe_core.store import Store\n"
        "s = Store(%r); r = s.create_run('sample', {}); s.start_run(r); print(r)\n"
    ) % (str(__import__("pathlib").Path(__file__).resolve().parents[2]), str(path))
    run_id = int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    store = Store(path)
    live = store.create_run("sample", {})
    store.start_run(live)
    run = store.get_run(run_id)
    assert run.status == "interrupted" and "stopped" in run.error
    assert store.get_run(live).status == "running"


def test_array_bundles_round_trip_concatenate_and_count(store):
    run_id = store.create_run("defuse-identify", {})
    for batch in range(3):
        store.put_arrays(run_id, f"failures/{batch:06d}", {"z": np.full((batch + 1, 2), batch, np.float32),
                                                           "label": np.arange(batch + 1)})
    store.put_arrays(run_id, "assignments", {"cluster_index": np.array([0, -1])})
    joined = store.concat_arrays(run_id, "failures/")
    assert joined["z"].shape == (6, 2) and joined["z"][:, 0].tolist() == [0, 1, 1, 2, 2, 2]
    assert store.count_array_rows(run_id, "failures/") == 6
    assert store.get_arrays(run_id, "assignments")["cluster_index"].tolist() == [0, -1]
    assert store.get_arrays(run_id, "missing") is None and store.concat_arrays(run_id, "nothing/") is None
    store.put_arrays(run_id, "assignments", {"cluster_index": np.array([1])})  # a bundle is replaced whole
    assert store.get_arrays(run_id, "assignments")["cluster_index"].tolist() == [1]


def test_a_version_1_workspace_is_migrated_without_losing_anything(tmp_path):
    store = _old_workspace(tmp_path / "old.sqlite", 1, [
        "INSERT INTO runs (kind, config, status, owner, created_at, updated_at) "
        "VALUES ('sample', '{}', 'done', 'x', 0, 0)"])
    assert store.schema_version == SCHEMA_VERSION
    assert store.get_run(1).kind == "sample"
    store.put_arrays(1, "a", {"x": np.zeros(1)})
