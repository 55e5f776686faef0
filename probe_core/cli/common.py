"""What every command group shares: the workspace from the global options, progress bars, tables.

Kept small on purpose: a command group imports from here, never from another group.
"""

from __future__ import annotations

import argparse
import sys

from probe_core.export import format_table  # noqa: F401  (re-exported for the command groups)


def workspace_from_args(args: argparse.Namespace):
    from probe_core.workspace import Workspace

    return Workspace(args.workspace, data_dir=args.data_dir, on_training=announce_training)


def announce_training(spec, model_id: str):
    """Say on stderr which model is trained now and why, and return a progress bar for it."""
    from probe_core.data import split_view
    from probe_core.data.files import is_file_reference
    from probe_core.models.registry import MIN_TRAINING_STEPS

    sized = (f"; epochs chosen by the data's size, for at least {MIN_TRAINING_STEPS[spec.kind]} optimisation steps"
             if is_file_reference(split_view(spec.dataset)[0]) and spec.kind in MIN_TRAINING_STEPS else "")
    print(f"{model_id} is not in the workspace yet: training it ({spec.kind} on {spec.dataset_view()}, "
          f"{spec.epochs} epochs{sized})", file=sys.stderr)
    return progress_bar(f"{spec.kind} on {spec.dataset_view()}")



def format_metrics(metrics: dict) -> str:
    """Short human form of a model's metrics."""
    parts = []
    if "test_accuracy" in metrics:
        parts.append(f"test acc {metrics['test_accuracy'] * 100:.1f}%")
    if "test_elbo" in metrics:
        parts.append(f"ELBO {metrics['test_elbo']:.1f}")
    if "test_reconstruction_mse" in metrics:
        parts.append(f"recon MSE {metrics['test_reconstruction_mse']:.4f}")
    if "fd_classifier_features" in metrics:
        parts.append(f"FD-clf {metrics['fd_classifier_features']:.1f}")
    return ", ".join(parts)



def progress_bar(description: str):
    from tqdm import tqdm

    bar = {"bar": None}

    def update(progress) -> None:
        if bar["bar"] is None:
            bar["bar"] = tqdm(total=progress.epochs, desc=description, unit="epoch", file=sys.stderr)
        bar["bar"].set_postfix(loss=f"{progress.loss:.4g}", **{progress.metric_name: f"{progress.metric:.4g}"})
        bar["bar"].update(progress.epoch - bar["bar"].n)
        if progress.epoch == progress.epochs:
            bar["bar"].close()

    return update





def job_progress_bar(description: str):
    """A tqdm bar driven by job progress reports (fractions in [0, 1])."""
    from tqdm import tqdm

    bar = tqdm(total=1000, desc=description, file=sys.stderr, bar_format="{l_bar}{bar}| {elapsed} {postfix}")

    def listener(progress, message) -> None:
        if progress is not None:
            bar.update(int(progress * 1000) - bar.n)
        if message:
            bar.set_postfix_str(message, refresh=False)

    return bar, listener
