"""What every command group shares: the workspace from the global options and the metrics line.

Kept small on purpose: a command group imports from here, never from another group.
"""

from __future__ import annotations

import argparse

from probe_core.runs.workspace import Workspace, open_workspace


def workspace_from_args(args: argparse.Namespace) -> Workspace:
    """The workspace the global ``--workspace`` and ``--data-dir`` name; its training shows a bar."""
    return open_workspace(args.workspace, args.data_dir)


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
