"""Training zoo models as a job: per-model progress in the run's details, for the pages to draw."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, ClassVar

from probe_core.catalog import load_dataset
from probe_core.data import DEFAULT_DATASET, ImageDataset
from probe_core.errors import CancelledError, ProbeError
from probe_core.models.loaded import LoadedModel
from probe_core.models.recipes import train_spec
from probe_core.models.spec import ModelSpec
from probe_core.models.training import EPOCH_DETAILS
from probe_core.progress import Reporter, rewritten, stage
from probe_core.runs.lifecycle import JobContext, JobFunction, StoredResult, job_of, run_kind, submit
from probe_core.runs.requests import BuiltFromSettings
from probe_core.runs.scaleout import ShardTask, parse_executor


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
    fields are the same training, so a second tab asking for it joins the first. ``executor``
    (:mod:`probe_core.runs.scaleout`): ``local`` trains the models one after another in the run's process;
    ``ray`` or ``ray:ADDRESS`` trains them at once, one Ray task (one CPU, one thread) each, and stores each as it
    comes back (:func:`train_models`).
    """

    kind: ClassVar[str] = TrainingResult.kind

    dataset: str
    specs: tuple[dict, ...]
    purpose: str = "custom"
    device: str = "cpu"
    executor: str = "local"

    def check_values(self) -> None:
        """Checks the request when it is made from settings (:meth:`build`, or directly): a purpose, at least
        one spec, and each spec a :class:`ModelSpec` (kept as its fields' dict)."""
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
        parse_executor(self.executor)  # its form only: a stored run reads back where Ray is not installed
        object.__setattr__(self, "executor", (self.executor or "local").strip())

    @classmethod
    def build(cls, registry, *, dataset: str, specs, purpose: str = "custom",
              device: str = "cpu", executor: str = "local") -> "TrainRequest":
        """The one way to make a training request: every spec is checked as a :class:`ModelSpec` when the request
        is made (:meth:`check_values`), before a run is stored; the job trusts them.

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
        executor : str
            ``local`` (one model after another), ``ray`` or ``ray:ADDRESS`` (all at once).

        Raises
        ------
        ProbeError
            For no spec, a spec that is not a model spec, an empty purpose, or an unknown executor (whether Ray
            is installed is checked where the setting is given: the CLI, the sidebar).
        """
        return cls(dataset, specs, purpose, device, executor)


@job_of(TrainRequest)
def training_job(registry, request: TrainRequest, device: str | None = None) -> JobFunction:
    """A job training the request's :class:`ModelSpec` list through :func:`train_models` (in order, or all at once
    with a distributed executor), with per-model progress, on the request's device (``device`` is the starter's,
    used only where the request names none).

    ``details["models"]`` maps each model id to ``{"kind", "status", "fraction",
    "epoch", "epochs", "loss", "metric_name", "metric"}`` for the page to draw (epochs where the models train here,
    one after another).
    """
    specs = [ModelSpec(**s) for s in request.specs]  # the request keeps each spec as its fields' dict
    device = request.device or device or "cpu"
    one_at_a_time = not parse_executor(request.executor).distributed

    def run(context: JobContext) -> TrainingResult:
        resolved = [s.resolved(load_dataset(s.dataset_view(), registry.data_dir)) for s in specs]
        order = [s.model_id() for s in resolved]
        models = {
            model_id: {"kind": s.kind, "status": "done" if registry.exists(model_id) else "waiting",
                       "fraction": 1.0 if registry.exists(model_id) else 0.0}
            for model_id, s in zip(order, resolved)
        }
        context.report(0.0, "starting", {"models": models}, force=True)
        training: list[str] = []

        def started(model_id: str) -> None:
            models[model_id]["status"] = "training"
            training.append(model_id)

        def with_models(fraction, message, details, force):
            epoch = details or {}
            if one_at_a_time and training and "epoch" in epoch:  # the epochs of the one model training now
                models[training[-1]].update(fraction=epoch["epoch"] / max(epoch["epochs"], 1),
                                            **{name: epoch[name] for name in EPOCH_DETAILS})
                message = f"training {training[-1]}: epoch {epoch['epoch']}/{epoch['epochs']}"
            return fraction, message, {**({} if one_at_a_time else epoch), "models": models}, force

        def stored(model_id: str, metrics: dict) -> None:
            models[model_id].update(status="done", fraction=1.0, metrics=metrics)
            if one_at_a_time:
                context.report((order.index(model_id) + 1) / len(order), f"trained {model_id}", {"models": models},
                               force=True)

        train_models(registry, resolved, request.executor, rewritten(context, with_models), device, stored, started)
        return TrainingResult(list(models))

    return run


