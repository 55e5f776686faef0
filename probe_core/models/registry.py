"""The model registry: trained models as ``state_dict`` files plus metadata in the store.

A model is identified by its :class:`ModelSpec` (data set, kind, class subset,
variant, hyperparameters, seed). Lookups never train: :meth:`ModelRegistry.load` and
:meth:`ModelRegistry.resolve` raise :class:`ModelNotFoundError` for a model that is not
trained yet. Training is always asked for by name: :meth:`ModelRegistry.get_or_train`
(a spec) and :meth:`ModelRegistry.get_or_train_reference` (a reference whose default may
still need training), both with progress.
"""

from __future__ import annotations

import logging
import os
import pickle
import threading
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from probe_core.catalog import load_dataset
from probe_core.data import DEFAULT_DATASET, ImageDataset
from probe_core.errors import ModelNotFoundError, ProbeError, excerpt
from probe_core.models.access import check_dataset_access, may_load_files, use_model_reference
from probe_core.models.architectures import ProbabilityModel
from probe_core.models.devices import resolve_device
from probe_core.models.loaded import LoadedModel
from probe_core.models.recipes import _ARCHITECTURES, train_spec
from probe_core.models.references import ReferenceResolver, default_spec, default_specs, finetuned_module_of
from probe_core.models.resized import seen_at
from probe_core.models.spec import FD_METRIC, GENERATOR_KINDS, MODEL_FILE_ARCHITECTURE, PLUGIN_ARCHITECTURE, ModelSpec
from probe_core.models.training import epochs_of, feature_frechet_distance
from probe_core.progress import Reporter
from probe_core.store import Store
from probe_core.team.accounts import Actor, Permission, require

log = logging.getLogger(__name__)

TrainingAnnouncer = Callable[["ModelSpec", str], "Reporter | None"]


