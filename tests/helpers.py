"""Helpers shared by the tests: tiny plugin models that need no training, the shipped scene classifier."""

from __future__ import annotations

import contextlib
import os
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

TINY_PLUGIN = '''
import torch
from torch import nn

class_names = [str(i) for i in range(10)]
input_shape = (1, 8, 8)
classifier_outputs = "logits"


class TinyGenerator(nn.Module):
    """Latent (B, 2) -> images (B, 1, 8, 8) in [0, 1]; deterministic weights."""

    latent_dim = 2

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(2, 64)

    def decode(self, z):
        return torch.sigmoid(self.fc(z)).view(-1, 1, 8, 8)

    def encode(self, x):
        flat = x.reshape(len(x), -1)
        mu = flat[:, :2] * 2 - 1
        return mu, torch.full_like(mu, -2.0)


def classifier():
    """Nearest class mean of the 8x8 digits (about 90 % on their test images): a plugin classifier that has
    learned, as the tool requires before it samples or identifies (one near chance is refused)."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = torch.tensor(digits.images.reshape(len(digits.images), -1) / 16.0, dtype=torch.float32)
    labels = torch.tensor(digits.target)
    means = torch.stack([images[labels == c].mean(0) for c in range(10)])
    layer = nn.Linear(64, 10)
    with torch.no_grad():
        layer.weight.copy_(means * 10.0)
        layer.bias.copy_(-5.0 * (means ** 2).sum(1))
    return nn.Sequential(nn.Flatten(), layer)


def generator():
    return TinyGenerator()
'''


def write_tiny_plugin(folder: Path, name: str = "tiny_model.py", extra: str = "") -> Path:
    """Write a plugin with an untrained 8x8 classifier (logits) and a 2-d generator; returns its path."""
    path = Path(folder) / name
    path.write_text(TINY_PLUGIN + textwrap.dedent(extra))
    return path


MISLABELLED = "digits[mislabel=9->8:0.4]"


SCENE_CLASSIFIER = Path(__file__).resolve().parent / "data" / "scenes-classifier.pt"


def shipped_scene_classifier():
    """The zoo's square-counting classifier for ``scenes``, trained once and shipped (about 4 min to train).

    Regenerate with ``python tests/data/make_scene_classifier.py`` after changing the renderer
    or the architecture. Returns a :class:`LoadedModel` (probabilities out).
    """
    from probe_core.models.architectures import CountingClassifier, ProbabilityModel
    from probe_core.models.loaded import LoadedModel
    from probe_core.scenes.generator import CLASS_NAMES

    if not SCENE_CLASSIFIER.is_file():
        pytest.fail(f"{SCENE_CLASSIFIER} is missing: run python tests/data/make_scene_classifier.py")
    module = CountingClassifier((3, 32, 32), len(CLASS_NAMES))
    module.load_state_dict(torch.load(SCENE_CLASSIFIER, weights_only=True))
    return LoadedModel("scenes-classifier-shipped", "classifier", ProbabilityModel(module.eval(), "logits").eval(),
                       CLASS_NAMES)


def register_scene_classifier(workspace) -> str:
    """Store the shipped scene classifier as the workspace's default ``scenes`` classifier; returns its id."""
    from dataclasses import asdict

    from probe_core.catalog import load_dataset
    from probe_core.models import ModelSpec

    dataset = load_dataset("scenes")
    spec = ModelSpec(dataset="scenes", kind="classifier").resolved(dataset)
    if not workspace.registry.exists(spec.model_id()):
        record = asdict(spec)
        record.update(architecture={"class": "CountingClassifier", "args": {"image_shape": [3, 32, 32],
                                                                             "num_classes": dataset.num_classes}},
                      class_names=list(dataset.class_names), original_classes=list(dataset.original_classes),
                      dataset_view=dataset.name, image_shape=list(dataset.image_shape))
        workspace.registry.register(shipped_scene_classifier().module.net, record, {"shipped": True},
                                    spec.model_id())
    return spec.model_id()


SHARED_MNIST = Path(__file__).resolve().parents[2] / "shared" / "data" / "mnist-t10k"


def require_shared_mnist() -> Path:
    """The real MNIST test set in ../shared; skipped where it is absent, but a failure under ``CI=true``."""
    if not SHARED_MNIST.is_dir():
        message = f"the shared MNIST t10k folder {SHARED_MNIST} is not next to this checkout"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but {message}")
        pytest.skip(message)
    return SHARED_MNIST