def train_shard(models: dict, reporter: Reporter, *, spec: dict, dataset: ImageDataset,
                device: str = "auto", feature_network=None) -> tuple:
    """A shard of :func:`train_models`: one zoo model trained, not stored, in whichever process the executor runs
    it (on its GPU where Ray gave it one); returns :func:`~probe_core.models.recipes.train_spec`'s module (on the
    CPU), record and metrics for the run's own process to store. ``models`` is unused (a training shard brings its
    data and a generator's stored feature network, not models)."""
    module, record, metrics = train_spec(ModelSpec(**spec), dataset, reporter, device, feature_network)
    return module.cpu(), record, metrics


def train_models(registry, specs, executor: str = "local", reporter: Reporter | None = None, device: str = "cpu",
                 on_stored: Callable[[str, dict], None] | None = None,
                 on_started: Callable[[str], None] | None = None) -> list[LoadedModel]:
    """Make sure every spec's model is stored, training the missing ones; returns them in the specs' order.

    ``local`` trains them one after another in this process (:meth:`~probe_core.models.ModelRegistry.get_or_train`).
    A distributed executor (``ray``, ``ray:ADDRESS``) trains all the missing ones at once, one shard each
    (:func:`train_shard`, with its data set as an argument, so a cluster's workers need no access to this
    workspace), and this process stores each model as it comes back, so a stop or a failed shard keeps the ones
    done. It is meant for a cluster, where each model trains on a machine of its own: on one machine of 2 cores two
    models trained at once, a thread each, took longer than one after another with both threads
    (``benchmarks/scale_out.py``, docs/scaling.md).

    Parameters
    ----------
    registry : ModelRegistry
    specs : iterable of ModelSpec
        Classifiers before generators where a generator's FD-clf should use a classifier of the same run: a
        generator stored before its data set's default classifier has none (the generator check measures it).
    executor : str
        ``local``, ``ray`` or ``ray:ADDRESS`` (:func:`~probe_core.runs.scaleout.parse_executor`).
    reporter : Reporter, optional
        Told the shards' progress (distributed) or each model's epochs as its share of the whole (local); None:
        local training announces each model as the registry does (:meth:`~probe_core.models.ModelRegistry.announcing`).
    on_stored : callable, optional
        ``on_stored(model_id, metrics)`` as each of the specs' models trained by this call is stored.
    on_started : callable, optional
        ``on_started(model_id)`` as each of the specs' missing models starts training (distributed: as its wave
        starts; a generator waits for its feature network's wave).

    Raises
    ------
    ProbeError
        When a model could not be trained (the others are stored), or the registry's actor may not train.
    CancelledError
        When the run was stopped (the models done so far are stored).
    """
    datasets: dict[str, ImageDataset] = {}

    def dataset_of(spec: ModelSpec) -> ImageDataset:
        if spec.dataset_view() not in datasets:
            datasets[spec.dataset_view()] = load_dataset(spec.dataset_view(), registry.data_dir)
        return datasets[spec.dataset_view()]

    resolved = [spec.resolved(dataset_of(spec)) for spec in specs]
    chosen = parse_executor(executor)
    if not chosen.distributed:
        loaded = []
        for index, spec in enumerate(resolved):
            missing = not registry.exists(spec.model_id())
            if missing and on_started is not None:
                on_started(spec.model_id())
            loaded.append(registry.get_or_train(spec, stage(reporter, index / len(resolved),
                                                            (index + 1) / len(resolved)), device=device))
            if missing and on_stored is not None:
                on_stored(spec.model_id(), loaded[-1].metrics)
        return loaded
    missing = {spec.model_id(): spec for spec in resolved if not registry.exists(spec.model_id())}
    if missing:
        registry.require_training()
        # a generator's feature network is a stored classifier of its own (ModelSpec.feature_network_spec): the
        # missing ones train in the first wave with the other models, the generators that need them in a second
        features = {model_id: spec.feature_network_spec() for model_id, spec in missing.items()}
        waiting = {model_id for model_id, feature in features.items()
                   if feature is not None and not registry.exists(feature.model_id())}
        first = {**{model_id: spec for model_id, spec in missing.items() if model_id not in waiting},
                 **{features[model_id].model_id(): features[model_id] for model_id in waiting}}
        share = len(first) / (len(first) + len(waiting))
        for wave, part in ((first, stage(reporter, 0.0, share)), ({k: missing[k] for k in waiting},
                                                                   stage(reporter, share, 1.0))):
            if wave:
                for model_id in wave:
                    if on_started is not None and model_id in missing:
                        on_started(model_id)
                _train_at_once(registry, chosen, list(wave.values()), dataset_of, part, device,
                               on_stored=lambda model_id, metrics: (on_stored(model_id, metrics)
                                                                    if on_stored and model_id in missing else None))
    return [registry.load(spec.model_id(), device) for spec in resolved]


