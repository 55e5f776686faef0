"""Every permission is enforced in probe_core, called as an annotator; the server's run limits hold against values
no widget offers; a sign-in has an absolute lifetime."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch

from probe_core import suites
from probe_core.defuse import labels as label_tools
from probe_core.defuse import queries
from probe_core.errors import CancelledError, ProbeError
from probe_core.reporting.export import labels_text, sample_arrays
from probe_core.reporting.saliency import MAX_SMOOTHGRAD_SAMPLES, smoothgrad
from probe_core.runs.jobs import JobManager
from probe_core.runs.launchers import ThreadLauncher
from probe_core.runs.limits import MAX_RUNS_ENV, MAX_RUNS_PER_PERSON_ENV, ServerLimits
from probe_core.suites import checks as suite_checks
from probe_core.team import accounts
from probe_core.team.accounts import Actor, PermissionDenied

PASSWORD = "correct horse 1"
ANNOTATOR = Actor("ann", "annotator", signed_in=True)
ADMIN = Actor("boss", "admin", signed_in=True)
NOBODY = Actor("guest", "guest", signed_in=True)  # a role with no permission: what each check refuses


def _snapshot(store) -> tuple:
    """What the permission checks must leave as it was: accounts, runs, suites."""
    return (tuple(sorted((u["name"], u["role"], u["password_hash"]) for u in store.list_users())),
            tuple(r.id for r in store.list_runs()), tuple((s["name"], s["version"]) for s in store.list_suites()))


def test_users_is_enforced_in_the_core_for_every_account_change_and_read(workspace):
    store = workspace.store
    accounts.add_account(store, "ann", "annotator", PASSWORD)
    before = _snapshot(store)
    for call in (lambda: accounts.add_account(store, "mallory", "admin", PASSWORD, actor=ANNOTATOR),
                 lambda: accounts.change_password(store, "ann", "another pass 2", actor=ANNOTATOR),
                 lambda: accounts.set_role(store, "ann", "admin", actor=ANNOTATOR),
                 lambda: accounts.remove_account(store, "ann", actor=ANNOTATOR),
                 lambda: accounts.list_accounts(store, actor=ANNOTATOR),
                 lambda: accounts.account_log(store, actor=ANNOTATOR)):
        with pytest.raises(PermissionDenied, match="may not manage accounts"):
            call()
    assert _snapshot(store) == before
    assert [a["name"] for a in accounts.list_accounts(store, actor=ADMIN)] == ["ann"]
    accounts.set_role(store, "ann", "admin", actor=ADMIN)
    assert store.get_user("ann")["role"] == "admin"


def test_browse_and_export_are_checked_in_the_core_annotators_pass_a_role_without_them_does_not(workspace):
    store = workspace.store
    assert workspace.for_data_dir(None, actor=ANNOTATOR).registry.actor == ANNOTATOR
    with pytest.raises(PermissionDenied, match="may not browse runs and reports"):
        workspace.for_data_dir(None, actor=NOBODY)
    sample = {"z": np.zeros(2), "confidences": np.ones(3) / 3, "image": np.zeros((1, 8, 8)), "target_index": 0,
              "chain": 0, "hit": False}
    exports = (lambda actor: labels_text([{"label": "=cmd"}], "csv", actor=actor),
               lambda actor: sample_arrays([sample], actor=actor),
               lambda actor: label_tools.labels_csv(store, 1, actor=actor),
               lambda actor: queries.labelled_failures_npz(store, 1, ("a",), actor=actor),
               lambda actor: suites.suite_report(store, "none", actor=actor))
    for export in exports:
        with pytest.raises(PermissionDenied, match="may not download exports"):
            export(NOBODY)
        try:
            export(ANNOTATOR)
        except PermissionDenied:  # pragma: no cover - the assertion's message says which
            pytest.fail("an annotator may download exports")
        except ProbeError:
            pass  # past the permission: the export itself has nothing to give here


def test_suites_is_enforced_in_the_core_and_an_annotator_changes_nothing(workspace):
    store = workspace.store
    with pytest.raises(PermissionDenied, match="may not manage regression suites"):
        suites.retire_check(store, "any", 1, actor=ANNOTATOR)
    with pytest.raises(ProbeError, match="has no check"):  # an admin passes the permission, then the lookup
        suites.retire_check(store, "any", 1, actor=ADMIN)
    registry = workspace.registry.acting_as(ANNOTATOR)
    classifier = type("Model", (), {"id": "m", "module": torch.nn.Identity()})()
    with pytest.raises(PermissionDenied, match="may not manage regression suites"):
        suite_checks._add(registry, store, "s", "digits", kind="region", name="n", classifier=classifier,
                    class_names=("a",), evidence={}, latents=np.zeros((1, 2)), images=np.zeros((1, 1, 8, 8)),
                    labels=np.zeros(1))
    assert store.list_suites() == []


def test_run_limits_refuse_settings_no_widget_offers_and_queue_beyond_the_slots(workspace, monkeypatch):
    store = workspace.store
    for name in ("boss", "boss2"):
        accounts.add_account(store, name, "admin", PASSWORD)
    manager = JobManager(store, ThreadLauncher()).acting_as(ADMIN)
    before = _snapshot(store)
    for config, words in (({"epochs": 10**6}, "training epochs"), ({"chains": 5000}, "chains per target"),
                          ({"samples": 10**7}, "samples per chain"), ({"samples_per_image": 10**5}, "perturbations")):
        with pytest.raises(ProbeError, match=f"at most .* {words}"):
            manager.submit("t", config, lambda context: {})
    assert _snapshot(store) == before
    assert ServerLimits().epochs < 10**6
    # the local owner (the CLI, the API) is not a server's guest: not bounded
    JobManager(store, ThreadLauncher()).wait(JobManager(store, ThreadLauncher()).submit("t", {"epochs": 10**6},
                                                                                      lambda context: {}), 10)

    monkeypatch.setenv(MAX_RUNS_PER_PERSON_ENV, "1")
    release = threading.Event()

    def slow(context):
        while not release.is_set():
            context.report(0.5, "working")
            time.sleep(0.02)
        return {}

    first = manager.submit("t", {}, slow)
    _wait(lambda: store.get_run(first).status == "running")
    second = manager.submit("t", {}, slow)
    third = manager.submit("t", {}, slow)
    _wait(lambda: "queued: 1 run(s) working" in (store.get_run(third).message or ""))
    assert store.get_run(second).status == "queued" and "queued" in store.get_run(second).message
    other = JobManager(store, ThreadLauncher()).acting_as(Actor("boss2", "admin", signed_in=True))
    theirs = other.submit("t", {}, lambda context: {})
    # another person's run is not held by this one's limit: it runs at once
    assert other.wait(theirs, 10).status == "done"
    manager.cancel(third)
    assert manager.wait(third, 10).status == "cancelled"
    release.set()
    assert manager.wait(first, 10).status == "done"
    assert manager.wait(second, 10).status == "done"


@pytest.mark.parametrize("forged", [
    "training", "feature-epochs", "nested-dict", "in-a-list"])
def test_run_limits_read_nested_settings_of_every_request(workspace, forged):
    """A training request keeps its epochs inside its model specs; any bounded setting nested anywhere in a
    stored request is bounded as a top-level one is (the Home page's widget allowed 100,000 epochs)."""
    from probe_core.models import ModelSpec
    from probe_core.runs.requests import record
    from probe_core.runs.training import TrainRequest

    store = workspace.store
    accounts.add_account(store, "boss", "admin", PASSWORD)
    manager = JobManager(store, ThreadLauncher()).acting_as(ADMIN)
    config = {
        "training": lambda: record(TrainRequest.build(workspace.registry, dataset="digits",
                                                      specs=[ModelSpec(dataset="digits", epochs=100_000)])),
        "feature-epochs": lambda: {"specs": [{"kind": "vae", "epochs": 3, "feature_epochs": 10**6}]},
        "nested-dict": lambda: {"settings": {"identify": {"samples_per_image": 10**6}}},
        "in-a-list": lambda: {"targets": [{"chains": 2}, {"chains": 10**5}]},
    }[forged]()
    before = _snapshot(store)
    with pytest.raises(ProbeError, match="this server allows at most"):
        manager.submit("t", config, lambda context: {})
    assert _snapshot(store) == before


def test_a_person_cannot_queue_without_end_and_bad_limits_are_refused(workspace, monkeypatch):
    for name in (MAX_RUNS_ENV, MAX_RUNS_PER_PERSON_ENV):
        monkeypatch.setenv(name, "0")
        with pytest.raises(ProbeError, match=name):
            ServerLimits.from_environment()
        monkeypatch.setenv(name, "many")
        with pytest.raises(ProbeError, match=name):
            ServerLimits.from_environment()
        monkeypatch.delenv(name)
    store = workspace.store
    limits = ServerLimits()
    for _ in range(limits.queued_per_person):
        store.create_run("t", {}, user=ADMIN.recorded_name)  # queued, owned by this (live) process
    with pytest.raises(ProbeError, match="runs waiting"):
        JobManager(store, ThreadLauncher()).acting_as(ADMIN).submit("t", {}, lambda context: {})
    assert len(store.list_runs()) == limits.queued_per_person


def test_claiming_a_slot_holds_to_the_limits_and_a_run_never_handed_to_a_worker_holds_nobody_back(workspace):
    store = workspace.store
    store.create_run("t", {}, user="a")  # recorded, never started (a crashed server's, a test's): blocks nobody
    store.start_run(store.create_run("t", {}))  # running for nobody (made through the store alone): not counted
    a1, a2, b1 = (store.create_run("t", {}, user=user) for user in ("a", "a", "b"))
    assert store.claim_run_slot(a1, per_person=1, in_total=2) == 0
    assert store.claim_run_slot(a2, per_person=1, in_total=2) == 1  # its person's slot is taken
    assert store.claim_run_slot(b1, per_person=1, in_total=2) == 0
    b2 = store.create_run("t", {}, user="b")
    assert store.claim_run_slot(b2, per_person=2, in_total=2) == 2  # all slots taken
    store.finish_run(a1, "done")
    assert store.claim_run_slot(a2, per_person=2, in_total=2) == 0
    assert store.claim_run_slot(b2, per_person=2, in_total=2) == 2
    assert store.get_run(a2).status == "running" and store.get_run(b2).status == "queued"
    assert store.claim_run_slot(a1, per_person=1, in_total=1) == 0  # no longer queued: nothing to wait for
    assert store.get_run(a1).status == "done"


def test_smoothgrad_is_bounded_whatever_the_page_sends():
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 2), torch.nn.Softmax(1))
    image = torch.rand(1, 1, 8, 8)
    for settings, words in (({"samples": MAX_SMOOTHGRAD_SAMPLES + 1}, "noisy copies"), ({"samples": 0}, "noisy copies"),
                            ({"noise_level": 50.0}, "noise_level")):
        with pytest.raises(ProbeError, match=words):
            smoothgrad(model, image, 0, **settings)
    with pytest.raises(ProbeError, match="at most"):
        smoothgrad(model, image.repeat(1000, 1, 1, 1), 0, samples=2)


