"""Training zoo models as a job: per-model progress in the run's details, for the pages to draw."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from probe_core.catalog import load_dataset
from probe_core.data import DEFAULT_DATASET
from probe_core.errors import ProbeError
from probe_core.models.registry import ModelSpec
from probe_core.models.training import EPOCH_DETAILS
from probe_core.progress import rewritten
from probe_core.runs.lifecycle import JobContext, JobFunction, StoredResult, job_of, run_kind, submit
from probe_core.runs.requests import BuiltFromSettings


@dataclass(frozen=True)
class TrainingResult(StoredResult):
    """The zoo models a training run made sure of (trained, or already there), by id in order."""

    kind: ClassVar[str] = "train"

    models: list[str]


@run_kind(TrainingResult)
@dataclass(frozen=True)
class TrainRequest(BuiltFromSettings):
    """Training zoo models in order: ``specs`` are :class:`~probe_core.models.ModelSpec` fields as dicts.

    ``purpose`` says why (``defaults`` of ``dataset``, or ``custom``); two configs with the same
    fields are the same training, so a second tab asking for it joins the first.
    """

    kind: ClassVar[str] = TrainingResult.kind

    dataset: str
    specs: tuple[dict, ...]
    purpose: str = "custom"
    device: str = "cpu"

    def __post_init__(self) -> None:
        """Checks the request however it is made (:meth:`build`, read back from a stored run, or directly): a
        purpose, at least one spec, and each spec a :class:`ModelSpec` (kept as its fields' dict)."""
        if not isinstance(self.purpose, str) or not self.purpose.strip():
            raise ProbeError("say why the models are trained (a purpose such as 'defaults' or 'custom')")
        if isinstance(self.specs, (str, bytes, dict, ModelSpec)):
            raise ProbeError("specs is a sequence of model specs, not one")
        checked = []
        for spec in tuple(self.specs):
            if isinstance(spec, dict):
                try:
                    spec = ModelSpec(**spec)
                except TypeError as exc:
                    raise ProbeError(f"not a model spec: {exc}") from None
            if not isinstance(spec, ModelSpec):
                raise ProbeError(f"not a model spec: {type(spec).__name__}")
            checked.append(dataclasses.asdict(spec))
        if not checked:
            raise ProbeError("nothing to train: give at least one model spec")
        object.__setattr__(self, "specs", tuple(checked))
        object.__setattr__(self, "device", str(self.device))

    @classmethod
    def build(cls, registry, *, dataset: str, specs, purpose: str = "custom",
              device: str = "cpu") -> "TrainRequest":
        """The one way to make a training request: every spec is checked as a :class:`ModelSpec` when the request
        is made (:meth:`__post_init__`), before a run is stored; the job trusts them.

        Parameters
        ----------
        registry : ModelRegistry
            The workspace the models are trained into (nothing of it is needed before the run).
        dataset : str
            The data set the run is for (its page and its defaults).
        specs : iterable of ModelSpec or dict
            What to train, in order; dicts are ModelSpec fields.
        purpose : str
            Why, as a label (``defaults`` of ``dataset``, ``custom``, a script's own word).

        Raises
        ------
        ProbeError
            For no spec, a spec that is not a model spec, or an empty purpose.
        """
        return cls(dataset, specs, purpose, device)


@job_of(TrainRequest)
def training_job(registry, request: TrainRequest, device: str | None = None) -> JobFunction:
    """A job training the request's :class:`ModelSpec` list in order, with per-model progress, on the request's
    device (``device`` is the starter's, used only where the request names none).

    ``details["models"]`` maps each model id to ``{"kind", "status", "fraction",
    "epoch", "epochs", "loss", "metric_name", "metric"}`` for the page to draw.
    """
    specs = [ModelSpec(**s) for s in request.specs]  # the request keeps each spec as its fields' dict
    device = request.device or device or "cpu"

    def run(context: JobContext) -> TrainingResult:
        resolved = [s.resolved(load_dataset(s.dataset_view(), registry.data_dir)) for s in specs]
        models = {
            s.model_id(): {"kind": s.kind, "status": "done" if registry.exists(s.model_id()) else "waiting",
                           "fraction": 1.0 if registry.exists(s.model_id()) else 0.0}
            for s in resolved
        }
        context.report(0.0, "starting", {"models": models}, force=True)
        for position, spec in enumerate(resolved):
            model_id = spec.model_id()
            if models[model_id]["status"] == "done":
                continue
            models[model_id]["status"] = "training"

            def as_model_of_run(fraction, message, epoch, force, model_id=model_id, position=position):
                if fraction is None or epoch is None or "epoch" not in epoch:
                    return (None if fraction is None else
                            ((position + fraction) / len(resolved), message, {"models": models}, force))
                models[model_id].update(fraction=fraction, **{name: epoch[name] for name in EPOCH_DETAILS})
                return ((position + fraction) / len(resolved),
                        f"training {model_id}: epoch {epoch['epoch']}/{epoch['epochs']}", {"models": models}, force)

            loaded = registry.get_or_train(spec, rewritten(context, as_model_of_run), device=device)
            models[model_id].update(status="done", fraction=1.0, metrics=loaded.metrics)
            context.report((position + 1) / len(resolved), f"trained {model_id}", {"models": models}, force=True)
        return TrainingResult(list(models))

    return run


def submit_training(manager, registry, specs: list, dataset: str, purpose: str = "custom",
                    device: str = "cpu") -> int:
    """Train :class:`~probe_core.models.ModelSpec` s in the background; a second identical request joins the first."""
    return submit(manager, TrainRequest.build(registry, dataset=dataset, specs=specs, purpose=purpose, device=device),
                  registry.data_dir, dedupe=True)


def start_default_training(manager, registry, dataset: str = DEFAULT_DATASET, device: str = "cpu") -> int | None:
    """Start training a data set's missing default models; returns the run id, or None if all exist."""
    if not registry.missing_defaults(dataset):
        return None
    return submit_training(manager, registry, registry.default_specs(dataset), dataset, "defaults", device)
