"""Home: the workspace, the data sets, the models with their metrics and samples; train a model."""

import streamlit as st

from pages import ui as _ui
from probe_core.api.ui import (
    DEFAULT_DATASET,
    GENERATOR_KINDS,
    KIND_WORDS,
    KINDS,
    MODEL_RANGES,
    ModelSpec,
    dataset_entry,
    list_datasets,
    start_default_training,
    submit_training,
)
from probe_core.errors import ProbeError
from probe_core.runs import history

ws = _ui.workspace()
manager = _ui.job_manager()

st.title("Model Probe")
st.markdown(
    "Find **how** an image classifier fails: sample inputs at any target confidence (Bayes-TrEx), "
    "distil failures into clusters, label them, and finetune the fix (Defuse)."
)
st.caption(f"Workspace `{ws.root.resolve()}` · device `{_ui.device()}`")


@st.fragment(run_every=_ui.LIVE_REFRESH_S)
def training_progress() -> None:
    """Live progress of training runs; polls the database every LIVE_REFRESH_S seconds."""
    runs = history.in_flight(ws.store, ("train",))
    if not runs:
        if st.session_state.pop("train_watching", False):  # training just ended: show the new models
            st.rerun(scope="app")
        return
    st.session_state["train_watching"] = True
    st.subheader("Training")
    for run in runs:
        st.progress(min(max(run.progress, 0.0), 1.0), text=_ui.run_status_line(run))
        for model_id, state in (run.details or {}).get("models", {}).items():
            label = f"{state['kind']}: `{model_id}` · {state['status']}"
            if state.get("epoch"):
                label += f" · epoch {state['epoch']}/{state['epochs']} · loss {state['loss']:.3g}"
            st.progress(min(max(state.get("fraction", 0.0), 0.0), 1.0), text=label)
        if st.button("Stop", key=f"cancel-{run.id}"):
            manager.cancel(run.id)
    st.caption("Training runs in the background: you can switch pages or reload; it keeps going.")


training_progress()

dataset = _ui.current_dataset()
if dataset is None:
    st.info("Pick another data set in the sidebar, or name yours there: a folder of class sub-folders of images, a "
            ".npz, or (for mnist, fashion-mnist and idx) the data folder that holds the IDX files.")
    st.stop()
entry = dataset_entry(dataset.name)

st.header(f"Data: {dataset.name}")
left, right = st.columns([2, 3])
with left:
    st.write(dataset.source)
    st.metric("Train / test images", f"{len(dataset.train_labels):,} / {len(dataset.test_labels):,}")
    st.write(f"**Image shape** (C, H, W): {dataset.image_shape} · **classes**: {', '.join(dataset.class_names)}")
with right:
    _ui.show_picture(dataset.test_images[:32], caption="Test images", columns=16)

with st.expander("All data sets"):
    st.table([{"name": d.name, "description": d.description,
               "needs a folder": "yes" if d.needs_folder else "no (embedded)"} for d in list_datasets()])

st.header("Models")
models = [m for m in ws.registry.list() if m["dataset"].partition("[")[0] == dataset.base_name]
if not models:
    training = any(run.config.get("dataset") == dataset.base_name for run in history.in_flight(ws.store, ("train",)))
    st.info("No models for this data set yet." + (" The defaults are training (see above)." if training else ""))
    if dataset.base_name == DEFAULT_DATASET and not _ui.dataset_chosen():
        st.markdown("A new workspace opens on the embedded **digits**: train its defaults here to try the tool, "
                    "or name your own folder or `.npz` under **Data set** in the sidebar (nothing trains until "
                    "you choose).")
    trained = " and ".join(KIND_WORDS.get(spec.kind, spec.kind)
                           for spec in ws.registry.default_specs(dataset.base_name))
    label = f"Train the default {trained}" + (f" (the generator is {entry.default_generator})"
                                              if entry.default_generator else "")
    if not training and st.button(label):
        try:
            start_default_training(manager, ws.registry, dataset.base_name, device=_ui.device(),
                                   executor=_ui.scaleout()["executor"])
            st.rerun()
        except ProbeError as exc:
            st.error(_ui.plain(exc))
