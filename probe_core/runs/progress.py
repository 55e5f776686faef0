"""Progress bars for people waiting on training and runs: a tqdm bar in a terminal, a widget in a notebook.

The CLI and the Python API (:mod:`probe_core.api`) use these; the dashboard reads progress from the
runs table instead.
"""

from __future__ import annotations

import sys

from probe_core.data import split_view
from probe_core.data.files import is_file_reference
from probe_core.models.recipes import MIN_TRAINING_STEPS


def _tqdm():
    from tqdm.auto import tqdm  # a notebook widget under Jupyter, a text bar elsewhere

    return tqdm


def say_training(spec, model_id: str, where: str = "") -> None:
    """Say on stderr which model is trained now and why: its recipe (``spec`` resolved) and, for a data set the
    user named, that its size chose the epochs; ``where`` is added as is (" with the ray executor")."""
    sized = ("; epochs chosen by the data's size" if is_file_reference(split_view(spec.dataset)[0])
             and spec.kind in MIN_TRAINING_STEPS else "")
    print(f"{model_id} is not in the workspace yet: training it ({spec.kind} on {spec.dataset_view()}: "
          f"{spec.describe_recipe()}{sized}){where}", file=sys.stderr)


def announce_training(spec, model_id: str):
    """:func:`say_training`, then return a progress bar for the model.

    A :data:`~probe_core.models.registry.TrainingAnnouncer`.
    """
    say_training(spec, model_id)
    return progress_bar(f"{spec.kind} on {spec.dataset_view()}")


class ProgressBar:
    """A :class:`~probe_core.progress.Reporter` drawing one bar over progress from 0 to 1 with the latest message
    beside it (a widget in a notebook, a line in a terminal); it never asks to stop. The bar appears with the first
    report and closes with a forced report at 1 (a training's last epoch) or :meth:`close`."""

    def __init__(self, description: str) -> None:
        self.description = description
        self._bar = None
        self._closed = False

    def report(self, progress: float | None = None, message: str | None = None, details: dict | None = None,
               force: bool = False) -> None:
        if self._closed:
            return
        if self._bar is None:
            self._bar = _tqdm()(total=1000, desc=self.description, file=sys.stderr,
                                bar_format="{l_bar}{bar}| {elapsed} {postfix}")
        if message:
            self._bar.set_postfix_str(message, refresh=False)
        if progress is not None:
            self._bar.update(int(min(max(progress, 0.0), 1.0) * 1000) - self._bar.n)
        if force and progress is not None and progress >= 1.0:
            self.close()

    def stop_requested(self) -> bool:
        return False

    def close(self) -> None:
        if self._bar is not None and not self._closed:
            self._bar.close()
        self._closed = True


def progress_bar(description: str) -> ProgressBar:
    """A :class:`ProgressBar` for one training or run."""
    return ProgressBar(description)
