"""The Python API: what the CLI and the dashboard do, as functions that return result objects.

``import probe_core as mp`` and then ``mp.sample("ambiguous:4,9")``. Runs are stored in the workspace
(``$PROBE_WORKSPACE`` or ``./workspace`` unless ``workspace=`` is given), so the dashboard shows them.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from probe_core.data import DEFAULT_DATASET
from probe_core.errors import ProbeError
from probe_core.requests import SampleRequest


def open_workspace(workspace=None, data_dir: str | Path | None = None):
    """A :class:`~probe_core.workspace.Workspace` from a path (or the default one) whose training shows a bar."""
    from probe_core.progress import announce_training
    from probe_core.workspace import Workspace

    if isinstance(workspace, Workspace):
        return workspace
    return Workspace(workspace, data_dir=data_dir, on_training=announce_training)


@dataclass
class SampleResult:
    """A finished (or stopped) Bayes-TrEx run: its request, its per-target summaries and its stored samples.

    Attributes
    ----------
    run_id : int
        The run in the workspace (``probe runs show RUN``, the Probe page).
    request : SampleRequest
        What was run, as stored.
    status : str
        ``done``, ``cancelled`` or ``failed``.
    targets : list of dict
        Per target, in request order: ``spec``, ``description``, ``hit_rate``, ``failed`` and ``summary``
        (achieved confidences, ESS, R-hat, acceptance; see :func:`~probe_core.bayestrex.summary.summarise_target`).
    z : ndarray, shape (N, D)
        The stored latents (every ``keep_every``-th sample of every chain).
    images : ndarray, shape (N, C, H, W)
        Their decoded images, in [0, 1].
    confidences : ndarray, shape (N, K)
        The classifier's probabilities, in the data set's class order.
    target_index : ndarray of int, shape (N,)
        Which target each sample belongs to.
    chain : ndarray of int, shape (N,)
    hit : ndarray of bool, shape (N,)
        Whether the sample meets its target.
    generator_weak : bool
        The generator failed its check on the data: results about its samples are not to be trusted.
    """

    run_id: int
    request: SampleRequest
    status: str
    targets: list = field(default_factory=list)
    z: np.ndarray | None = None
    images: np.ndarray | None = None
    confidences: np.ndarray | None = None
    target_index: np.ndarray | None = None
    chain: np.ndarray | None = None
    hit: np.ndarray | None = None
    generator_weak: bool = False
    wall_seconds: float = 0.0

    @classmethod
    def from_run(cls, store, run_id: int) -> "SampleResult":
        """Read a stored sampling run back (in any process, on any day)."""
        from probe_core.export import sample_arrays
        from probe_core.runconfig import config_of

        run = store.get_run(run_id)
        request = None if run is None else config_of(run)
        if not isinstance(request, SampleRequest):
            raise ProbeError(f"run {run_id} is not a sampling run of this version")
        stored = store.get_samples(run_id)
        arrays = sample_arrays(stored) if stored else {}
        result = run.result or {}
        return cls(run_id, request, run.status, result.get("targets", []), **arrays,
                   generator_weak=bool(result.get("generator_weak")), wall_seconds=result.get("wall_seconds", 0.0))

    def summary(self) -> str:
        """The per-target table (paper Table 2 plus diagnostics), as the CLI prints it."""
        from probe_core.bayestrex import table2

        return table2({"targets": self.targets})

    def to_pandas(self):
        """One row per stored sample: ``target``, ``chain``, ``hit`` and one confidence column per class."""
        import pandas as pd

        if self.confidences is None:
            return pd.DataFrame(columns=["target", "chain", "hit", *self.request.class_names])
        frame = pd.DataFrame(self.confidences, columns=list(self.request.class_names))
        descriptions = [t["description"] for t in self.targets]
        frame.insert(0, "target", [descriptions[i] if i < len(descriptions) else str(i) for i in self.target_index])
        frame.insert(1, "chain", self.chain)
        frame.insert(2, "hit", self.hit)
        return frame

    def __repr__(self) -> str:
        reached = sum(not t.get("failed", True) for t in self.targets)
        weak = ", generator weak" if self.generator_weak else ""
        return (f"SampleResult(run {self.run_id}, {self.status}, {reached}/{len(self.targets)} targets reached, "
                f"{0 if self.z is None else len(self.z)} samples{weak})")


def sample(target: str, classifier: str = "default", generator: str = "default", *, dataset: str = DEFAULT_DATASET,
           class_map: str | None = None, workspace=None, device: str = "cpu", progress: bool = True,
           **settings) -> SampleResult:
    """Bayes-TrEx: sample in-distribution images at a target confidence; the run is stored in the workspace.

    Parameters
    ----------
    target : str
        ``high:3``, ``ambiguous:4,9``, ``uniform``, ``probs:8=0.7,9=0.3``, ``path:8->9:11`` or
        ``ambiguous-matrix``, in the classifier's class names (or indices).
    classifier, generator : str
        ``default`` (the data set's; trained first if missing, with a progress bar), a model id, a plugin
        ``.py`` or a model file (``.pt``/``.pt2`` with its ``.json`` sidecar).
    dataset : str
        ``digits``, ``mnist``, ``folder:PATH``, ``arrays:PATH.npz`` ...
    class_map : str, optional
        ``MODEL=DATA,...`` where the classifier's class names differ from the data set's.
    workspace : str, Path or Workspace, optional
    **settings
        The request's settings, with these defaults (:class:`~probe_core.requests.SampleRequest`; the
        ambiguity matrix has its own): chains=64, warmup=300, samples=300, sigma=0.05, sampler="hmc",
        seed=0, keep_every=1, anneal_sigma_from="auto", executor="local", shards=1, independence_moves=0.

    Returns
    -------
    SampleResult

    Raises
    ------
    ProbeError
        For any setting, model or target the run cannot use, before anything is trained or stored.
    """
    from probe_core.bayestrex.recipes import prepare_sample
    from probe_core.progress import job_progress_bar
    from probe_core.lifecycle import run_now
    from probe_core.validation import sample_request

    space = open_workspace(workspace)
    request = sample_request(space.registry, dataset, target, classifier, generator, class_map=class_map, **settings)
    request, warning = prepare_sample(space.registry, request, device)
    if warning:
        warnings.warn(warning, stacklevel=2)
    bar, listener = job_progress_bar("sampling") if progress else (None, None)
    try:
        run_id, _ = run_now(space.registry, request, listener)
    finally:
        if bar is not None:
            bar.close()
    return SampleResult.from_run(space.store, run_id)
