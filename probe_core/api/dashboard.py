"""The dashboard from Python: :func:`show` keeps in-memory models and arrays in the workspace and serves them.

``mp.show(classifier=net, generator=vae, data=(x, y), class_names=[...])`` writes the objects as files
that resolve again (:mod:`probe_core.models.kept`), starts ``probe ui`` on the workspace in a worker process
(or reuses the one already serving it), prints its address and returns a :class:`Dashboard` handle.
In a Jupyter notebook the dashboard is shown inline as well. The address names the data set and the
models (``?dataset=…&classifier=…&generator=…``), so it opens on them and a bookmark keeps them.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from probe_core.catalog import load_dataset
from probe_core.errors import ProbeError
from probe_core.models.kept import references as references_of
from probe_core.runs.workspace import open_workspace

SERVER_FILE = "dashboard.json"  # in the workspace: the server serving it (pid, port), for reuse
LOG_FILE = "dashboard.log"
START_TIMEOUT_S = 120.0
IFRAME_HEIGHT = 900


@dataclass
class Dashboard:
    """A dashboard server serving a workspace.

    Attributes
    ----------
    url : str
        The address to open (on the Probe page, with the shown data set and models).
    base_url : str
        ``http://HOST:PORT``.
    workspace : Path
    pid : int
        The server's process (started by this handle or found serving the workspace).
    references : dict
        ``dataset``, ``classifier`` and ``generator`` references as stored (they resolve in any process).
    """

    url: str
    base_url: str
    workspace: Path
    pid: int
    references: dict = field(default_factory=dict)

    def running(self) -> bool:
        """Whether the server answers its health check."""
        return _healthy(self.base_url)

    def stop(self) -> None:
        """Stop the server and the worker processes it started."""
        try:
            os.killpg(self.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
        deadline = time.time() + 20
        while time.time() < deadline and _alive(self.pid):
            time.sleep(0.2)
        if _alive(self.pid):
            os.killpg(self.pid, signal.SIGKILL)
        record = Path(self.workspace) / SERVER_FILE
        if _read_record(record).get("pid") == self.pid:
            record.unlink(missing_ok=True)

    def __repr__(self) -> str:
        return f"Dashboard({self.url!r}, {'running' if self.running() else 'stopped'})"


def _alive(pid: int) -> bool:
    try:
        finished, _ = os.waitpid(pid, os.WNOHANG)  # reaps our own child once it has exited
        if finished == pid:
            return False
    except ChildProcessError:  # not our child: ask the kernel
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _healthy(base_url: str) -> bool:
    try:
        with urllib.request.urlopen(base_url + "/_stcore/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def _read_record(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _in_notebook() -> bool:
    shell = sys.modules.get("IPython")
    ipython = shell.get_ipython() if shell is not None and hasattr(shell, "get_ipython") else None
    return ipython is not None and "IPKernelApp" in getattr(ipython, "config", {})


def serve(workspace_root: str | Path, port: int | None = None, host: str = "127.0.0.1",
          timeout: float = START_TIMEOUT_S, autotrain: bool = False) -> tuple[str, int]:
    """The base address and pid of a dashboard serving the workspace: the running one, else a new one.

    A new server is ``probe ui`` in its own process group, logging to ``WORKSPACE/dashboard.log``; it is
    stopped when the process that started it exits (or by :meth:`Dashboard.stop`).

    Raises
    ------
    ProbeError
        When the port is taken by something else or the server does not come up within ``timeout`` s.
    """
    root = Path(workspace_root).expanduser().resolve()
    root.mkdir(parents=True, exist_ok=True)
    record_path = root / SERVER_FILE
    record = _read_record(record_path)
    if record and _alive(int(record.get("pid", -1))) and _healthy(record.get("base_url", "")) \
            and port in (None, record.get("port")):
        return record["base_url"], int(record["pid"])
    port = port or _free_port()
    base_url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}"
    if _healthy(base_url):
        raise ProbeError(f"port {port} already serves something else; choose another port or leave it out")
    env = {**os.environ, "PROBE_WORKSPACE": str(root), "PROBE_AUTOTRAIN": "1" if autotrain else "0"}
    with open(root / LOG_FILE, "w") as log:  # the server writes to its own copy of the file descriptor
        process = subprocess.Popen([sys.executable, "-m", "probe_core.cli", "ui", "--port", str(port), "--host", host],
                                   env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    deadline = time.time() + timeout
    while time.time() < deadline:
        if process.poll() is not None:
            raise ProbeError(f"the dashboard exited at start (code {process.returncode}): "
                             f"{(root / LOG_FILE).read_text()[-1500:]}")
        if _healthy(base_url):
            break
        time.sleep(0.5)
    else:
        os.killpg(process.pid, signal.SIGKILL)
        raise ProbeError(f"the dashboard did not answer on {base_url} within {timeout:.0f} s; see {root / LOG_FILE}")
    record_path.write_text(json.dumps({"pid": process.pid, "port": port, "base_url": base_url}))
    started = Dashboard(base_url, base_url, root, process.pid)
    atexit.register(lambda: started.stop() if _alive(started.pid) else None)
    return base_url, process.pid


def show(classifier=None, generator=None, data=None, class_names=None, *, input_shape=None, workspace=None,
         port: int | None = None, host: str = "127.0.0.1", page: str = "probe") -> Dashboard:
    """Open the dashboard on in-memory (or stored) models and data.

    Parameters
    ----------
    classifier : torch.nn.Module or str, optional
        A module mapping images (B, C, H, W) in [0, 1] to logits (B, K), with ``class_names``; or any
        model reference. Modules are kept in the workspace as model files with sidecars.
    generator : torch.nn.Module or str, optional
        A module with ``latent_dim`` and ``decode(z)`` (and ``encode`` for Defuse), or a reference.
    data : (x, y) or str, optional
        Images x (N, C, H, W) in [0, 1] and labels y (N,) (kept as an ``.npz``), or a data set name.
    class_names : sequence of str, optional
        The classifier's K classes in output order, which are also the names of the labels of ``y``.
    input_shape : tuple of int, optional
        The classifier's (C, H, W) (default: the data's image shape).
    workspace : str or Path, optional
        Where runs and the kept files are stored (default ``$PROBE_WORKSPACE`` or ``./workspace``).
    port : int, optional
        Default: the running dashboard's, else a free one.
    host : str
        ``127.0.0.1``; another address needs accounts (``probe users add``), as ``probe ui --host`` does.
    page : str
        The page to open (``probe``, ``matrix``, ``failures``, ``label``...).

    Returns
    -------
    Dashboard
        ``.url``, ``.stop()``.

    Raises
    ------
    ProbeError
        For models or data that cannot be kept or checked, before any server starts.
    """
    space = open_workspace(workspace)
    given = {"dataset": data, "classifier": classifier, "generator": generator}
    kept = references_of(space, "digits" if data is None else data, "default" if classifier is None else classifier,
                         generator, class_names, input_shape)
    references = {kind: reference for (kind, value), reference in zip(given.items(), kept) if value is not None}
    dataset = kept[0]
    load_dataset(dataset, space.registry.data_dir)
    for kind in ("classifier", "generator"):
        if kind in references:
            space.registry.resolve(references[kind], kind, dataset)  # class match and file checks, now
    base_url, pid = serve(space.root, port, host, autotrain=classifier is None and data is None)
    query = urllib.parse.urlencode(references)
    url = f"{base_url}/{page}" + (f"?{query}" if query else "")
    handle = Dashboard(url, base_url, Path(space.root).resolve(), pid, references)
    print(f"Model Probe: {url}", flush=True)
    if _in_notebook():
        from IPython.display import IFrame, display

        display(IFrame(url, width="100%", height=IFRAME_HEIGHT))
    return handle
