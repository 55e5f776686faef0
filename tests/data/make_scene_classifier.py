"""Train the zoo's ``scenes`` classifier with the zoo's own recipe and ship its weights for the tests.

Training takes about 4 minutes on 2 cores, too long for every test session, so the weights
are kept in ``tests/data/scenes-classifier.pt``. Run this after changing the renderer, the
scene prior, the data set or ``CountingClassifier``::

    .venv/bin/python tests/data/make_scene_classifier.py
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from probe_core.models import ModelSpec  # noqa: E402
from probe_core.workspace import Workspace  # noqa: E402


def main() -> None:
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as folder:
        workspace = Workspace(folder)
        model = workspace.registry.get_or_train(
            ModelSpec(dataset="scenes", kind="classifier"),
            progress=lambda p: print(f"epoch {p.epoch}/{p.epochs} loss {p.loss:.3f} "
                                     f"{p.metric_name} {p.metric:.3f}", flush=True))
        shutil.copy(model.record["path"], Path(__file__).with_name("scenes-classifier.pt"))
        print(f"{model.id}: {model.metrics}")


if __name__ == "__main__":
    main()
