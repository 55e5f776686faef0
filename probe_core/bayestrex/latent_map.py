"""Where a run's hits lie in the latent space (Bayes-Probe Fig. 5): a 2-D map of the hits among draws of
the prior p(z) = N(0, I), computed as a job and cached with the run.

Hits spread over the prior's cloud are in-distribution; hits in a corner, or outside the cloud, come
from a corner of the generator the prior rarely visits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from probe_core.bayestrex.queries import nearest_training_images
from probe_core.bayestrex.results import LATENT_MAP, LatentMapResult, SamplingResult
from probe_core.bayestrex.summary import best_samples, summary_rows
from probe_core.reporting.embedding import embed_2d
from probe_core.errors import ProbeError
from probe_core.mcmc.diagnostics import POOR_MIXING_NOTE, mixing_ok
from probe_core.reporting.reports import MAP_COLOURS, html_report, scatter_svg
from probe_core.runs.lifecycle import JobContext, JobFunction, job_of, run_kind, submit
from probe_core.runs.requests import BuiltFromSettings, checked_run_id

ARRAYS = "latent-map"


def stored_latent_map(store, run_id: int) -> dict[str, np.ndarray] | None:
    """The run's map as :func:`latent_map` stored it; None when it has not been computed (nothing is computed here)."""
    return store.get_arrays(run_id, ARRAYS)


def latent_map(store, run_id: int, prior_points: int = 1000, max_hits: int = 2000, seed: int = 0) -> dict:
    """The 2-D map of a sampling run's hits and ``prior_points`` prior draws, computed once and cached.

    Returns arrays ``prior_xy`` (P, 2), ``hits_xy`` (H, 2), ``hits_target`` (H,) the target index of
    each hit, and ``hits_norm`` (H,) each hit's ‖z‖. At most ``max_hits`` hits are mapped (evenly
    spread over the run).

    Raises
    ------
    ProbeError
        If the run stored no hits, or its codes are not Gaussian latents (a scene renderer's).
    """
    cached = stored_latent_map(store, run_id)
    if cached is not None:
        return cached
    run = store.get_run(run_id)
    if run is None:
        raise ProbeError(f"no run {run_id}")
    hits = [s for s in store.get_samples(run_id) if s["hit"]]
    if not hits:
        raise ProbeError(f"run {run_id} stored no hits to map")
    if len(hits) > max_hits:
        hits = [hits[i] for i in np.linspace(0, len(hits) - 1, max_hits).round().astype(int)]
    codes = np.stack([s["z"] for s in hits]).astype(np.float32)
    if codes.ndim != 2:
        raise ProbeError("the latent map needs flat Gaussian codes; this run's generator has its own structure")
    prior = np.random.default_rng(seed).standard_normal((prior_points, codes.shape[1])).astype(np.float32)
    xy = embed_2d(np.concatenate([prior, codes]), max_fit=len(prior) + len(codes), seed=seed)
    result = {"prior_xy": xy[:prior_points], "hits_xy": xy[prior_points:],
              "hits_target": np.array([s["target_index"] for s in hits]),
              "hits_norm": np.linalg.norm(codes, axis=1)}
    store.put_arrays(run_id, ARRAYS, result)
    return result


@run_kind(LatentMapResult)
@dataclass(frozen=True)
class LatentMapRequest(BuiltFromSettings):
    """Map a finished sampling run's hits among prior draws (cached with that run)."""

    kind: ClassVar[str] = LATENT_MAP
    follows_run: ClassVar[tuple[str, str]] = ("run", SamplingResult.kind)  # build() requires that sampling run

    run: int

    def check_values(self) -> None:
        object.__setattr__(self, "run", checked_run_id(self.run, "the sampling run to map"))


@job_of(LatentMapRequest)
def latent_map_job(registry, request: LatentMapRequest, device: str = "cpu") -> JobFunction:
    """:func:`latent_map` as a job (the UMAP fit takes seconds; its result is cached with the run)."""

    def run(context: JobContext) -> LatentMapResult:
        context.report(0.05, "fitting UMAP", force=True)
        return LatentMapResult(hits=len(latent_map(context.store, request.run)["hits_xy"]), run=request.run)

    return run


def submit_latent_map(manager, registry, run_id: int) -> int:
    """Compute (and cache) a sampling run's latent map in the background; returns the job's run id."""
    return submit(manager, LatentMapRequest.build(registry, run=run_id), registry.data_dir)


def latent_map_figure(mapped: dict, descriptions: list[str]) -> str:
    """The map as an inline SVG (for the HTML report): prior draws in grey, each target's hits in a colour."""
    groups = [("prior draws", mapped["prior_xy"], "#b0b0b0")]
    for index, description in enumerate(descriptions):
        chosen = mapped["hits_target"] == index
        if chosen.any():
            groups.append((f"hits: {description}", mapped["hits_xy"][chosen], MAP_COLOURS[index % len(MAP_COLOURS)]))
    return scatter_svg(groups)


def sampling_report(store, run_id: int, target_index: int | None = None, with_map: bool = True,
                    dataset=None) -> str:
    """The one-page HTML report of a finished sampling run (the Probe page's download, ``probe report``).

    Settings, the Table 2 summary (with the share of hits that are near copies of a training image), the hits (or
    closest samples) of one target or of each, with ``dataset`` (the run's, loaded) each beside its nearest training
    image, and the latent map when it has been computed (``with_map``; see :func:`latent_map`).
    """
    import torch

    run = store.get_run(run_id)
    if run is None or run.kind != SamplingResult.kind or not run.result:
        raise ProbeError(f"run {run_id} is not a finished sampling run")
    result = SamplingResult.from_record(run.result)
    descriptions = [t["description"] for t in result.targets]
    stored = store.get_samples(run_id)
    galleries = []
    for index in range(len(descriptions)) if target_index is None else [target_index]:
        rows = [s for s in stored if s["target_index"] == index and s["image"] is not None]
        if rows:
            shown = best_samples(rows, hits_limit=40, misses_limit=16)
            kind = "hits" if any(s["hit"] for s in rows) else "closest samples"
            galleries.append((f"{descriptions[index]}: {kind}", torch.tensor(np.stack([s["image"] for s in shown]))))
            if dataset is not None:
                nearest = nearest_training_images(dataset, shown, run.config.get("class_names") or dataset.class_names)
                placed = nearest["provenance"]
                galleries.append((f"{descriptions[index]}: the nearest training image of each, in the same order "
                                  f"({int(placed.near_copy.sum())} of {len(placed)} are near copies)",
                                  nearest["images"]))
    mapped = store.get_arrays(run_id, ARRAYS) if with_map else None
    figures = [] if mapped is None else [(
        "Where the hits are among draws of the prior (UMAP of latent codes, Bayes-Probe Fig. 5)",
        latent_map_figure(mapped, descriptions))]
    notes = POOR_MIXING_NOTE if any(not mixing_ok(e["summary"]) for e in result.targets) else ""
    if result.generator_weak:  # a result the tool cannot vouch for says so wherever it is shown
        notes = f"Warning: {result.generator_warning} {notes}".strip()
    for line in result.provenance_warnings:
        notes = f"Warning: {line}. {notes}".strip()
    return html_report(f"Bayes-TrEx run {run_id}: {run.config.get('target', run.config.get('recipe', ''))}",
                       dict(run.config), summary_rows(result.targets), galleries, notes=notes, figures=figures)
