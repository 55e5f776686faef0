"""Per-person settings in ``st.session_state`` (data set, data folder, device, chosen models, name) and
what the pages derive from them: the session's data set and models, starting a sampling run."""

from __future__ import annotations

import os
from pathlib import Path

import streamlit as st
import torch

from pages.ui.auth import current_actor, may, require
from pages.ui.resources import _failures, _load, _verdicts, get_job_manager, get_workspace
from pages.ui.text import plain
from probe_core.api.ui import (
    DATA_DIR_ENV,
    DEFAULT_DATASET,
    IMAGE_SIZE_RANGE,
    KEPT_FOLDER,
    OPEN_DATASET_ENV,
    SHARDS_RANGE,
    JobManager,
    Workspace,
    canonical_dataset_name,
    check_executor,
    default_workspace_path,
    describe_linked_file,
    generator_source,
    is_file_reference,
    list_datasets,
    resolve_device,
    split_view,
    submit_run,
)
from probe_core.errors import ProbeError
from probe_core.runs import history
from probe_core.team.accounts import Permission


def workspace() -> Workspace:
    """This session's view of the shared workspace, with the data folder this person chose.

    The cached workspace is shared by every session; the data folder is per person, so each
    call makes a light view of it (same database) instead of setting anything on the shared one.
    """
    shared = get_workspace(str(default_workspace_path().resolve()))
    return shared.for_data_dir(data_dir(), actor=current_actor())


def data_dir() -> str | None:
    """The IDX data folder of this session: the person's own for admins, the server's (``$PROBE_DATA_DIR``) for
    everyone else, whatever a forged widget value says."""
    return (st.session_state.get("data_dir") or None) if may(Permission.LOAD) else None


def job_manager() -> JobManager:
    """The server's job manager, starting runs as this session's person (refused for annotators)."""
    return get_job_manager(str(default_workspace_path().resolve())).acting_as(current_actor())


def device() -> str:
    return str(resolve_device(st.session_state.get("device", "auto")))


def scaleout() -> dict:
    """This person's executor settings for runs that split into shards: ``{"executor", "shards"}``.

    Raises
    ------
    ProbeError
        For an executor setting that is not local, ray or ray:ADDRESS, or ray when Ray is not installed.
    """
    shards = int(st.session_state.get("shards", 0))
    return {"executor": check_executor(st.session_state.get("executor", "local")), "shards": shards or None}


MODEL_KINDS = ("classifier", "generator")


def model_ref(kind: str, dataset: str | None = None) -> str:
    """This person's classifier or generator reference for a data set (``default`` until they pick one).

    Choices are kept per data set in the session (a switch to another data set and back keeps
    them) and mirrored in the URL (``?dataset=…&classifier=…&generator=…``), so a reload or a
    bookmark restores them.
    """
    dataset = dataset or st.session_state.get("dataset", DEFAULT_DATASET)
    key = f"{kind}_ref:{dataset}"
    if key not in st.session_state:
        in_url = st.query_params.get("dataset", DEFAULT_DATASET) == dataset
        st.session_state[key] = _adopted_from_address(kind, dataset, st.query_params.get(kind) if in_url else None)
    return st.session_state[key]


def _linked_key(kind: str, dataset: str) -> str:
    return f"{kind}_link:{dataset}"


def _adopted_from_address(kind: str, dataset: str, value: str | None) -> str:
    """What a reference in the address becomes: a stored model id, ``default``, a built generator, a reference
    the workspace already holds (its runs name it) or a file the tool kept in the workspace (``probe_core.api``'s
    ``show`` of an in-memory model) at once; any other file (a plugin runs code when loaded) only after the person
    confirms it (:func:`linked_file_card`)."""
    ws = workspace()
    if not value or value == "default" or generator_source(value) is not None or ws.registry.exists(value) \
            or value in ws.store.known_references() or _kept_by_the_workspace(value, ws):
        return value or "default"
    st.session_state[_linked_key(kind, dataset)] = value
    return "default"


def _kept_by_the_workspace(reference: str, ws) -> bool:
    try:
        path = describe_linked_file(reference).path
    except ProbeError:
        return False
    return path.is_relative_to(Path(ws.root).resolve() / KEPT_FOLDER)