class ModelRegistry(ReferenceResolver):
    """The trained models of one workspace.

    Parameters
    ----------
    store : Store
        Where model metadata is recorded.
    models_dir : str or Path
        Where the weight files are written.
    data_dir : str or Path, optional
        Folder of file-based data sets (default ``$PROBE_DATA_DIR``); it belongs to whoever
        made this registry and is never changed on a shared one.
    on_training : callable, optional
        ``on_training(spec, model_id)`` is called before a model is trained that the caller did
        not give a reporter for (a missing default met by :meth:`get_or_train_reference`,
        the reference classifier of a generator, a recipe's variant); it says so to the user
        (the CLI prints a line, a job reports it) and returns the :class:`~probe_core.progress.Reporter` to use.
        Without it such training is logged.
    actor : Actor, optional
        Who resolves references through this registry (None: the local owner). An actor who may not load
        files gets only an allowlist, decided on what a reference resolves to, never on how it is spelled:
        ``default``, stored model ids, built generators, embedded data sets and the data sets the
        workspace's models and suites were made on (see :meth:`dataset`).

    Notes
    -----
    :meth:`remembering` gives a registry that resolves each reference once: one run's validation,
    preparation and job share the loaded models instead of loading them again.
    """

    # One lock per model file, shared by every registry of the process (each dashboard
    # session has its own registry), so two sessions never train the same model at once.
    _locks: dict[str, threading.Lock] = {}
    _locks_guard = threading.Lock()

    def __init__(self, store: Store, models_dir: str | Path, data_dir: str | Path | None = None,
                 on_training: TrainingAnnouncer | None = None, actor: Actor | None = None) -> None:
        self.store = store
        self.models_dir = Path(models_dir)
        self.data_dir = data_dir
        self.on_training = on_training
        self.actor = actor
        self._resolved: dict[tuple, LoadedModel] | None = None

    def _with(self, on_training: TrainingAnnouncer | None, resolved: dict | None) -> "ModelRegistry":
        registry = ModelRegistry(self.store, self.models_dir, self.data_dir, on_training, self.actor)
        registry._resolved = resolved
        return registry

    def acting_as(self, actor: Actor | None) -> "ModelRegistry":
        """This registry (same store, files and data folder) resolving references as ``actor``."""
        registry = ModelRegistry(self.store, self.models_dir, self.data_dir, self.on_training, actor)
        registry._resolved = None if self._resolved is None else {}
        return registry

    # -- what an actor may resolve (probe_core.models.access) --------------------------------
    def _trusted(self) -> bool:
        return may_load_files(self.actor)

    def dataset(self, name: str) -> ImageDataset:
        """Load a data set as this registry's actor.

        Raises
        ------
        PermissionDenied
            When the actor may not load files and ``name`` is neither an embedded data set (a view of one
            included) nor one the workspace holds (:meth:`Store.known_references`); the message names no path.
        DataError
            As :func:`~probe_core.catalog.load_dataset`.
        """
        check_dataset_access(self.store, self.actor, self.data_dir, name)
        return load_dataset(name, self.data_dir)

    def announcing(self, on_training: TrainingAnnouncer) -> "ModelRegistry":
        """This registry (same store, files, data folder and remembered models) with another training announcer."""
        return self._with(on_training, self._resolved)

    def remembered(self, key: tuple, compute: Callable[[], object]) -> object:
        """``compute()``, once per ``key`` for a remembering registry (:meth:`remembering`; e.g. a model check a
        request's preparation and its run would otherwise both make); every time for any other."""
        if self._resolved is None:
            return compute()
        key = ("remembered", *key)
        if key not in self._resolved:
            self._resolved[key] = compute()
        return self._resolved[key]

    def remembering(self) -> "ModelRegistry":
        """This registry, remembering what it resolves: each ``(reference, kind, dataset, device)`` is
        loaded once. For one run's lifetime (its modules are shared, so never for training on them); a
        registry that already remembers keeps what it remembers."""
        return self._with(self.on_training, {} if self._resolved is None else self._resolved)

    # -- queries -------------------------------------------------------------------------
    def list(self, dataset: str | None = None, kind: str | None = None) -> list[dict]:
        """Metadata of stored models, newest first."""
        return self.store.list_models(dataset=dataset, kind=kind)

    def exists(self, model_id: str) -> bool:
        record = self.store.get_model(model_id)
        return record is not None and Path(record["path"]).is_file()

    def load(self, model_id: str, device: str | torch.device | None = "cpu") -> LoadedModel:
        """Load a stored model by id (weights with ``torch.load(weights_only=True)``).

        Raises
        ------
        ModelNotFoundError
            If the id is unknown or its file is missing.
        """
        record = self.store.get_model(model_id)
        if record is None:
            known = ", ".join(m["id"] for m in self.list()[:8]) or "none yet"
            raise ModelNotFoundError(f"no model {excerpt(model_id)} in this workspace (known: {known})")
        path = Path(record["path"])
        if not path.is_file():
            raise ModelNotFoundError(f"model {model_id!r} is registered but its weights file is missing from the "
                                     f"workspace's models folder")
        arch = record["spec"]["architecture"]
        device = resolve_device(device)
        try:
            weights = torch.load(path, map_location=device, weights_only=True)
        except (pickle.UnpicklingError, RuntimeError, EOFError, OSError, ValueError, AttributeError) as exc:
            raise ProbeError(f"model {model_id!r}: its weights file cannot be loaded as plain tensors "
                             f"({type(exc).__name__}); only tensors are ever loaded, never pickled code: train "
                             f"it again, or register a file saved with torch.save(state_dict)") from exc
        if arch["class"] in (PLUGIN_ARCHITECTURE, MODEL_FILE_ARCHITECTURE):
            # a finetuned plugin or model-file classifier: its own module, our weights
            shape = tuple(record["spec"]["image_shape"]) if record["spec"].get("image_shape") else None
            reference = arch["args"]["reference"]
            use_model_reference(self.store, self.actor, reference)
            module = finetuned_module_of(arch, record["kind"], shape, model_id)
            target = module.net if isinstance(module, ProbabilityModel) else module
            target.load_state_dict(weights)
            module.to(device).eval()
            return LoadedModel(model_id, record["kind"], module, tuple(record["spec"]["class_names"]),
                               {**record, "class_map": record["spec"].get("class_map")})
        module = _ARCHITECTURES[arch["class"]](**arch["args"])
        module.load_state_dict(weights)
        module.to(device).eval()
        if record["kind"] == "classifier":
            module = ProbabilityModel(module, "logits").eval()
        return LoadedModel(model_id, record["kind"], module, tuple(record["spec"]["class_names"]), record)

    # -- training ------------------------------------------------------------------------
    def _lock(self, model_id: str) -> threading.Lock:
        key = str((self.models_dir / model_id).resolve())
        with self._locks_guard:
            return self._locks.setdefault(key, threading.Lock())

    def get_or_train(self, spec: ModelSpec, reporter: Reporter | None = None,
                     device: str | torch.device | None = "cpu") -> LoadedModel:
        """The stored model for ``spec``, training and registering it first if needed, with its epochs reported to
        ``reporter`` (:func:`~probe_core.models.training.report_epoch`).

        Raises
        ------
        PermissionDenied
            When the model must be trained and this registry's actor may not train (an annotator): training
            runs only as an admin's run, within the server's limits, never inside a page's lookup.
        """
        dataset = load_dataset(spec.dataset_view(), self.data_dir)
        spec = spec.resolved(dataset)
        model_id = spec.model_id()
        with self._lock(model_id):
            if not self.exists(model_id):
                self.require_training()
                if reporter is None:
                    if self.on_training is not None:
                        reporter = self.on_training(spec, model_id)
                    else:
                        log.warning("training %s (%s on %s, %s epochs): it is not in %s yet", model_id, spec.kind,
                                    spec.dataset_view(), spec.epochs, self.models_dir)
                self._train_and_register(spec, dataset, reporter, resolve_device(device))
        return self.load(model_id, device)

    def require_training(self) -> None:
        """Raise :class:`~probe_core.team.accounts.PermissionDenied` unless this registry's actor may train (no
        actor: a local user, who may)."""
        if self.actor is not None:
            require(self.actor, Permission.RUN)

    def _train_and_register(self, spec: ModelSpec, dataset: ImageDataset, reporter: Reporter | None,
                            device: torch.device) -> None:
        module, record, metrics = train_spec(spec, dataset, reporter, device, self.feature_network(spec, reporter,
                                                                                                     device))
        self.register_trained(spec, dataset, module, record, metrics, device)

    def feature_network(self, spec: ModelSpec, reporter: Reporter | None = None,
                        device: str | torch.device = "cpu") -> nn.Module | None:
        """The trained feature network of the generator ``spec`` (resolved), as a module, or None where it has none
        of its own (:meth:`ModelSpec.feature_network_spec`): the stored classifier, trained and stored first if it
        is missing, its epochs reported to ``reporter`` as the first of the generator's (one bar from 0 to 1)."""
        feature_spec = spec.feature_network_spec()
        if feature_spec is None:
            return None
        shared = None if reporter is None else epochs_of(reporter, spec.kind, 0, feature_spec.epochs + spec.epochs)
        return self.get_or_train(feature_spec, shared, device).module.net

    def register_trained(self, spec: ModelSpec, dataset: ImageDataset, module: nn.Module, record: dict,
                         metrics: dict, device: str | torch.device = "cpu") -> str:
        """Store what :func:`train_spec` made of ``spec`` (in this process or another), adding a generator's
        FD-clf (:data:`FD_METRIC`) where the data set's default classifier is already stored; returns its id.

        Parameters
        ----------
        spec : ModelSpec
            Resolved (:meth:`ModelSpec.resolved`), as it was trained.
        dataset : ImageDataset
            The data set of ``spec.dataset_view()``, at its own size (a generator trained smaller serves it).
        module, record, metrics
            :func:`train_spec`'s three results.
        """
        metrics = dict(metrics)
        if record.get("feature_network") and self.exists(record["feature_network"]):
            # what the generator cost from scratch: its feature network (a stored classifier of its own) included
            features = self.store.get_model(record["feature_network"])["metrics"].get("train_seconds", 0.0)
            metrics.update(feature_network_seconds=features,
                           train_seconds=round(metrics.get("train_seconds", 0.0) + features, 2))
        if spec.kind in GENERATOR_KINDS:
            # FD-clf needs the data set's default classifier; it is not trained just for this metric (nothing
            # trains unless the run uses it), and the generator check scores any generator with the run's own
            reference_spec = ModelSpec(dataset=spec.dataset, kind="classifier", seed=spec.seed)
            reference_id = self.model_id(reference_spec)
            if self.exists(reference_id):
                reference = self.load(reference_id, device)
                seen = seen_at(module.to(resolve_device(device)), dataset.image_shape)
                metrics[FD_METRIC] = feature_frechet_distance(reference.module.net, seen, dataset.test_images)
                metrics["fd_reference_classifier"] = reference.id
        return self.register(module, record, metrics, spec.model_id())

    def register(self, module: nn.Module, record: dict, metrics: dict, model_id: str) -> str:
        """Store a module's weights and metadata under ``model_id`` (atomic file write).

        ``record`` must hold ``dataset``, ``kind``, ``architecture`` ({class, args})
        and ``class_names``; anything else (parent model, hyperparameters) is kept as is.
        """
        for key in ("dataset", "kind", "architecture", "class_names"):
            if key not in record:
                raise ProbeError(f"model metadata needs {key!r}")
        path = self.models_dir / f"{model_id}.pt"
        temporary = path.with_suffix(".pt.tmp")
        torch.save({k: v.detach().cpu() for k, v in module.state_dict().items()}, temporary)
        os.replace(temporary, path)
        self.store.put_model(model_id, record["kind"], record["dataset"], str(path), record, metrics)
        return model_id

    # -- defaults and references ------------------------------------------------------------
    default_spec = staticmethod(default_spec)
    default_specs = staticmethod(default_specs)

    def missing_defaults(self, dataset: str = DEFAULT_DATASET) -> list[ModelSpec]:
        """Default specs of a data set that are not trained yet."""
        return [s for s in self.default_specs(dataset) if not self.exists(self.model_id(s))]

    def model_id(self, spec: ModelSpec) -> str:
        """The id of the model ``spec`` trains, resolved on its data (trained or not)."""
        return spec.resolved(load_dataset(spec.dataset_view(), self.data_dir)).model_id()
