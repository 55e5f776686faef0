"""A Ray cluster started as a user starts one (``ray start --head`` on 127.0.0.1), joined by address from the CLI."""

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import claim_group

if shutil.which("ray", path=str(Path(sys.executable).parent)) is None:
    if os.environ.get("CI") == "true":  # the dev requirements install Ray: in CI this must fail, not skip
        raise RuntimeError("the ray command is missing: pip install -r requirements-dev.txt")
    pytest.skip("Ray is not installed (pip install -e '.[ray]')", allow_module_level=True)

RAY = str(Path(sys.executable).parent / "ray")
pytestmark = pytest.mark.ray  # one Ray at a time: the group keeps these beside tests/integration/test_scaleout_ray.py


@pytest.fixture
def token_auth(tmp_path, tmp_path_factory) -> dict:
    """The environment of a cluster with token authentication (Ray 2.59+ starts clusters so) and its clients.

    The token is this test's own file (``RAY_AUTH_TOKEN_PATH``), so the test neither needs nor touches
    ``~/.ray/auth_token``: Ray 2.60's ``ray start`` refuses to start without a token, and whether another test
    had already written the default one depended on the order the tests ran in.
    """
    claim_group(tmp_path_factory, "ray")
    token = tmp_path / "ray-auth-token"
    token.write_text(secrets.token_hex(32))  # the form of Ray's own tokens (256 random bits, hex)
    token.chmod(0o600)
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _start_head(log_path: Path, token_auth: dict) -> tuple[subprocess.Popen, int]:
    port = _free_port()
    with open(log_path, "ab") as log:
        head = subprocess.Popen([RAY, "start", "--head", "--block", "--node-ip-address", "127.0.0.1", "--port",
                                 str(port), "--num-cpus", "2", "--object-store-memory", str(200 * 1024**2),
                                 "--include-dashboard", "false", "--disable-usage-stats"],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, **token_auth})
    return head, port


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _stop(head: subprocess.Popen) -> None:
    """Stop a head with its process group: never ``ray stop``, which would stop every Ray instance here."""
    try:
        os.killpg(head.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        head.wait(timeout=5)
    except subprocess.TimeoutExpired:
        os.killpg(head.pid, signal.SIGKILL)
        head.wait()


@pytest.fixture
def head_node(tmp_path, token_auth):
    """A head node in its own process group (``--block``), listening before the test starts.

    A head that exits while starting (another process took one of the ports Ray picks) is
    started again on another port; its output is in the failure message if it never listens.
    """
    log_path = tmp_path / "ray-head.log"
    for _attempt in range(3):
        head, port = _start_head(log_path, token_auth)
        deadline = time.time() + 120
        while time.time() < deadline and head.poll() is None and not _listening(port):
            time.sleep(0.5)
        if head.poll() is None and _listening(port):
            break
        _stop(head)
    else:
        raise AssertionError("the Ray head never listened:\n" + log_path.read_text(errors="replace")[-3000:])
    yield f"127.0.0.1:{port}"
    _stop(head)


def test_the_cli_samples_on_a_cluster_joined_by_address(trained_workspace, head_node, token_auth, tmp_path):
    out = tmp_path / "result.json"
    env = {**os.environ, **token_auth, "PROBE_WORKSPACE": str(trained_workspace.root), "RAY_ADDRESS": ""}
    command = [sys.executable, "-m", "probe_core.cli", "--executor", f"ray:{head_node}", "sample",
               "--target", "ambiguous:3,5;high:2", "--chains", "2", "--warmup", "10", "--samples", "5",
               "--shards", "2", "--out", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["executor"] == "ray" and result["shards"] == 2
    assert [target["spec"] for target in result["targets"]] == ["ambiguous:3,5", "high:2"]
    for target in result["targets"]:  # every shard's chains came back: 2 chains x 5 kept draws, 10 classes each
        assert len(target["samples"]) == 2 * 5 and target["summary"]["kept"] == 2 * 5
        assert all(len(sample["confidences"]) == 10 and abs(sum(sample["confidences"]) - 1) < 1e-3
                   for sample in target["samples"])
    [run] = trained_workspace.store.list_runs(kind="sample", limit=1)
    assert run.status == "done" and len(trained_workspace.store.get_samples(run.id)) == 2 * 2 * 5


def test_an_address_where_no_cluster_listens_is_one_clear_error(trained_workspace):
    runs_before = len(trained_workspace.store.list_runs(limit=10_000))
    env = {**os.environ, "PROBE_WORKSPACE": str(trained_workspace.root), "RAY_ADDRESS": ""}
    done = subprocess.run([sys.executable, "-m", "probe_core.cli", "--executor", f"ray:127.0.0.1:{_free_port()}",
                           "sample", "--target", "high:2", "--chains", "2", "--warmup", "5", "--samples", "5",
                           "--shards", "1"], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 2 and "cannot join the Ray cluster" in done.stderr
    assert len(trained_workspace.store.list_runs(limit=10_000)) == runs_before  # refused before a run was stored