def linked_file_card(kind: str, dataset: str) -> None:
    """The file a link named as this session's ``kind``, shown (path, size, sha256) with Load and Ignore.

    A link never makes the server import code by itself: only a person who may load files, having seen what
    the file is, loads it. Anything but a plugin or model file is refused, whatever exists at that path.
    """
    pending = st.session_state.get(_linked_key(kind, dataset))
    if not pending:
        return
    with st.container(border=True):
        if not may(Permission.LOAD):
            st.error(f"The address names a {kind} file; your role may not load files, so it was not loaded.")
            st.session_state.pop(_linked_key(kind, dataset))
            return
        try:
            linked = describe_linked_file(pending)
        except ProbeError as exc:  # shown on every page until dismissed: the link named something unusable
            st.error(f"The address names a {kind} that is not loaded: {plain(exc)}")
            if st.button("Dismiss", key=f"link_dismiss_{kind}"):
                st.session_state.pop(_linked_key(kind, dataset))
                st.rerun()
            return
        st.warning(f"The address asks this server to load a {kind} from a {linked.kind}"
                   + (" (Python code that runs when it is loaded)" if linked.kind == "plugin" else "")
                   + ". Load it only if you know this file.")
        st.code(f"{linked.path}\n{linked.size:,} bytes\nsha256 {linked.sha256}", language=None)
        load, ignore = st.columns(2)
        if load.button("Load it", key=f"link_load_{kind}", type="primary"):
            st.session_state.pop(_linked_key(kind, dataset))
            set_model_ref(kind, linked.reference, dataset)
            st.rerun()
        if ignore.button("Ignore", key=f"link_ignore_{kind}"):
            st.session_state.pop(_linked_key(kind, dataset))
            st.rerun()


def set_model_ref(kind: str, reference: str, dataset: str | None = None) -> None:
    """Make ``reference`` this person's classifier or generator for a data set (and put it in the URL)."""
    dataset = dataset or st.session_state.get("dataset", DEFAULT_DATASET)
    st.session_state[f"{kind}_ref:{dataset}"] = reference or "default"
    _sync_query_params()


def _sync_query_params() -> None:
    dataset = st.session_state.get("dataset", DEFAULT_DATASET)
    if dataset == YOUR_DATA:  # not chosen yet: the address keeps the last data set
        return
    wanted = {"dataset": None if dataset == DEFAULT_DATASET else dataset,
              **{kind: model_ref(kind, dataset) for kind in MODEL_KINDS}}
    for name, value in wanted.items():
        if value in (None, "default"):
            if name in st.query_params:
                del st.query_params[name]
        elif st.query_params.get(name) != value:
            st.query_params[name] = value


YOUR_DATA = "your data: a folder or .npz…"
SIDEBAR_KEYS = ("dataset", "data_dir", "device", "executor", "shards")


def _use_your_data() -> None:
    """Button callback: the typed path becomes a stored reference and the session's data set."""
    try:
        require(Permission.LOAD)  # a typed path is a file on the server, however it is spelled
        reference = canonical_dataset_name(st.session_state.get("data_path", "").strip() or "?",
                                           int(st.session_state.get("data_size") or 0) or None,
                                           bool(st.session_state.get("data_skip")))
    except ProbeError as exc:
        st.session_state["data_path_error"] = str(exc)
        return
    st.session_state.pop("data_path_error", None)
    st.session_state.setdefault("user_datasets", [])
    if reference not in st.session_state["user_datasets"]:
        st.session_state["user_datasets"].append(reference)
    st.session_state["dataset"] = reference