else:
    verdicts = _ui.model_checks(dataset.name, [m["id"] for m in models])
    st.dataframe(_ui.models_table(models, verdicts), column_config=_ui.MODELS_COLUMN_CONFIG, hide_index=True)
    for model in models:  # the fix beside the verdict: a weak model the tool trained, trained longer
        remedy = verdicts[model["id"]].remedy if model["id"] in verdicts else None
        if remedy is not None:
            _ui.training_fix_button(remedy, key=f"fix-{model['id']}")
    generators = [m for m in models if m["kind"] in GENERATOR_KINDS]
    if generators:
        st.subheader("Generator samples (z from each generator's prior)")
        columns = st.columns(min(len(generators), 3))
        root = str(ws.root.resolve())
        for index, model in enumerate(generators):
            with columns[index % len(columns)]:
                _ui.show_picture(_ui.generator_samples(root, model["id"]), caption=model["id"])

if entry.generator_choices:
    st.subheader("Built generators: samples from their priors")
    for column, reference in zip(st.columns(len(entry.generator_choices)), entry.generator_choices):
        with column:
            images, descriptions = _ui.prior_samples(reference)
            _ui.show_picture(images, caption=reference, columns=4)
            st.caption(" · ".join(descriptions[:2]))

st.subheader("Models for this session")
st.caption("The Probe, Failures, Compare and Saliency pages use these. 'default' is the data set's default model.")
pick_classifier, pick_generator = st.columns(2)
with pick_classifier:
    _ui.model_choice("classifier", dataset.name)
with pick_generator:
    _ui.model_choice("generator", dataset.name)

st.header("Train a model")
subset_mode = st.radio("Classes", ["all", "only these", "all except"], horizontal=True, key="train_subset_mode")
with st.form("train-model", enter_to_submit=False):
    kind = st.selectbox("Kind", list(KINDS), key="train_kind")
    chosen = [] if subset_mode == "all" else st.multiselect(
        "Classes to train on" if subset_mode == "only these" else "Classes to leave out",
        list(dataset.class_names), key="train_classes")
    ambiguous = st.checkbox("Always-ambiguous variant (classifier only)", key="train_ambiguous",
                            help="KL loss to soft targets 0.5 on y and 0.5 on (y+1) mod K (Bayes-TrEx Sec. 4.5)")
    epochs = st.number_input("Epochs (0 = default for this data set)", 0, MODEL_RANGES["epochs"][1], 0,
                             key="train_epochs")
    latent = st.number_input("Latent size (generators; 0 = the data set's default)", 0, MODEL_RANGES["latent_dim"][1],
                             0, key="train_latent",
                             help="what a weak generator's advice may name: a larger code keeps more of each image")
    kl_warmup = st.number_input("KL warm-up epochs (VAEs; empty = half of the epochs)", *MODEL_RANGES["kl_warmup"],
                                value=None, key="train_kl_warmup",
                                help="epochs over which the KL term's weight rises to β, as the fix's command names")
    beta = st.number_input("β, the KL weight (VAEs; empty = the data set's)", min_value=0.01, value=None,
                           key="train_beta", help="a β-VAE for β > 1")
    seed = st.number_input("Seed", *MODEL_RANGES["seed"], 0, key="train_seed")
    submitted = st.form_submit_button("Train", key="train_submit")
if submitted:
    try:
        indices = [dataset.class_index(name) for name in chosen]
        if subset_mode != "all" and not indices:
            raise ProbeError("pick at least one class for a subset")
        classes = None
        if subset_mode == "only these":
            classes = indices
        elif subset_mode == "all except":
            classes = [c for c in range(dataset.num_classes) if c not in indices]
        vae = kind == "vae"
        spec = ModelSpec(dataset=dataset.base_name, kind=kind, classes=classes, ambiguous=ambiguous,
                         epochs=int(epochs) or None, seed=int(seed),
                         latent_dim=int(latent) if int(latent) and kind != "classifier" else None,
                         kl_warmup=int(kl_warmup) if vae and kl_warmup is not None else None,
                         beta=float(beta) if vae and beta is not None else None)
        run_id = submit_training(manager, ws.registry, [spec], dataset.base_name, device=_ui.device())
        st.success(f"Training started (run {run_id}); progress appears at the top of this page.")
    except ProbeError as exc:
        st.error(_ui.plain(exc))

@st.fragment(run_every=_ui.LIVE_REFRESH_S)
def recent_runs() -> None:
    """The latest runs, re-read every 2 s like the progress lines above (a static list would lag them)."""
    recent = history.runs(ws.store, limit=10)
    if recent:
        with st.expander("Recent runs"):
            for run in recent:
                st.write(_ui.run_status_line(run) + (f" — {run.error}" if run.error else ""))


recent_runs()
