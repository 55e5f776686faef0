"""Progress bars for people waiting on training and runs: a tqdm bar in a terminal, a widget in a notebook.

The CLI and the Python API (:mod:`probe_core.api`) use these; the dashboard reads progress from the
runs table instead.
"""

from __future__ import annotations

import sys

from probe_core.data import split_view
from probe_core.data.files import is_file_reference
from probe_core.models.registry import MIN_TRAINING_STEPS


def _tqdm():
    from tqdm.auto import tqdm  # a notebook widget under Jupyter, a text bar elsewhere

    return tqdm


def announce_training(spec, model_id: str):
    """Say on stderr which model is trained now and why, and return a progress bar for it.

    A :data:`~probe_core.models.registry.TrainingAnnouncer`.
    """
    sized = ("; epochs chosen by the data's size" if is_file_reference(split_view(spec.dataset)[0])
             and spec.kind in MIN_TRAINING_STEPS else "")
    print(f"{model_id} is not in the workspace yet: training it ({spec.kind} on {spec.dataset_view()}: "
          f"{spec.describe_recipe()}{sized})", file=sys.stderr)
    return progress_bar(f"{spec.kind} on {spec.dataset_view()}")


def progress_bar(description: str):
    """A training progress callback that draws one bar over the epochs."""
    bar = {"bar": None}

    def update(progress) -> None:
        if bar["bar"] is None:
            bar["bar"] = _tqdm()(total=progress.epochs, desc=description, unit="epoch", file=sys.stderr)
        bar["bar"].set_postfix(loss=f"{progress.loss:.4g}", **{progress.metric_name: f"{progress.metric:.4g}"})
        bar["bar"].update(progress.epoch - bar["bar"].n)
        if progress.epoch == progress.epochs:
            bar["bar"].close()

    return update


def job_progress_bar(description: str):
    """``(bar, listener)``: a bar driven by a run's progress reports (fractions in [0, 1] and messages)."""
    bar = _tqdm()(total=1000, desc=description, file=sys.stderr, bar_format="{l_bar}{bar}| {elapsed} {postfix}")

    def listener(progress, message) -> None:
        if progress is not None:
            bar.update(int(progress * 1000) - bar.n)
        if message:
            bar.set_postfix_str(message, refresh=False)

    return bar, listener