def sidebar_settings() -> None:
    """Data set, data folder and device pickers shared by every page."""
    names = [info.name for info in list_datasets()]
    yours = st.session_state.setdefault("user_datasets", [])
    used = history.datasets_used(workspace().store)  # what this workspace's runs and models were made on
    for name in used:  # a folder or .npz the workspace already holds models or runs for is offered by name
        if is_file_reference(name) and name not in yours:
            yours.append(name)
    if "dataset" not in st.session_state:
        from_url = st.query_params.get("dataset")
        if from_url and is_file_reference(split_view(from_url)[0]) and from_url not in yours \
                and may(Permission.LOAD):
            yours.append(from_url)  # a shared link to someone's folder or .npz
        # the address's data set, else the server's (probe ui --dataset), else the one this workspace was used
        # on last, else the embedded default
        opening = os.environ.get(OPEN_DATASET_ENV) or next((name for name in used if name in names + yours), None)
        if opening is not None and is_file_reference(split_view(opening)[0]) and opening not in yours:
            yours.append(opening)
        st.session_state["dataset"] = from_url if from_url in names + yours else opening or DEFAULT_DATASET
        # nothing named it: a fresh workspace's first view shows the embedded set but has not chosen it
        st.session_state["dataset_unchosen"] = st.session_state["dataset"] == DEFAULT_DATASET and not (
            from_url or opening)
    st.session_state.setdefault("data_dir", os.environ.get(DATA_DIR_ENV, ""))
    for key in SIDEBAR_KEYS:
        # Set again each run: a session's first run (Streamlit's folder page mode, see the router) gives the
        # widgets another identity than later runs, and a widget whose identity changed would start over.
        if key in st.session_state:
            st.session_state[key] = st.session_state[key]
    with st.sidebar:
        choice = st.selectbox("Data set", yours + [n for n in names if n not in yours] + [YOUR_DATA], key="dataset",
                              on_change=lambda: st.session_state.pop("dataset_unchosen", None),
                              help="your data sets first (those this workspace has models or runs for, and those "
                                   "you named); digits and scenes are embedded; mnist, fashion-mnist and idx read "
                                   "IDX files from the data folder")
        if choice == YOUR_DATA:
            st.text_input("Folder of class sub-folders, or a .npz file", key="data_path",
                          help="DIR/<class>/*.png|jpg|bmp|webp (DIR/train and DIR/test are used as given), "
                               "or a .npz with x, y and optionally class_names, x_test, y_test")
            st.number_input("Image size (0: the folder's most common size)", 0, IMAGE_SIZE_RANGE[1], 0, key="data_size",
                            help=f"from {IMAGE_SIZE_RANGE[0]} to {IMAGE_SIZE_RANGE[1]} pixels a side")
            st.checkbox("Skip unreadable images", key="data_skip")
            st.button("Use this data", on_click=_use_your_data, key="data_use")
            if "data_path_error" in st.session_state:
                st.error(st.session_state["data_path_error"])
        if {d.name: d.needs_folder for d in list_datasets()}.get(st.session_state["dataset"], False):
            st.text_input("Data folder (IDX files)", key="data_dir", disabled=not may(Permission.LOAD),
                          help=f"Folder with train-/t10k- IDX files; default ${DATA_DIR_ENV} (admins only)")
        devices = ["auto", "cpu"] + (["cuda"] if torch.cuda.is_available() else [])
        st.selectbox("Device", devices, key="device", help="auto: CUDA when a GPU is present, else the CPU")
        st.session_state.setdefault("executor", "local")
        st.session_state.setdefault("shards", 0)
        with st.expander("Scale out"):
            st.text_input("Executor", key="executor",
                          help="where sampling shards, Defuse identification shards, the λ sweep and the training "
                               "of several models run: local (one after another), ray (the Ray instance on the "
                               "server's machine, started if none runs) or ray:ADDRESS (a cluster started with "
                               "`ray start --head`)")
            st.number_input("Shards (0: one per worker)", 0, SHARDS_RANGE[1], key="shards",
                            help="the same shards and seed give the same results on every executor")
    _sync_query_params()


def dataset_chosen() -> bool:
    """Whether this session's data set was chosen (in the sidebar, the address, ``probe ui --dataset``, or by
    the workspace's last use), not only shown because a fresh workspace opens on the embedded set."""
    return not st.session_state.get("dataset_unchosen", False)


def current_dataset():
    """The selected data set, or None after showing why it cannot be loaded."""
    if st.session_state.get("dataset") == YOUR_DATA:
        st.info("Name a folder of class sub-folders or a .npz file in the sidebar, then press **Use this data**.")
        return None
    try:
        return workspace().registry.dataset(st.session_state.get("dataset", DEFAULT_DATASET))
    except ProbeError as exc:
        st.error(f"Cannot load the data set: {plain(exc)}")
        return None


@st.cache_data(show_spinner=False, max_entries=8)
def prior_samples(reference: str, count: int = 8, seed: int = 0):
    """Images and descriptions of prior draws from a built generator with a structured prior (``scene:novel``)."""
    generator = load_model(reference, "generator", st.session_state.get("dataset", DEFAULT_DATASET)).module
    scenes = generator.sample_prior(count, torch.Generator().manual_seed(seed))
    with torch.no_grad():
        return generator.decode(scenes).cpu(), [generator.describe(scene) for scene in scenes]


