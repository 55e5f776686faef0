"""Defuse's distillation step as a stored run: its request (:class:`DistillRequest`) and its job (a Dirichlet-process
Gaussian mixture over the identification run's failure codes; :mod:`probe_core.defuse.cluster`)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import ClassVar

from probe_core.defuse.cluster import FailureClusterer, describe_clusters, projection_for, review_tau
from probe_core.defuse.queries import failures_of, run_models
from probe_core.defuse.identification import DEFAULT_JUDGE_SURE
from probe_core.defuse.results import DISTILL, IDENTIFY, DistillationResult
from probe_core.defuse.review import judge_regions
from probe_core.runs.history import require_run
from probe_core.runs.lifecycle import JobContext, JobFunction, job_of, run_kind
from probe_core.runs.requests import BuiltFromSettings


@run_kind(DistillationResult)
@dataclass(frozen=True)
class DistillRequest(BuiltFromSettings):
    """Distillation settings; see :class:`FailureClusterer`. ``tau`` scales review and correction samples'
    covariance; None chooses it from the data's image size when the run starts (:func:`review_tau`: the papers'
    0.01 on colour images of 32x32 and up) and the result records it. ``projection_dim`` (0: none) is chosen
    likewise when None, from the code size (:func:`projection_for`). ``class_share`` (0: the weight threshold alone,
    as the papers) also keeps a light cluster that holds that share of one class's failures."""

    setting_word: ClassVar[str] = "distillation"
    ranges: ClassVar[dict] = {"n_components": (1, 1000), "weight_threshold": (0.0, 0.99),
                              "max_samples": (2, 1_000_000), "tau": (0.001, 10.0),
                              "projection_dim": (0, 100_000), "class_share": (0.0, 1.0)}
    kind: ClassVar[str] = DISTILL
    follows_run: ClassVar[tuple[str, str]] = ("identify_run", IDENTIFY)

    identify_run: int
    n_components: int = 100
    weight_threshold: float = 0.01
    max_samples: int = 10_000
    tau: float | None = None
    seed: int = 0
    projection_dim: int | None = None
    class_share: float = 0.0


@job_of(DistillRequest)
def distill_job(registry, settings: DistillRequest, device: str = "cpu") -> JobFunction:
    """Distillation as a job: clusters to the store with their description and review statistics."""

    def run(context: JobContext) -> DistillationResult:
        started = time.perf_counter()
        store = context.store
        require_run(store, settings.identify_run, IDENTIFY)
        failures = failures_of(store, settings.identify_run)
        tau = settings.tau if settings.tau is not None else review_tau(failures.images.shape[1:])
        projection_dim = (settings.projection_dim if settings.projection_dim is not None
                          else projection_for(failures.latents.shape[1]))
        context.report(0.05, f"clustering {len(failures)} failures", force=True)
        clusterer = FailureClusterer(n_components=settings.n_components, weight_threshold=settings.weight_threshold,
                                     max_samples=settings.max_samples, random_state=settings.seed,
                                     projection_dim=projection_dim or None, class_share=settings.class_share or None)
        clusterer.fit(failures.latents, failures.true_labels)
        context.report(0.8, f"{clusterer.n_clusters_} clusters kept", force=True)
        # a kept component that wins no failure has nothing to show or label
        described = [d for d in describe_clusters(clusterer, failures.predictions, failures.true_labels) if d["size"]]
        store.add_clusters(context.run_id, [
            {"cluster_index": d["cluster_index"], "weight": d["weight"], "size": d["size"], "mean": d["mean"],
             "covariance": d["covariance"],
             "info": {k: d[k] for k in ("component", "majority_prediction", "prediction_share",
                                        "majority_true_label", "true_label_share")}}
            for d in described
        ])
        store.put_arrays(context.run_id, "assignments", {"cluster_index": clusterer.labels_})
        identified = store.get_run(settings.identify_run).result or {}
        recognisable = None
        if identified.get("judge"):  # can a person tell what each region shows? its judge looks first
            context.report(0.9, "the judge looks at each region's review images", force=True)
            recognisable = judge_regions(registry, store, context.run_id, store.get_clusters(context.run_id), tau,
                                         identified["judge"], identified.get("judge_sure") or DEFAULT_JUDGE_SURE,
                                         device)
        return DistillationResult(
            recognisable_clusters=recognisable,
            **run_models(store, settings.identify_run), identify_run=settings.identify_run,
            failures=len(failures), clusters=len(described), converged=bool(clusterer.converged_),
            failures_in_kept_clusters=int((clusterer.labels_ >= 0).sum()),
            seconds=round(time.perf_counter() - started, 2), tau=tau, projection_dim=projection_dim,
            class_share=settings.class_share)

    return run