def test_a_sign_in_ends_a_week_after_the_password_was_given_however_often_used(workspace):
    store = workspace.store
    accounts.add_account(store, "ann", "annotator", PASSWORD)
    signed_in = time.time() + 1  # a new account starts signed out: a sign-in after its creation
    lifetime = accounts.SIGN_IN_LIFETIME_S
    assert accounts.cookie_counts(store, "ann", signed_in, now=signed_in + 60)
    assert accounts.cookie_counts(store, "ann", signed_in, now=signed_in + lifetime - 60)
    assert not accounts.cookie_counts(store, "ann", signed_in, now=signed_in + lifetime + 1)
    assert not accounts.cookie_counts(store, "ann", signed_in + 3600, now=signed_in)  # issued in the future: forged


def _wait(condition, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.02)
    raise AssertionError("condition not met (hang guard)")


def test_label_is_enforced_in_the_core_stores(workspace):
    from probe_core.bayestrex import queries as sample_queries

    store = workspace.store
    for call in (lambda actor: label_tools.label_images(store, [1], "ann", "3", tuple("0123456789"), actor=actor),
                 lambda actor: sample_queries.label_sample(store, "ann", 1, "3", actor=actor)):
        with pytest.raises(PermissionDenied, match="may not label images"):
            call(NOBODY)
        try:
            call(ANNOTATOR)
        except PermissionDenied:  # pragma: no cover
            pytest.fail("an annotator may label")
        except Exception:  # noqa: BLE001 - past the permission: there is no image 1 to label here
            pass


