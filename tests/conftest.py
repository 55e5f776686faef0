"""Shared fixtures: a workspace with the real default digits models, trained once per session.

Tests live in ``unit/`` (parts on small data; a model trained for a few seconds at most), ``integration/``,
``app/`` (AppTest) and ``e2e/`` (a real browser and real processes); the tiers (``make test-fast`` leaves out
``slow``, ``e2e`` and ``ray``) are marks given below. Helpers every folder uses are in ``helpers.py``, never
imported from here.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

import pytest

# `make test` runs the suite in one pytest-xdist worker per core. There each worker, and every process it
# starts, gets one thread for torch and for numba (UMAP), set before either loads its OpenMP pool: a
# second OpenMP thread left waiting in a worker spins on the core the other worker needs (a 3-8x slowdown).
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.update(OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1", OMP_WAIT_POLICY="PASSIVE")
# The session's shared workspaces hold runs other tests left working (the pages' background runs, runs made
# through the store alone): the server's run limits would queue a later test's run behind them. The limits are
# tested on their own (tests/integration/test_permissions_core.py sets them there).
os.environ.setdefault("PROBE_MAX_RUNS", "64")
os.environ.setdefault("PROBE_MAX_RUNS_PER_PERSON", "64")
import torch  # noqa: E402
from helpers import MISLABELLED, claim_group  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

# Property tests: under CI=true they run derandomized (the same examples on every machine and run, so a
# submission cannot fail by chance); `make fuzz` runs them with many more random examples
# (HYPOTHESIS_PROFILE=fuzz), and each failure a fuzz run finds is fixed and kept as an @example.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("fuzz", max_examples=5000, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") == "true" else "dev"))

sys.path.insert(0, str(Path(__file__).resolve().parent / "data"))  # the shipped models' scripts


def _scan_installed_components_once() -> None:
    """Every new AppTest scans the metadata of every installed package for Streamlit components (about 0.8 s on
    2 cores, most of a minute over the suite's page tests); the installed packages do not change during a test
    session, so the first scan's answer is kept. A Streamlit without this scanner is left as it is (slower)."""
    try:
        from streamlit.components.v2 import manifest_scanner
    except ImportError:
        return
    scan = getattr(manifest_scanner, "scan_component_manifests", None)
    if scan is not None and not hasattr(scan, "cache_info"):
        manifest_scanner.scan_component_manifests = functools.cache(scan)


_scan_installed_components_once()

torch.set_num_threads(1 if os.environ.get("PYTEST_XDIST_WORKER") else 2)

os.environ.setdefault("PROBE_AUTOTRAIN", "0")
# The dashboard opens on digits in the tests, whatever the shared workspace was used on last (other tests add
# runs on other data sets); tests/app/test_app.py checks the opening on the last-used data set without it.
os.environ.setdefault("PROBE_DATASET", "digits")
# In-process page tests run background jobs in threads (fast to start); worker processes, the
# dashboard's default, are tested in tests/integration/test_launchers.py and by every browser test's server.
os.environ.setdefault("PROBE_LAUNCHER", "thread")
# PROBE_TEST_SEED: the seed of every model trained inside the tests (default 0). The suite must
# pass with any seed; the product reads it as PROBE_MODEL_SEED, so subprocesses see it too.
TEST_SEED = int(os.environ.get("PROBE_TEST_SEED", "0"))
os.environ["PROBE_MODEL_SEED"] = str(TEST_SEED)


# Tests that share one costly thing run on one xdist worker (``--dist loadgroup``): the session-wide flawed Defuse
# run and the regression suite built on it, the signed-in browser tests' dashboard server (tests/e2e/test_browser.py),
# and Ray (one instance per worker would start two Ray clusters on two cores). A test joins a group by using the
# fixture or by its marker (``ray`` for every Ray test, ``pytestmark = pytest.mark.ray``). A test that uses two
# costly things joins their groups into one (the team server and the Ray tests use the flawed run), so each thing
# is still built once per run.
GROUP_OF_FIXTURE = {"flawed_run": "flawed-run", "regression_suite": "regression-suite", "ray_instance": "ray",
                    "team_server": "team-server"}
GROUP_OF_MARKER = {"ray": "ray"}
# Tiers (``make test-fast`` leaves these out; ``make test`` and CI run them all): ``e2e`` and ``slow`` are given by
# the folder (the page tests run background jobs), ``slow`` also by a costly shared fixture or a module's own
# ``pytestmark = pytest.mark.slow`` (training or long Defuse steps), ``ray`` by the module's mark.
TIER_OF_FOLDER = {"e2e": "e2e", "app": "slow"}
SLOW_FIXTURES = {"flawed_run", "regression_suite", "colours_workspace"}


def _groups_wanted(item) -> set[str]:
    """The groups of the costly shared things a collected test uses (its fixtures and marks)."""
    groups = {group for fixture, group in GROUP_OF_FIXTURE.items() if fixture in getattr(item, "fixturenames", ())}
    return groups | {group for marker, group in GROUP_OF_MARKER.items() if item.get_closest_marker(marker)}


def joined_groups(wanted: list[set[str]]) -> dict[str, str]:
    """Each group's xdist group name once the groups that one test wants together are joined.

    A test runs on one worker, so two groups that one test uses must share that worker; joining them
    (transitively) gives each test exactly one group. The joined name lists its parts: ``flawed-run+ray``.
    """
    parent: dict[str, str] = {}

    def root(group: str) -> str:
        while parent.setdefault(group, group) != group:
            group = parent[group]
        return group

    for groups in wanted:
        ordered = sorted(groups)
        for other in ordered[1:]:
            parent[root(other)] = root(ordered[0])
        for group in ordered:
            root(group)
    members: dict[str, list[str]] = {}
    for group in parent:
        members.setdefault(root(group), []).append(group)
    return {group: "+".join(sorted(members[root(group)])) for group in parent}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """Add the group and tier marks before pytest-xdist reads them.

    xdist's worker turns ``xdist_group`` marks into a node-id suffix in its own
    ``pytest_collection_modifyitems``; this hook must run first (``tryfirst``) or the marks come too late and
    the groups are spread over the workers. ``tests/unit/test_grouping.py`` checks the suffix on a real
    ``-n 2`` run, and :func:`claim_group` fails a run where one group's fixture is built on two workers.
    """
    wanted = [_groups_wanted(item) for item in items]
    names = joined_groups(wanted)
    for item, groups in zip(items, wanted):
        if groups:
            item.add_marker(pytest.mark.xdist_group(names[next(iter(groups))]))
        folder = Path(str(item.path)).parent.name
        if folder in TIER_OF_FOLDER:
            item.add_marker(getattr(pytest.mark, TIER_OF_FOLDER[folder]))
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def trained_workspace(tmp_path_factory):
    """A workspace holding the default digits classifier, VAE and GAN.

    With seed 0 the copies shipped in ``tests/data/digits-defaults`` are installed when they still
    match the code (``tests/data/make_default_models.py``; ``test_shipped_weights.py`` fails when they
    do not); anything missing is trained here (about 85 s on 2 cores). ``PROBE_DEV_WORKSPACE=DIR``
    keeps the workspace in DIR/<xdist worker> between runs while developing (runs pile up); CI uses a fresh one.
    """
    from make_default_models import SEED, install

    from probe_core.runs.workspace import Workspace

    kept = os.environ.get("PROBE_DEV_WORKSPACE")
    if kept:  # one per xdist worker: tests count the runs they add
        kept = Path(kept) / os.environ.get("PYTEST_XDIST_WORKER", "main")
    workspace = Workspace(kept or tmp_path_factory.mktemp("trained-workspace"))
    if TEST_SEED == SEED:
        install(workspace, "digits")
    for spec in workspace.registry.default_specs("digits"):
        workspace.registry.get_or_train(spec)
    return workspace


@pytest.fixture
def colours_workspace(tmp_path):
    """A fresh workspace holding, with seed 0, the shipped ``colours`` classifier, β-VAE and the colour test's
    flawed classifier when they match the code (``tests/data/colours-defaults``); otherwise empty, and the
    test trains what it needs (about 55 s)."""
    from make_default_models import SEED, install

    from probe_core.runs.workspace import Workspace

    workspace = Workspace(tmp_path / "ws")
    if TEST_SEED == SEED:
        install(workspace, "colours")
    return workspace


@pytest.fixture
def app_env(trained_workspace, monkeypatch):
    """The dashboard pointed at the trained workspace, without the default-training job."""
    monkeypatch.setenv("PROBE_WORKSPACE", str(trained_workspace.root))
    monkeypatch.setenv("PROBE_AUTOTRAIN", "0")
    return trained_workspace


@pytest.fixture
def workspace(tmp_path):
    from probe_core.runs.workspace import Workspace

    return Workspace(tmp_path / "ws")


@pytest.fixture(scope="session")
def flawed_run(trained_workspace, tmp_path_factory):
    """A classifier trained with 40 % of its 9s labelled 8, identified and distilled with quick settings (~15 s)."""
    claim_group(tmp_path_factory, GROUP_OF_FIXTURE["flawed_run"])
    from probe_core.defuse import steps
    from probe_core.models import ModelSpec

    registry, store = trained_workspace.registry, trained_workspace.store
    flawed = registry.get_or_train(ModelSpec(dataset=MISLABELLED, kind="classifier"))
    identify_run, identified = steps.run_step(registry, store, steps.IdentifyRequest(
        dataset=MISLABELLED, classifier=flawed.id, samples_per_image=200))
    distill_run, distilled = steps.run_step(registry, store, steps.DistillRequest(
        identify_run=identify_run, max_samples=3000))
    return {"classifier": flawed.id, "identify_run": identify_run, "identified": identified,
            "distill_run": distill_run, "distilled": distilled}


@pytest.fixture(scope="session")
def regression_suite(trained_workspace, flawed_run, tmp_path_factory):
    """Suite ``digits-regressions``: the flawed classifier's worst 9-labelled Defuse region and a Bayes-TrEx
    finding (high:4 samples a person labelled), scored on the flawed classifier and its Defuse correction."""
    claim_group(tmp_path_factory, GROUP_OF_FIXTURE["regression_suite"])
    import numpy as np

    from probe_core import suites
    from probe_core.bayestrex.request import SampleRequest
    from probe_core.defuse import review, steps
    from probe_core.defuse.labels import cluster_label_table as label_table
    from probe_core.runs.lifecycle import run_now

    registry, store = trained_workspace.registry, trained_workspace.store
    distill_run, names = flawed_run["distill_run"], tuple(str(c) for c in range(10))
    source, _ = review.auto_label(registry, store, distill_run, "default")  # the oracle stands in for people
    _, corrected = steps.run_step(registry, store, steps.CorrectRequest(
        distill_run=distill_run, source=source, lambdas=(1.0,), epochs=2, samples_per_region=64,
        selection="data-and-failures"))
    nines = [row for row in label_table(store, distill_run, names, source)
             if row["usable"] and row["label"] == "9"]
    original = flawed_run["classifier"]
    worst = None
    for row in nines:  # keep the region the flawed classifier gets most wrong
        held_out = suites.region_evidence(registry, store, distill_run, row["id"], source=source)
        accuracy = float((suites.classify(held_out["classifier"], held_out["images"]).argmax(1) == 9).mean())
        worst = min(worst or (2.0, row["id"]), (accuracy, row["id"]))
    region = suites.add_region_check(registry, store, "digits-regressions", distill_run, worst[1], source=source)
    run_id, _ = run_now(registry, SampleRequest(
        dataset=MISLABELLED, target="high:4", class_names=tuple("0123456789"), classifier=original, generator=registry.default_id("digits", "generator"),
        chains=4, warmup=40, samples=20, keep_every=2))
    reference = registry.resolve("default", "classifier", "digits")
    samples = store.get_samples(run_id)
    probs = suites.classify(reference, np.stack([s["image"] for s in samples]))
    for index in np.argsort(-probs.max(1))[:5]:  # "a person" labels the five clearest samples with what they show
        store.set_label("fixture-person", sample_id=samples[index]["id"], label=str(int(probs[index].argmax())))
    finding = suites.add_finding_checks(registry, store, "digits-regressions", run_id)[0]
    suites.score_suite(registry, store, "digits-regressions", corrected.corrected_model)
    return {"suite": "digits-regressions", "original": original, "corrected": corrected.corrected_model,
            "region": region, "finding": finding, "sample_run": run_id, "label_source": source}