def rerun_until(at, condition, timeout: float = 120.0, fallback: float = 3.0):
    """Rerun an AppTest page until ``condition(at)`` holds (a background run reached a state).

    The store is polled (its latest runs' status, progress and message, a cheap query) and the page rerun when
    that state changed, or every ``fallback`` seconds for what the store does not show; while a run is only
    working, the page is not redrawn for nothing.
    """
    store = _store_of_env()
    deadline = time.time() + timeout
    seen, last_run = None, 0.0
    while time.time() < deadline:
        state = [(r.id, r.status, round(r.progress, 2), r.message) for r in store.list_runs(limit=5)]
        if state != seen or time.time() - last_run >= fallback:
            seen, last_run = state, time.time()
            at.run()
            assert not at.exception, at.exception
            if condition(at):
                return at
        time.sleep(0.2)
    runs = [(r.id, r.kind, r.status, r.message, r.error) for r in store.list_runs(limit=5)]
    raise AssertionError(f"the page never reached the expected state; errors on the page: "
                         f"{[e.value for e in at.error]}; latest runs: {runs}")


def _store_of_env():
    from probe_core.runs.workspace import Workspace, default_workspace_path

    return Workspace(default_workspace_path()).store


PLUGIN_HEADER = """
import torch
from torch import nn
class_names = [str(i) for i in range(10)]
input_shape = (1, 8, 8)
"""


class TinyDecoder(torch.nn.Module):
    """A generator small enough to check by hand: latent (B, 2) -> sigmoid(linear) images (B, 1, 4, 4).

    Its weights are drawn from ``seed`` (the global RNG is left as it was)."""

    latent_dim = 2

    def __init__(self, seed: int = 0):
        super().__init__()
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            self.fc = torch.nn.Linear(2, 16)

    def decode(self, z):
        return torch.sigmoid(self.fc(z)).view(-1, 1, 4, 4)


def write_plugin(folder: Path, body: str, name: str = "plugin.py") -> Path:
    """A plugin file: imports, ten digit class names and an 8x8 input shape, then ``body``."""
    path = Path(folder) / name
    path.write_text(PLUGIN_HEADER + textwrap.dedent(body))
    return path


def stopped_shard(models, reporter):
    """A shard function whose run was stopped while it worked (its reporter raised)."""
    from probe_core.errors import CancelledError

    raise CancelledError("stopped")


def echo_shard(models, reporter, value):
    """A shard function (probe_core.runs.scaleout) that reports half-way and returns its value."""
    reporter.report(0.5)
    return value