def test_sign_in_is_required_once_an_account_exists_or_when_forced(workspace, monkeypatch):
    store = workspace.store
    monkeypatch.delenv(accounts.AUTH_ENV, raising=False)
    assert not accounts.sign_in_required(store)
    assert accounts.sign_in_required(store, forced=True)
    monkeypatch.setenv(accounts.AUTH_ENV, "1")  # probe ui --auth
    assert accounts.sign_in_required(store) and not accounts.sign_in_required(store, forced=False)
    monkeypatch.setenv(accounts.AUTH_ENV, "0")
    assert not accounts.sign_in_required(store)
    accounts.add_account(store, "ann", "annotator", PASSWORD)
    assert accounts.sign_in_required(store) and accounts.sign_in_required(store, forced=False)


def test_the_cookie_secret_is_random_kept_with_the_workspace_and_its_own(workspace, tmp_path):
    from probe_core.runs.workspace import Workspace

    secret = accounts.cookie_secret(workspace.store)
    assert isinstance(secret, str) and len(secret) >= 40  # 32 random bytes, URL-safe
    assert accounts.cookie_secret(workspace.store) == secret
    assert accounts.cookie_secret(Workspace(workspace.root).store) == secret  # another process, another day
    assert accounts.cookie_secret(Workspace(tmp_path / "other").store) != secret