def _train_at_once(registry, chosen, specs: list[ModelSpec], dataset_of, reporter, device, on_stored) -> None:
    """Train ``specs`` (resolved, missing) at once with the distributed executor ``chosen``, each generator with its
    stored feature network, and store each in this process as it comes back."""
    def arguments(spec: ModelSpec) -> dict:
        feature = spec.feature_network_spec()
        network = None if feature is None else registry.load(feature.model_id()).module.net.cpu()
        return {"spec": dataclasses.asdict(spec), "dataset": dataset_of(spec), "feature_network": network}

    tasks = [ShardTask(train_shard, arguments(spec), description=spec.model_id()) for spec in specs]

    def store(index: int, value: tuple) -> None:
        spec = specs[index]
        module, record, metrics = value
        registry.register_trained(spec, dataset_of(spec), module, record, metrics, device)
        on_stored(spec.model_id(), registry.load(spec.model_id()).metrics)

    outcome = chosen.map(tasks, store, reporter)
    if outcome.cancelled:
        raise CancelledError("training stopped; the models done so far are stored")
    if outcome.failed:
        not_done = "; ".join(f"{entry['covers']}: {entry['error']}" for entry in outcome.not_done(tasks))
        raise ProbeError(f"{len(outcome.failed)} of {len(tasks)} models could not be trained ({not_done}); "
                         f"the others are stored")


def submit_training(manager, registry, specs: list, dataset: str, purpose: str = "custom",
                    device: str = "cpu", executor: str = "local") -> int:
    """Train :class:`~probe_core.models.ModelSpec` s in the background; a second identical request joins the first."""
    return submit(manager, TrainRequest.build(registry, dataset=dataset, specs=specs, purpose=purpose, device=device,
                                              executor=executor),
                  registry.data_dir, dedupe=True)


def start_default_training(manager, registry, dataset: str = DEFAULT_DATASET, device: str = "cpu",
                           executor: str = "local") -> int | None:
    """Start training a data set's missing default models (all at once with a distributed ``executor``); returns
    the run id, or None if all exist."""
    if not registry.missing_defaults(dataset):
        return None
    return submit_training(manager, registry, registry.default_specs(dataset), dataset, "defaults", device, executor)