def annotator_name(label: str = "Your name (annotator)") -> str:
    """The annotator's name: the signed-in account's, else (single-user mode) typed and remembered across
    reloads and pages in the URL (``?annotator=...``)."""
    actor = current_actor()
    if actor.signed_in:
        st.caption(f"Labelling as **{actor.name}**")
        return actor.name
    if "annotator" not in st.session_state:
        st.session_state["annotator"] = st.query_params.get("annotator", "")
    name = st.text_input(label, key="annotator", placeholder="e.g. alice").strip()
    if name and st.query_params.get("annotator") != name:
        st.query_params["annotator"] = name
    return name


def session_model(kind: str, dataset: str):
    """The classifier or generator picked for this session (Models page), loaded and cached; None after an error.

    Lookups never train: an untrained default is trained on the Models page, and the page says so instead.
    """
    reference = model_ref(kind, dataset)
    ws = workspace()
    try:
        if reference == "default":
            reference = ws.registry.default_id(dataset, kind)
            if generator_source(reference) is None and not ws.registry.exists(reference):
                training = [r for r in ws.store.list_runs(kind="train", limit=20) if r.active]
                if training:
                    st.info(f"The default {kind} for {dataset} is training now (run {training[0].id}); this page "
                            f"continues by itself when it is done.")
                else:
                    st.info(f"The default {kind} for {dataset} is not trained yet: train it on the **Models** "
                            f"page (the button under Models; digits: about 85 s, the scenes classifier about "
                            f"4 minutes).")
                return None
        return load_model(reference, kind, dataset)
    except ProbeError as exc:
        st.error(f"Cannot use the {kind} {plain(repr(reference))}: {plain(exc)}")
        return None


def load_model(reference: str, kind: str, dataset: str):
    """A model by reference (never trained here), cached per workspace, data folder and device.

    Raises
    ------
    ProbeError
        If it cannot be loaded (unknown id, untrained default, broken plugin), or it is a plugin or model
        file and this person may not load files.
    """
    return _load(str(workspace().root.resolve()), reference, kind, dataset, device(), data_dir(), current_actor())


def model_checks(dataset: str, model_ids: list[str]) -> dict:
    """Each stored model's check on ``dataset`` (model id -> :class:`~probe_core.models.checks.ModelVerdict`),
    cached per set of models."""
    return _verdicts(str(workspace().root.resolve()), dataset, tuple(model_ids), data_dir(), current_actor())


def session_models(dataset: str):
    """``(classifier, generator)`` for the session, or ``(None, None)`` after showing why not."""
    classifier, generator = session_model("classifier", dataset), session_model("generator", dataset)
    if classifier is None or generator is None:
        return None, None
    return classifier, generator


def failures_of_run(run_id: int):
    """The failures behind a finished Defuse run, read once per server (they never change afterwards)."""
    return _failures(str(workspace().root.resolve()), run_id)


def start_sampling(dataset_name: str, spec, models: tuple[str, str] | None = None,
                   **sample_kwargs) -> int | None:
    """Start a Bayes-TrEx run of ``spec`` (a :class:`~probe_core.sampling.targets.TargetSpec`, or spec text) in the
    background; returns the run id.

    ``models``: ``(classifier, generator)`` references for a use case; default the session's models.
    Bad settings or a bad target show one ``st.error`` and return None; nothing is stored then.
    """
    try:
        return _start_sampling(dataset_name, spec, models, **sample_kwargs)
    except ProbeError as exc:
        st.error(f"Cannot start sampling: {plain(exc)}")
        return None


def _start_sampling(dataset_name: str, spec, models: tuple[str, str] | None, **sample_kwargs) -> int:
    from probe_core.api.ui import SampleRequest

    # the run stores the models' resolved references (zoo ids, plugin paths with their sha256),
    # never "default" or a relative path, so it can be read back anywhere later
    if models is None:
        classifier, generator = session_models(dataset_name)
    else:
        classifier, generator = (load_model(reference, kind, dataset_name)
                                 for reference, kind in zip(models, ("classifier", "generator")))
    if classifier is None or generator is None:
        raise ProbeError("the session's classifier and generator are not ready (see the Models page)")
    registry = workspace().registry
    config = SampleRequest.build(registry, dataset=dataset_name, target=spec, classifier=classifier,
                                 generator=generator, **{**scaleout(), **sample_kwargs})
    in_flight = {run.id for run in registry.store.list_runs(kind=config.kind, active_only=True)}
    run_id = submit_run(job_manager(), config, data_dir(), dedupe=True, device=device())
    if run_id in in_flight:
        st.info(f"An identical run is already in flight: run {run_id} (shown below); no second one was started.")
    return run_id
