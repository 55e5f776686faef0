"""Team labelling: accounts, roles enforced where the pages and workers call, label history, concurrent annotators."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import probe_here, shown
from streamlit.testing.v1 import AppTest

from probe_core.errors import ProbeError
from probe_core.store import Store
from probe_core.team import accounts
from probe_core.team.accounts import Actor, PermissionDenied

ROOT = Path(__file__).resolve().parents[2]
APP = str(ROOT / "app.py")
PASSWORD = "correct horse 1"


@pytest.fixture
def team(tmp_path, monkeypatch):
    """A workspace with the shipped digits models, two annotators and an admin; the dashboard points at it."""
    from make_default_models import install

    from probe_core.runs.workspace import Workspace

    workspace = Workspace(tmp_path / "team")
    if not install(workspace, "digits"):
        pytest.fail("the shipped digits models do not match the code (tests/data/make_default_models.py)")
    for name, role in (("ann", "annotator"), ("bea", "annotator"), ("boss", "admin")):
        accounts.add_account(workspace.store, name, role, PASSWORD)
    monkeypatch.setenv("PROBE_WORKSPACE", str(workspace.root))
    monkeypatch.setenv("PROBE_AUTOTRAIN", "0")
    return workspace


def _digits_models(workspace) -> tuple[str, str]:
    """The shipped full digits classifier and VAE (not the use cases' models trained on some classes)."""
    def plain(kind):
        return next(m["id"] for m in workspace.registry.list(kind=kind)
                    if not m["spec"].get("classes") and not m["spec"].get("ambiguous"))
    return plain("classifier"), plain("vae")


def test_accounts_keep_salted_hashes_and_refuse_bad_input_storing_nothing(workspace):
    store = workspace.store
    accounts.add_account(store, "alice", "annotator", PASSWORD)
    stored = store.get_user("alice")
    assert stored["password_hash"].startswith("$2") and PASSWORD not in stored["password_hash"]
    accounts.add_account(store, "carol", "annotator", PASSWORD)
    assert store.get_user("carol")["password_hash"] != stored["password_hash"]  # salted
    for name, role, password, message in (("alice", "admin", PASSWORD, "already an account"),
                                          ("dave", "annotator", "short", "at least 8"),
                                          ("erin", "annotator", "x" * 73, "at most 72 bytes"),
                                          ("frank", "owner", PASSWORD, "role is one of"),
                                          ("Bad Name", "admin", PASSWORD, "account name")):
        with pytest.raises(ProbeError, match=message):
            accounts.add_account(store, name, role, password)
    listed = accounts.list_accounts(store)
    assert [a["name"] for a in listed] == ["alice", "carol"]
    assert all("password_hash" not in account and account["role"] == "annotator" for account in listed)
    assert store.get_user("alice")["role"] == "annotator"
    accounts.change_password(store, "alice", "another password")
    assert store.get_user("alice")["password_hash"] != stored["password_hash"]
    accounts.remove_account(store, "carol")
    with pytest.raises(ProbeError, match="no account"):
        accounts.remove_account(store, "carol")


def test_a_sign_out_revokes_the_cookies_issued_before_it(workspace):
    store = workspace.store
    accounts.add_account(store, "alice", "annotator", PASSWORD)
    accounts.add_account(store, "bob", "annotator", PASSWORD)
    t = time.time() + 10  # times after the accounts were made (a cookie from before an account's creation is dead)
    assert accounts.cookie_counts(store, "alice", issued_at=t + 1000.0, now=t + 1000.0 + 60)  # never signed out
    accounts.record_sign_out(store, "alice", when=t + 2000.0)
    assert not accounts.cookie_counts(store, "alice", issued_at=t + 1999.0, now=t + 1999.0 + 60)  # a cookie from before the sign-out
    assert accounts.cookie_counts(store, "alice", issued_at=t + 2001.0, now=t + 2001.0 + 60)  # signed in again afterwards
    assert accounts.cookie_counts(store, "bob", issued_at=t + 1000.0, now=t + 1000.0 + 60)  # another account's cookies are untouched
    accounts.record_sign_out(store, "alice", when=t + 1500.0)  # an older sign-out never moves it back
    assert not accounts.cookie_counts(store, "alice", issued_at=t + 1999.0, now=t + 1999.0 + 60)
    accounts.remove_account(store, "bob")
    assert not accounts.cookie_counts(store, "bob", issued_at=t + 5000.0, now=t + 5000.0 + 60)  # a removed account signs nobody in


def test_a_wrong_password_is_refused_and_opens_no_session(team):
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception
    assert [b.label for b in at.button] == ["Sign in"] and not at.title  # no page runs before signing in
    at.text_input[0].input("ann")
    at.text_input[1].input("not the password")
    at.button[0].click().run()
    assert any("Wrong name or password" in shown(e.value) for e in at.error)
    assert "signed_in_actor" not in at.session_state and not at.title
    at.text_input[0].input("ann")
    at.text_input[1].input(PASSWORD)
    at.button[0].click().run()
    assert not at.exception
    assert at.session_state["signed_in_actor"] == Actor("ann", "annotator", signed_in=True)
    assert any("Signed in as **ann** (annotator)" in c.value for c in at.caption)


def _page_actions(plugin: str, classifier: str, vae: str) -> None:
    """What the pages call to start a run, load a plugin and name a data path (run by AppTest)."""
    from pathlib import Path

    import streamlit as st

    from pages import ui as _ui
    from probe_core.errors import ProbeError
    from probe_core.models import ModelSpec
    from probe_core.runs.training import submit_training

    outcome = {}
    outcome["sampling_run"] = _ui.start_sampling("digits", "high:3", models=(classifier, vae), chains=2, warmup=2,
                                                 samples=2)
    for name, action in (
            ("training", lambda: submit_training(_ui.job_manager(), _ui.workspace().registry, [ModelSpec(
                dataset="digits", kind="classifier", epochs=1, seed=7)], "digits")),
            ("plugin", lambda: _ui.load_model(plugin, "classifier", "digits").id),
            ("data path", lambda: _ui.workspace().registry.dataset(f"images:{Path(plugin).parent}"))):
        try:
            outcome[name] = action() or "allowed"
        except ProbeError as exc:
            outcome[name] = f"refused: {exc}"
    st.session_state["outcome"] = outcome


def _act_as(actor: Actor, plugin: Path, classifier: str, vae: str) -> dict:
    at = AppTest.from_function(_page_actions, args=(str(plugin), classifier, vae), default_timeout=60)
    at.session_state["signed_in_actor"] = actor
    at.session_state["signed_in_at"] = time.time()
    at.run()
    assert not at.exception, at.exception
    return at.session_state["outcome"], [shown(e.value) for e in at.error]


def test_an_annotator_cannot_start_runs_or_load_files_and_an_admin_can(team, tmp_path):
    from helpers import write_tiny_plugin

    classifier, vae = _digits_models(team)
    marker = tmp_path / "plugin-ran"
    plugin = write_tiny_plugin(tmp_path, extra=f"\nfrom pathlib import Path as _P\n_P({str(marker)!r}).write_text('ran')\n")
    runs_before = len(team.store.list_runs())

    outcome, errors = _act_as(Actor("ann", "annotator", signed_in=True), plugin, classifier, vae)
    assert outcome["sampling_run"] is None and any("may not start runs" in e for e in errors), errors
    for name in ("training", "plugin", "data path"):
        assert outcome[name].startswith("refused:") and "annotator" in outcome[name], outcome
    assert len(team.store.list_runs()) == runs_before and not marker.exists()  # nothing stored, no code ran

    # a crafted run recorded for an annotator (bypassing the page) is refused by the worker's lifecycle
    from probe_core.runs.lifecycle import execute_run

    forged = team.store.create_run("train", {}, user="ann")
    execute_run(team.store, forged, lambda context: pytest.fail("the job ran"))
    assert team.store.get_run(forged).status == "failed" and "may not start runs" in team.store.get_run(forged).error

    outcome, errors = _act_as(Actor("boss", "admin", signed_in=True), plugin, classifier, vae)
    assert isinstance(outcome["sampling_run"], int) and not errors, (outcome, errors)
    assert isinstance(outcome["training"], int)
    assert "may use only" not in outcome["data path"]  # an admin's data path is read (this one is no image folder)
    assert outcome["plugin"].startswith("plugin:") and marker.exists()
    for run_id in (outcome["sampling_run"], outcome["training"]):
        deadline = time.time() + 120
        while team.store.get_run(run_id).active and time.time() < deadline:
            time.sleep(0.2)
        assert team.store.get_run(run_id).user == "boss"
    assert team.store.get_run(outcome["sampling_run"]).status == "done"


def test_relabelling_keeps_the_history_and_the_export_names_who_and_when(workspace, tmp_path):
    store = workspace.store
    images = _review_images(store, clusters=1)[0]
    store.set_labels("ann", [(images[0], "3")])
    store.set_labels("ann", [(images[0], "5")])
    store.set_labels("bea", [(images[0], "5")])
    store.set_test_image_label("ann", "digits", 12, "mislabel")
    store.set_test_image_label("ann", "digits", 12, "misclassification")
    history = store.label_history(item="review_image", item_id=images[0])
    assert [(h["annotator"], h["old_label"], h["new_label"]) for h in history] == [
        ("ann", None, "3"), ("ann", "3", "5"), ("bea", None, "5")]
    assert [(h["old_label"], h["new_label"]) for h in store.label_history(item="test_image")] == [
        (None, "mislabel"), ("mislabel", "misclassification")]
    assert sorted(label["label"] for label in store.get_labels(review_image_id=images[0])) == ["5", "5"]

    probe = ["--workspace", str(workspace.root), "labels", "export"]
    rows = json.loads(probe_here(probe + ["--format", "json"]).stdout)
    assert {(r["item"], r["annotator"], r["label"]) for r in rows} == {
        ("review_image", "ann", "5"), ("review_image", "bea", "5"), ("test_image", "ann", "misclassification")}
    assert all(r["labelled_at"].endswith("+00:00") for r in rows)
    done = probe_here(probe + ["--history", "--format", "csv", "-o", str(tmp_path / "h.csv")])
    assert done.returncode == 0, done.stderr
    lines = (tmp_path / "h.csv").read_text().splitlines()
    assert lines[0] == "item,item_id,annotator,source,old_label,new_label,changed_at" and len(lines) == 6
    bad = probe_here(probe + ["--format", "xml"])
    assert bad.returncode == 2 and "invalid choice" in bad.stderr


def _review_images(store, clusters: int) -> list[list[int]]:
    """A distillation run with ``clusters`` clusters of 10 review images each; their ids per cluster."""
    run_id = store.create_run("defuse-distill", {})
    cluster_ids = store.add_clusters(run_id, [
        {"cluster_index": index, "weight": 1.0 / clusters, "size": 10, "mean": np.zeros(2),
         "covariance": np.eye(2), "info": {}} for index in range(clusters)])
    return [store.put_review_images(cluster_id, np.zeros((10, 2), np.float32), np.zeros((10, 1, 8, 8), np.float32),
                                    np.full(10, 3)) for cluster_id in cluster_ids]


def test_ten_annotators_labelling_the_same_images_at_once_lose_no_label(workspace):
    from probe_core.defuse import labels as label_tools

    images = [image for cluster in _review_images(workspace.store, clusters=5) for image in cluster]
    names = tuple(str(c) for c in range(10))
    start, failures = threading.Barrier(10), []

    def annotate(annotator: str) -> None:
        store = Store(workspace.store.path)  # a connection of its own, as another server process has
        try:
            start.wait()
            for position, image_id in enumerate(images):
                label_tools.label_images(store, [image_id], annotator, str(position % 10), names)
        except Exception as exc:  # noqa: BLE001 - reported below
            failures.append(exc)
        finally:
            store.close()

    threads = [threading.Thread(target=annotate, args=(f"annotator{i}",)) for i in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not failures
    labels = workspace.store.get_labels(per_image=True)
    assert len(labels) == 500
    for i in range(10):
        mine = {l["review_image_id"]: l["label"] for l in labels if l["annotator"] == f"annotator{i}"}
        assert mine == {image_id: str(position % 10) for position, image_id in enumerate(images)}
    assert len(workspace.store.label_history()) == 500


def test_probe_ui_refuses_another_host_without_accounts(tmp_path):
    probe = [sys.executable, "-m", "probe_core.cli", "--workspace", str(tmp_path / "ws"), "ui", "--port", "8599"]
    refused = subprocess.run(probe + ["--host", "0.0.0.0"], capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2
    assert "no accounts" in refused.stderr and "--insecure-no-auth" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    forced = subprocess.run(probe + ["--auth"], capture_output=True, text=True, timeout=120)
    assert forced.returncode == 2 and "would let nobody in" in forced.stderr

    from probe_core.team.accounts import check_exposure

    assert check_exposure("localhost", False, False, False) is None
    assert check_exposure("0.0.0.0", True, False, False) is None
    assert "warning" in check_exposure("0.0.0.0", False, False, True)


def test_users_commands_read_the_password_from_stdin(tmp_path):
    probe = ["--workspace", str(tmp_path / "ws"), "users"]
    added = probe_here(probe + ["add", "ann", "--role", "annotator"], stdin=PASSWORD + "\n")
    assert added.returncode == 0, added.stderr
    short = probe_here(probe + ["add", "bob", "--role", "admin"], stdin="short\n")
    assert short.returncode == 2 and "at least 8" in short.stderr
    listed = probe_here(probe + ["list"]).stdout
    assert "ann" in listed and "annotator" in listed and "bob" not in listed
    role = probe_here(probe + ["role", "ann", "admin"])
    assert role.returncode == 0
    removed = probe_here(probe + ["remove", "nobody"])
    assert removed.returncode == 2 and "no account" in removed.stderr
    assert Store(tmp_path / "ws" / "probe.sqlite").get_user("ann")["role"] == "admin"


def test_an_annotator_may_label_but_the_actor_check_refuses_runs(workspace):
    annotator = Actor("ann", "annotator", signed_in=True)
    from probe_core.runs.jobs import JobManager

    manager = JobManager(workspace.store, launcher="thread").acting_as(annotator)
    with pytest.raises(PermissionDenied, match="may not start runs"):
        manager.submit("train", {}, lambda context: {})
    assert workspace.store.list_runs() == []
    assert annotator.may(accounts.Permission.LABEL) and not annotator.may(accounts.Permission.LOAD)
    registry = workspace.registry.acting_as(annotator)
    with pytest.raises(PermissionDenied):
        registry.resolve("/tmp/some_plugin.py", "classifier", "digits")
    assert registry.dataset("digits").num_classes == 10  # an embedded data set is open to everyone


def test_the_app_served_on_a_network_address_without_accounts_shows_only_the_refusal(tmp_path, monkeypatch):
    from streamlit import config

    from probe_core.cli.ui import dashboard_folder, streamlit_options

    options = streamlit_options(dashboard_folder())
    assert options[options.index("--server.enableXsrfProtection") + 1] == "true"  # probe ui keeps XSRF on
    monkeypatch.setenv("PROBE_WORKSPACE", str(tmp_path / "ws"))
    monkeypatch.setenv("PROBE_AUTOTRAIN", "0")
    monkeypatch.delenv("PROBE_INSECURE_NO_AUTH", raising=False)
    address = config.get_option("server.address")
    config.set_option("server.address", "0.0.0.0")
    try:
        at = AppTest.from_file(APP, default_timeout=60).run()
    finally:
        config.set_option("server.address", address)
    assert not at.exception and not at.title
    assert [e.value for e in at.error] and "no accounts" in shown(at.error[0].value)


def test_ten_wrong_passwords_lock_the_account_and_the_client_out_and_the_log_shows_it(workspace, capsys):
    from probe_core.cli import main

    store = workspace.store
    accounts.add_account(store, "alice", "annotator", PASSWORD)
    assert accounts.verify_sign_in(store, "alice", PASSWORD, "10.0.0.1") == Actor("alice", "annotator", True)
    for attempt in range(accounts.MAX_FAILED_SIGN_INS):
        with pytest.raises(PermissionDenied, match="wrong name or password"):
            accounts.verify_sign_in(store, "alice", f"wrong {attempt}", "10.0.0.2")
    with pytest.raises(PermissionDenied, match="too many failed sign-ins: wait"):
        accounts.verify_sign_in(store, "alice", PASSWORD, "10.0.0.3")  # the right password, from anywhere
    with pytest.raises(PermissionDenied, match="too many failed sign-ins"):  # the guessing client, any account
        accounts.verify_sign_in(store, "nobody", PASSWORD, "10.0.0.2")
    later = time.time() + accounts.FAILURE_WINDOW_SECONDS + 1
    assert accounts.lockout_seconds(store, "alice", "10.0.0.3", now=later) == 0  # it ends after the window
    # an unknown name fails as a wrong password does (bcrypt against a hash nobody has), and is logged
    with pytest.raises(PermissionDenied, match="wrong name or password"):
        accounts.verify_sign_in(store, "mallory", PASSWORD, "10.0.0.4")
    assert main(["--workspace", str(workspace.root), "users", "log"]) == 0
    log = capsys.readouterr().out
    assert log.count("sign-in-failed") == accounts.MAX_FAILED_SIGN_INS + 1
    assert "locked-out" in log and "added" in log and "mallory" in log and "10.0.0.2" in log


def test_parallel_wrong_guesses_are_checked_at_most_up_to_the_limit(workspace, monkeypatch):
    """Guesses sent at once from many sessions: each is counted before bcrypt runs, in one transaction, so no
    more than the limit reach the password check, for one account from many clients and from one client."""
    import threading

    import bcrypt

    store = workspace.store
    accounts.add_account(store, "alice", "annotator", PASSWORD)
    checked, real_checkpw = [], bcrypt.checkpw

    def slow_checkpw(password, hashed):  # as slow as a real cost factor: every guess is in flight at once
        checked.append(1)
        time.sleep(0.2)
        return real_checkpw(password, hashed)

    monkeypatch.setattr(accounts.bcrypt, "checkpw", slow_checkpw)
    for name, clients in (("alice", [f"10.1.0.{i}" for i in range(30)]), ("bob", ["10.2.0.1"] * 30)):
        checked.clear()
        outcomes = []
        barrier = threading.Barrier(30)

        def guess(client, attempt):
            barrier.wait()
            try:
                accounts.verify_sign_in(store, name, f"wrong {attempt}", client)
            except PermissionDenied as refused:
                outcomes.append(str(refused))

        threads = [threading.Thread(target=guess, args=(client, i)) for i, client in enumerate(clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(checked) == accounts.MAX_FAILED_SIGN_INS, name
        assert sum("too many failed sign-ins" in o for o in outcomes) == 30 - accounts.MAX_FAILED_SIGN_INS
    with pytest.raises(PermissionDenied, match="too many failed sign-ins"):  # and the right password waits too
        accounts.verify_sign_in(store, "alice", PASSWORD, "10.3.0.1")


def test_a_typed_name_reaches_the_log_only_when_it_could_be_an_account_and_the_log_prints_no_escapes(workspace,
                                                                                                     capsys):
    from probe_core.cli import main

    store = workspace.store
    hostile = ["\x1b]8;;https://evil.example\x1b\\admin\x1b]8;;\x1b\\", "a" * 1_000_000, "bob\r\nsign-in ok",
               "\x1b[8mhidden\x1b[0m"]
    for name in hostile:
        with pytest.raises(PermissionDenied):
            accounts.verify_sign_in(store, name, "wrong", "10.0.0.9\x1b[2J")
    names = [event["name"] for event in store.account_events(kinds=("sign-in-failed",))]
    assert len(names) == len(hostile) and all(n.startswith("(not an account name: ") for n in names)
    assert max(len(n) for n in names) < 60 and "(not an account name: 1000000 characters)" in names
    clients = {event["client"] for event in store.account_events(kinds=("sign-in-failed",))}
    assert clients == {"10.0.0.9\\x1b[2J"}  # stored escaped and cut, never raw
    store.log_account_event("added", "eve\x1b[31m", detail="admin\x07")  # even a raw row prints escaped
    assert main(["--workspace", str(workspace.root), "users", "log"]) == 0
    printed = capsys.readouterr().out
    assert "\x1b" not in printed and "\x07" not in printed and "\r" not in printed
    assert "eve\\x1b[31m" in printed


def test_a_password_or_role_change_and_a_new_account_of_the_same_name_end_earlier_sign_ins(workspace):
    store = workspace.store
    accounts.add_account(store, "alice", "annotator", PASSWORD)
    signed_in_at = time.time()
    time.sleep(0.01)
    assert accounts.cookie_counts(store, "alice", signed_in_at)
    accounts.change_password(store, "alice", "another password 2")
    assert not accounts.cookie_counts(store, "alice", signed_in_at)  # a cookie saved before passwd: refused
    signed_in_at = time.time()
    time.sleep(0.01)
    accounts.set_role(store, "alice", "admin")
    assert not accounts.cookie_counts(store, "alice", signed_in_at)
    [changed] = store.account_events(kinds=("role-changed",))
    assert (changed["name"], changed["detail"]) == ("alice", "annotator -> admin")
    signed_in_at = time.time()
    time.sleep(0.01)
    accounts.remove_account(store, "alice")
    accounts.add_account(store, "alice", "annotator", PASSWORD)
    assert not accounts.cookie_counts(store, "alice", signed_in_at)  # the old account's cookies stay dead
    with pytest.raises(ProbeError, match="neither starts nor ends with a space"):
        accounts.add_account(store, "bob", "annotator", " spaced password ")


def test_the_files_holding_hashes_and_the_secret_are_private_when_made_and_after_opening_an_old_one(tmp_path):
    import os
    import stat

    from probe_core.runs.workspace import Workspace

    def modes(root):
        return {path.name: stat.S_IMODE(path.stat().st_mode) for path in [root, *root.glob("probe.sqlite*")]}

    fresh = Workspace(tmp_path / "fresh")
    accounts.add_account(fresh.store, "alice", "admin", PASSWORD)
    accounts.cookie_secret(fresh.store)
    assert modes(fresh.root) == {"fresh": 0o700, **{name: 0o600 for name in modes(fresh.root) if name != "fresh"}}
    assert "probe.sqlite" in modes(fresh.root)
    for path in [fresh.root, *fresh.root.glob("probe.sqlite*")]:  # an older version made them world-readable
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    reopened = Workspace(tmp_path / "fresh")
    reopened.store.list_users()
    assert set(modes(reopened.root).values()) <= {0o700, 0o600}


def test_csv_exports_neutralise_formulas_and_a_shell_label_in_a_team_workspace_is_local(workspace):
    from probe_core.reporting.export import labels_text, spreadsheet_safe

    assert spreadsheet_safe("=cmd|' /C calc'!A0") == "'=cmd|' /C calc'!A0"
    assert [spreadsheet_safe(v) for v in ("+1", "-2", "@SUM(A1)", "\tx", "seven", 3)] == \
        ["'+1", "'-2", "'@SUM(A1)", "'\tx", "seven", 3]
    text = labels_text([{"item": "cluster", "item_id": "1", "annotator": "=HYPERLINK(\"x\")", "source": "human",
                         "label": "-1+1", "is_failure": True, "labelled_at": "now"}], "csv")
    assert "'=HYPERLINK" in text and "'-1+1" in text
    assert accounts.shell_annotator(workspace.store, "alice") == "alice"  # single-user mode: as typed
    assert accounts.shell_annotator(workspace.store, "  ann \t lee ") == "ann lee"  # blanks collapsed
    for blank in ("", "   ", None):
        with pytest.raises(ProbeError, match="--annotator NAME is required to store a label"):
            accounts.shell_annotator(workspace.store, blank)
    accounts.add_account(workspace.store, "alice", "annotator", PASSWORD)
    assert accounts.shell_annotator(workspace.store, "alice") == "local:alice"  # never a signed-in account's
