"""The 2-D failure map of a distillation run as a background run: its request and its job (UMAP, cached in the
workspace; :func:`probe_core.defuse.review.embedding`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from probe_core.defuse.results import DISTILL, EMBEDDING, EmbeddingResult
from probe_core.defuse.review import embedding
from probe_core.runs.lifecycle import JobContext, JobFunction, job_of, run_kind, submit
from probe_core.runs.requests import BuiltFromSettings, checked_run_id


@run_kind(EmbeddingResult)
@dataclass(frozen=True)
class EmbeddingRequest(BuiltFromSettings):
    """The 2-D failure map of a distillation run (UMAP, cached in the workspace)."""

    kind: ClassVar[str] = EMBEDDING
    follows_run: ClassVar[tuple[str, str]] = ("distill_run", DISTILL)  # build() requires that distillation run

    distill_run: int

    def check_values(self) -> None:
        object.__setattr__(self, "distill_run", checked_run_id(self.distill_run, "the distillation run to map"))


def submit_embedding(manager, registry, distill_run: int) -> int:
    """Compute (and cache) a distillation run's failure map in the background."""
    return submit(manager, EmbeddingRequest.build(registry, distill_run=distill_run), registry.data_dir)


@job_of(EmbeddingRequest)
def embedding_job(registry, request: EmbeddingRequest, device: str = "cpu") -> JobFunction:
    """:func:`embedding` as a job (its result is cached in the workspace)."""

    def run(context: JobContext) -> EmbeddingResult:
        context.report(0.05, "fitting UMAP", force=True)
        return EmbeddingResult(points=len(embedding(registry, context.store, request.distill_run)["failure_xy"]),
                               distill_run=request.distill_run)

    return run
