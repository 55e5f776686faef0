"""Two people using the dashboard at once keep their own settings (the data folder lives in the session)."""

from pathlib import Path

from helpers import require_shared_mnist, shown
from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parents[2] / "app.py")


def _session(data_dir: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=120)
    at.session_state["dataset"] = "mnist"
    at.session_state["data_dir"] = data_dir
    return at


def test_two_sessions_with_different_data_folders_do_not_interfere(workspace, monkeypatch, tmp_path):
    monkeypatch.setenv("PROBE_WORKSPACE", str(workspace.root))
    monkeypatch.delenv("PROBE_DATA_DIR", raising=False)
    empty = tmp_path / "no-data-here"
    empty.mkdir()
    mnist = require_shared_mnist()
    alice, bob = _session(str(mnist)), _session(str(empty))
    seen: dict[str, list[list[str]]] = {"alice": [], "bob": []}
    # interleaved runs (AppTest sessions are not thread-safe): each sees only its own folder
    for _ in range(3):
        for name, at in (("alice", alice), ("bob", bob)):
            at.run()
            seen[name].append([shown(e.value) for e in at.error] + [str(x.value) for x in at.exception])
    # Alice's folder holds MNIST: never an error; Bob's is empty: always his own folder's error.
    assert all(not messages for messages in seen["alice"]), seen["alice"]
    assert all(any(str(empty) in m for m in messages) for messages in seen["bob"]), seen["bob"]
    assert alice.session_state["data_dir"] == str(mnist) and bob.session_state["data_dir"] == str(empty)
    # and the workspace object the sessions share carries neither person's folder
    from pages.ui import get_workspace

    shared = get_workspace(str(workspace.root.resolve()))
    assert shared.data_dir is None and shared.registry.data_dir is None
