"""The suite's xdist groups hold: tests that share a costly fixture or a ``ray`` mark run on one worker, and a test
that uses two of them joins their groups (so both things are still built on one worker).

A small test tree is run with ``-n 2 --dist loadgroup`` under the suite's own ``tests/conftest.py`` hook (loaded
as a plugin), its shared fixture replaced by a cheap one; each test writes down the worker it ran on. With a pytest
and pytest-xdist pair that drops the groups (pytest 9.2, pytest-xdist issue #1386), or a conftest hook that
marks the tests after xdist read them, the groups land on both workers and this test fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

SUITE_HOOKS = '''
import importlib.util

_spec = importlib.util.spec_from_file_location("suite_conftest", {conftest!r})
_suite = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_suite)
pytest_collection_modifyitems = _suite.pytest_collection_modifyitems
'''

TREE_CONFTEST = '''
import json, os
import pytest

@pytest.fixture(scope="session")
def regression_suite():
    return "cheap stand-in"

@pytest.fixture(scope="session")
def team_server():
    return "cheap stand-in"

@pytest.fixture(scope="session")
def flawed_run():
    return "cheap stand-in"

@pytest.fixture
def record(request, tmp_path_factory):
    yield
    out = tmp_path_factory.getbasetemp().parent.parent / "workers.jsonl"
    groups = sorted(m.args[0] for m in request.node.iter_markers("xdist_group"))
    with open(out, "a") as handle:
        handle.write(json.dumps({"test": request.node.name, "groups": groups,
                                 "worker": os.environ.get("PYTEST_XDIST_WORKER")}) + "\\n")
'''

TREE_MODULE = '''
import pytest

@pytest.mark.parametrize("i", range(4))
def test_suite_{name}(record, regression_suite, i):
    pass

@pytest.mark.ray
@pytest.mark.parametrize("i", range(4))
def test_ray_{name}(record, i):
    pass

@pytest.mark.parametrize("i", range(2))
def test_team_{name}(record, team_server, i):
    pass

@pytest.mark.ray
@pytest.mark.parametrize("i", range(2))
def test_ray_and_flawed_{name}(record, flawed_run, i):
    pass

@pytest.mark.parametrize("i", range(6))
def test_free_{name}(record, i):
    pass
'''


def test_grouped_tests_stay_on_one_worker(tmp_path):
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "conftest.py").write_text(TREE_CONFTEST)
    (tree / "suite_hooks.py").write_text(SUITE_HOOKS.format(conftest=str(TESTS / "conftest.py")))
    for name in ("a", "b", "c"):
        (tree / f"test_{name}.py").write_text(TREE_MODULE.format(name=name))
    base = tmp_path / "temp"  # each worker takes temp/gwN, so the record lands in tmp_path
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), str(TESTS), os.environ.get("PYTHONPATH", "")])}
    env.pop("PYTEST_XDIST_WORKER", None)
    completed = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "suite_hooks", "-n", "2", "--dist", "loadgroup", "-q",
         "-p", "no:cacheprovider", "-p", "no:randomly", "--basetemp", str(base), "--rootdir", str(tree),
         "-c", os.devnull, str(tree)],
        cwd=tree, env=env, capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "workers.jsonl").read_text().splitlines()]
    assert len(rows) == 3 * 18
    # group: (the tests' name prefix, how many per module); test_ray_and_flawed_* join flawed-run and ray
    groups = {"regression-suite": ("suite", 4), "team-server": ("team", 2), "flawed-run+ray": ("ray", 4 + 2)}
    for group, (test, per_module) in groups.items():
        members = [row for row in rows if row["test"].startswith(f"test_{test}_")]
        assert len(members) == 3 * per_module
        assert all(row["groups"] == [group] for row in members), f"{test} tests carry the mark {group}: {members}"
        assert len({row["worker"] for row in members}) == 1, f"group {group} ran on {members}"
    assert len({row["worker"] for row in rows}) == 2, "both workers took tests (the run was parallel)"