def test_a_worker_runs_what_an_admin_a_shell_or_an_older_version_started_and_nothing_else(workspace):
    from types import SimpleNamespace

    store = workspace.store
    accounts.add_account(store, "ann", "annotator", PASSWORD)
    accounts.add_account(store, "boss", "admin", PASSWORD)
    for user in (None, "", "local:root", "boss"):
        accounts.check_run_starter(store, SimpleNamespace(id=1, user=user))
    with pytest.raises(PermissionDenied, match="may not start runs"):
        accounts.check_run_starter(store, SimpleNamespace(id=2, user="ann"))
    with pytest.raises(PermissionDenied, match="run 3 was started by 'gone', which is no longer an account"):
        accounts.check_run_starter(store, SimpleNamespace(id=3, user="gone"))


def test_the_account_log_reads_from_a_time_and_a_sign_out_is_logged_when_it_happened(workspace):
    store = workspace.store
    accounts.record_sign_out(store, "ann", when=100.0)
    accounts.record_sign_out(store, "bea", when=200.0)
    assert [(e["kind"], e["name"], e["at"]) for e in accounts.account_log(store)] == [
        ("sign-out", "bea", 200.0), ("sign-out", "ann", 100.0)]
    assert [e["name"] for e in accounts.account_log(store, since=150.0)] == ["bea"]
    assert [e["name"] for e in accounts.account_log(store, limit=1)] == ["bea"]


def test_training_auto_labelling_and_labelling_as_another_are_checked_in_the_core(trained_workspace, flawed_run,
                                                                                  tmp_path):
    """Whoever calls it: a registry acting as an annotator never trains (lookups of a model not trained yet,
    a ``default`` to train, the oracle of auto-labelling), and a signed-in person labels under their own name
    only; an admin may do all of it."""
    from probe_core.defuse import review
    from probe_core.models import ModelSpec
    from probe_core.runs.workspace import Workspace

    as_annotator = Workspace(tmp_path / "ws").registry.acting_as(ANNOTATOR)  # an empty workspace: all untrained
    spec = ModelSpec(dataset="digits", kind="classifier", epochs=1)
    for call in (lambda: as_annotator.get_or_train(spec),
                 lambda: as_annotator.get_or_train_reference("default", "classifier", "digits")):
        with pytest.raises(PermissionDenied, match="may not start runs, train"):
            call()
    assert as_annotator.list() == []  # nothing was trained
    store = trained_workspace.store
    runs_before = tuple(r.id for r in store.list_runs())
    with pytest.raises(PermissionDenied, match="may not start runs, train"):
        review.auto_label(trained_workspace.registry.acting_as(ANNOTATOR), store, flawed_run["distill_run"], "default")
    assert tuple(r.id for r in store.list_runs()) == runs_before
    # a trained model is a lookup, allowed to an annotator
    assert trained_workspace.registry.acting_as(ANNOTATOR).get_or_train(
        ModelSpec(dataset="digits", kind="classifier")).kind == "classifier"

    names = tuple(str(k) for k in range(10))
    distill_run = flawed_run["distill_run"]
    cluster = store.get_clusters(distill_run)[0]
    _, classifier, vae = queries.load_run_models(trained_workspace.registry, store, distill_run)
    image_ids = review.review_images(store, vae, classifier, cluster, queries.distill_tau(store, distill_run))["ids"][:2]
    with pytest.raises(PermissionDenied, match="only under their own name"):
        label_tools.label_images(store, image_ids, "someone-else", "9", names, actor=ANNOTATOR)
    assert label_tools.label_images(store, image_ids, ANNOTATOR.name, "9", names, actor=ANNOTATOR)
    assert label_tools.label_images(store, image_ids, "ann-for-the-record", "9", names, actor=ADMIN)
    assert label_tools.label_images(store, image_ids, "shell-user", "9", names)  # the local owner, a shell


def test_every_run_kind_s_bounded_settings_are_refused_top_level_and_nested():
    """For each run kind the installed packages declare, every setting of its request type that the server
    bounds is refused over its bound, written where the request keeps it or nested in a list of dicts."""
    import dataclasses

    from probe_core.runs.lifecycle import all_run_kinds
    from probe_core.runs.limits import _BOUNDED_SETTINGS

    limits = ServerLimits()
    bounded = dict(_BOUNDED_SETTINGS)
    checked = {}
    for name, kind in all_run_kinds().items():
        fields = {field.name for field in dataclasses.fields(kind.request_type)}
        if "specs" in fields:  # a training request: its model specs carry epochs
            fields |= {"epochs", "feature_epochs"}
        checked[name] = sorted(fields & set(bounded))
        for field in checked[name]:
            too_many = getattr(limits, bounded[field]) + 1
            for config in ({field: too_many}, {"specs": [{"kind": "vae"}, {field: too_many}]}):
                with pytest.raises(ProbeError, match="this server allows at most"):
                    limits.check_request(config)
            limits.check_request({field: getattr(limits, bounded[field])})  # the bound itself is allowed
    assert {"sample", "train", "defuse-identify", "defuse-correct", "compare"} <= {
        name for name, fields in checked.items() if fields}, checked