def resolve_elsewhere(workspace_root, references: dict) -> str:
    """Resolve stored ``dataset``, ``classifier`` and ``generator`` references in a new Python process (as a
    worker or another day would): prints the data set's class count and the two model ids."""
    import json
    import subprocess
    import sys

    script = ("import json, sys\nfrom probe_core.api import open_workspace\nfrom probe_core.catalog import load_dataset\n"
              "root, refs = sys.argv[1], json.loads(sys.argv[2])\nspace = open_workspace(root)\n"
              "data = load_dataset(refs['dataset'])\n"
              "print(len(data.class_names), *(space.registry.resolve(refs[k], k, refs['dataset']).id "
              "for k in ('classifier', 'generator')))")
    done = subprocess.run([sys.executable, "-c", script, str(workspace_root), json.dumps(references)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


TOY_TARGET_KIND = '''
"""A toy target kind, the whole of it in one file: low confidence in a class."""
from dataclasses import dataclass
from typing import ClassVar

import torch

from probe_core.data.classes import class_index
from probe_core.sampling.targets import SpecKind, SpecPart, Target, spec_kind, spec_name


@dataclass(frozen=True)
class LowTarget(Target):
    kind: ClassVar[str] = "low"

    def observed(self):
        return torch.tensor([0.0])

    def statistics(self, probs):
        return probs[:, self.classes[0]:self.classes[0] + 1]

    def is_hit(self, probs):
        return probs[:, self.classes[0]] <= 0.1

    def soft_label(self):
        label = torch.ones(self.num_classes)
        label[self.classes[0]] = 0.0
        return label / label.sum()

    def describe(self, class_names=None):
        return f"low confidence in {class_names[self.classes[0]] if class_names else self.classes[0]}"


@spec_kind
class LowKind(SpecKind):
    name, syntax, label = "low", "low:C", "Low confidence"

    @classmethod
    def make(cls, c, class_names):
        target = LowTarget((c,), len(class_names), (), f"low:{spec_name(c, class_names)}")
        return SpecPart(cls.name, target.spec, (c,), (target,))

    @classmethod
    def parse(cls, argument, class_names):
        return cls.make(class_index(argument, class_names), class_names)
'''


@contextlib.contextmanager
def toy_target_kind(folder):
    """A toy target kind (``low:C``, low confidence in C) written whole in one module under ``folder`` and
    imported, as a user's own kind would be; unregistered on exit."""
    import importlib.util

    from probe_core.sampling.targets import SPEC_KINDS

    path = Path(folder) / "toy_kind.py"
    path.write_text(TOY_TARGET_KIND)
    module_spec = importlib.util.spec_from_file_location("toy_kind", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    try:
        yield module
    finally:
        SPEC_KINDS.pop("low", None)


def claim_group(tmp_path_factory, group: str) -> None:
    """Record that this worker builds ``group``'s shared fixture, and fail if another worker of the same run did.

    The claim lives in the run's shared temporary root (the parent of every worker's base temp), named by the
    run's id, so a second worker building the same group is a failure of the grouping, not of the test.
    """
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        return
    claims = tmp_path_factory.getbasetemp().parent / f"group-claims-{os.environ.get('PYTEST_XDIST_TESTRUNUID', '')}"
    claims.mkdir(exist_ok=True)
    claim = claims / group
    try:
        with open(claim, "x") as handle:
            handle.write(worker)
    except FileExistsError:
        owner = claim.read_text()
        if owner and owner != worker:
            pytest.fail(f"group {group!r} is built on two xdist workers ({owner} and {worker}): "
                        "--dist loadgroup did not keep it on one (see tests/conftest.py)")


def shown(markdown: str) -> str:
    """What a person reads in a message's Markdown body: the pages escape quoted input (``pages.ui.text.plain``),
    so AppTest's ``value`` holds ``\\(`` where the page shows ``(``."""
    import re

    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", markdown)


def load_linked_files(at, kinds: int = 2):
    """Press the page's Load button for each file a link named (``pages.ui.session.linked_file_card``), as an
    admin who knows the files does; returns the AppTest."""
    for _ in range(kinds):
        load = [button for button in at.button if button.label == "Load it"]
        if not load:
            break
        load[0].click().run()
    return at


def probe_here(argv: list[str], stdin: str = ""):
    """Run the ``probe`` command in this process, as a subprocess would run ``python -m probe_core.cli``, without
    its seconds of imports: returns a ``subprocess.CompletedProcess`` (exit code, stdout, stderr). ``stdin`` is
    what a script pipes in (not a terminal). The environment the command sets (``--workspace``'s data cache) is
    put back afterwards."""
    import io
    import subprocess
    from unittest import mock

    from probe_core.cli import main

    out, err = io.StringIO(), io.StringIO()
    previous_stdin, sys.stdin = sys.stdin, io.StringIO(stdin)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), mock.patch.dict(os.environ):
            try:
                code = main(argv)
            except SystemExit as exit_:  # argparse's usage errors
                code = exit_.code if isinstance(exit_.code, int) else 1
    finally:
        sys.stdin = previous_stdin
    return subprocess.CompletedProcess(["probe", *argv], code, out.getvalue(), err.getvalue())


def recording(reports: list, stop_when=None):
    """A :class:`~probe_core.progress.Reporter` that appends each report to ``reports`` as a namespace of its
    ``progress``, ``message`` and details (``reports[-1].epoch``), and once ``stop_when(report)`` says so raises
    :class:`~probe_core.errors.CancelledError` as a stopped run's reporter does (and says a stop was requested)."""
    from types import SimpleNamespace

    from probe_core.errors import CancelledError
    from probe_core.progress import CallbackReporter

    stopped = []

    def on_report(progress, message, details) -> None:
        report = SimpleNamespace(progress=progress, message=message, **(details or {}))
        reports.append(report)
        if stop_when is not None and stop_when(report):
            stopped.append(True)
            raise CancelledError("stopped")

    return CallbackReporter(on_report, lambda: bool(stopped))
