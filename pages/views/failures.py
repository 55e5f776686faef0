"""Failures: Defuse identification and distillation with progress, the failure map, and cluster cards."""

from collections import Counter

import streamlit as st
import torch

from pages import ui as _ui
from probe_core.api.ui import (
    DEFAULT_JUDGE_SURE,
    EMBEDDING,
    NEIGHBOUR_MAJORITY,
    NOISE_MODES,
    PROJECT_CODES_ABOVE,
    PROJECTED_CODE_SIZE,
    REAL_SIZE_LABEL,
    REAL_SIZE_NOISE,
    REAL_SIZE_REVIEW_TAU,
    REVIEW_TAU,
    SMALL_IMAGE_NOISE,
    DistillRequest,
    IdentifyRequest,
    field_defaults,
    judge_advice,
    result_of,
    review_samples,
    review_tau,
    sized_identification,
    submit_embedding,
    submit_step,
)
from probe_core.defuse import queries
from probe_core.errors import ProbeError
from probe_core.reporting import figures
from probe_core.runs import history

NO_JUDGE = "none"
DEFAULT_JUDGE = "default (chosen from the image size)"
ws = _ui.workspace()
manager = _ui.job_manager()
st.title("Failures")
st.markdown("Perturb the VAE codes of the training data, keep what the classifier gets wrong, and distil those "
            "failures into clusters (Defuse). Then label the clusters on the **Label** page.")

dataset, classifier, generator, names = _ui.page_models()
if not generator.capabilities.encoder:
    st.error(f"Defuse needs a VAE with an encoder; the session generator `{generator.id}` has none. "
             "Pick a VAE on the Models page.")
    st.stop()
st.caption(f"Classifier `{classifier.id}` · VAE `{generator.id}` · data `{dataset.name}`")

# what runs with the defaults, chosen from the data's size by the rule the CLI and the API use, shown in the form
planned, plan_note = sized_identification(IdentifyRequest(dataset=dataset.name), dataset,
                                          generator.capabilities)
available = len(dataset.train_labels)
with st.form("defuse-find", enter_to_submit=False):
    st.markdown("**Identification**")
    c0, c1, c2, c3, c4 = st.columns(5)
    identify_defaults, distill_defaults = field_defaults(IdentifyRequest), field_defaults(DistillRequest)
    identify_ranges, distill_ranges = IdentifyRequest.ranges, DistillRequest.ranges
    images = c0.number_input(f"Training images (of {available:,})", 1, available, planned.max_images or available,
                             key=f"defuse_images_{dataset.name}",
                             help="the first images of the training set whose codes are perturbed"
                                  + (f"; {plan_note}" if plan_note else ""))
    per_image = c1.number_input("Perturbations per image (Q)", *identify_ranges["samples_per_image"],
                                planned.samples_per_image, key="defuse_q")
    keep = c2.number_input("Failures kept per image (M)", *identify_ranges["max_per_image"],
                           identify_defaults["max_per_image"], key="defuse_m")
    noise = c3.selectbox("Noise", NOISE_MODES, key=f"defuse_noise_{dataset.name}",
                         index=NOISE_MODES.index(planned.noise),
                         help="centered: Beta noise centred, sd = scale; paper: μ + ε with ε ~ Beta(a, b), exactly "
                              f"Algorithm 1. The default comes from the image size: {SMALL_IMAGE_NOISE['noise']} "
                              f"below {REAL_SIZE_LABEL} (on digits it finds more labelable clusters), "
                              f"{REAL_SIZE_NOISE['noise']} on {REAL_SIZE_LABEL} and up (the papers' colour runs); "
                              "a generator may ask for its own (a density autoencoder's whitened codes: centered)")
    scale = c4.number_input("Noise scale (sd)", *identify_ranges["noise_scale"], planned.noise_scale, 0.01,
                            key=f"defuse_scale_{generator.id}",  # its default is the generator's
                            help="sd per dimension of centred noise; the default is the one the generator asks for, "
                                 "else 0.15")
    j1, j2 = st.columns([4, 1])
    # stored classifiers only: a plugin path typed here would make the server run its code (the Models page
    # loads files, for those who may)
    judges = [DEFAULT_JUDGE, NO_JUDGE] + [m for m in ws.registry.classifier_choices(dataset.name)
                                          if m != classifier.id]
    judge = j1.selectbox("Judge", judges, key=f"defuse_judge_{dataset.name}",
                         help="a classifier other than the probed one, trained on data you trust: a misclassified "
                              "decoding counts as a failure only if the judge still sees its source class in it, "
                              "so that decodings the generator blurred out of their class are not kept as the "
                              "classifier's failures. A judge trained on the same flawed data may hide the flaw (a "
                              "mislabelled class, for one). The default: from 32×32 up, the generator's own feature "
                              "network (no training), below that none")
    advice = judge_advice(dataset.image_shape)
    if judge == NO_JUDGE and advice:
        j1.caption(advice)
    judge_sure = j2.number_input("Judge at least", *identify_ranges["judge_sure"], None, 0.05, format="%.2f",
                                 key="defuse_judge_sure", placeholder="the judge's own",
                                 help="the judge's least probability of the source class; empty: the judge's own "
                                      f"({DEFAULT_JUDGE_SURE:g} for a classifier, {NEIGHBOUR_MAJORITY:g} of the votes "
                                      "for a neighbour vote)")
    st.markdown("**Distillation**")
    d1, d2, d3, d4, d5 = st.columns(5)
    components = d1.number_input("Max clusters (K)", *distill_ranges["n_components"], distill_defaults["n_components"],
                                 key="defuse_k")
    threshold = d2.number_input("Weight threshold (ε)", *distill_ranges["weight_threshold"],
                                distill_defaults["weight_threshold"], 0.005, format="%.3f", key="defuse_eps")
    max_samples = d3.number_input("Fit on at most", *distill_ranges["max_samples"], distill_defaults["max_samples"],
                                  key="defuse_max_samples")
    tau = d4.number_input("Review spread (τ)", *distill_ranges["tau"], review_tau(dataset.image_shape), 0.005,
                          format="%.3f", key=f"defuse_tau_{dataset.name}",
                          help="review and correction samples from N(μ, τΣ); the default comes from the image size "
                               f"({REAL_SIZE_REVIEW_TAU:g} on {REAL_SIZE_LABEL} and up, the papers' colour setting; "
                               f"{REVIEW_TAU:g} below)")
    class_share = d5.number_input("Keep a class's share", *distill_ranges["class_share"],
                                  distill_defaults["class_share"], 0.05, format="%.2f", key="defuse_class_share",
                                  help="a cluster lighter than ε is kept too when it holds this share of the "
                                       "failures of one class (0: ε alone, as the papers), so that a class the "
                                       "classifier otherwise knows shows its one failure mode. Codes of more than "
                                       f"{PROJECT_CODES_ABOVE} dimensions are clustered in their first "
                                       f"{PROJECTED_CODE_SIZE} principal components")
    st.caption(f"With these values: {int(planned.max_images or available):,} images × {planned.samples_per_image} "
               f"perturbations = {int(planned.max_images or available) * planned.samples_per_image:,} decodings"
               + (" (chosen from the data's size: real-size images)" if plan_note else "")
               + "; the fields above are what runs.")
    start = st.form_submit_button("Find failures", type="primary")
if start:
    try:  # models and settings are checked (and references resolved) before a run is stored
        distill = {"n_components": int(components), "weight_threshold": float(threshold),
                   "max_samples": int(max_samples), "tau": float(tau), "class_share": float(class_share)}
        identify = IdentifyRequest.build(
            ws.registry, device=_ui.device(), dataset=dataset.name,
            classifier=_ui.model_ref("classifier", dataset.name), vae=_ui.model_ref("generator", dataset.name), samples_per_image=int(per_image),
            max_images=int(images) if int(images) < available else None,
            max_per_image=int(keep), noise=noise, noise_scale=float(scale), distill_after=distill,
            judge=None if judge == DEFAULT_JUDGE else judge,
            judge_sure=None if judge_sure is None else float(judge_sure), **_ui.scaleout())
    except ProbeError as exc:
        st.error(f"Cannot start: {_ui.plain(exc)}")
    else:
        run_id = submit_step(manager, ws.registry, identify, _ui.device())
        st.session_state["defuse_identify_run"] = run_id


_ui.active_runs("defuse", (queries.IDENTIFY, queries.DISTILL, EMBEDDING),
                reset=("defuse_distill_pick", _ui.FOLLOWED_DISTILL_RUN))  # a new run ends: every page follows it


distill_run = _ui.pick_distill_run("defuse_distill_pick")
if distill_run is None:
    in_flight = history.in_flight(ws.store, (queries.IDENTIFY, queries.DISTILL))
    if in_flight:  # the status comes from the runs' live state (progress above)
        st.info(f"Finding failures now (run {in_flight[0].id}: {in_flight[0].status}, {in_flight[0].message}); the "
                f"clusters appear here when distillation ends.")
    else:
        st.info("No distilled failures yet: press **Find failures** (digits: about a minute).")
    st.stop()

summary = result_of(distill_run)
if summary is None:
    st.info(f"Distillation run {distill_run.id} was stored by an older version of Model Probe: find failures again.")
    st.stop()
identify_run = queries.identify_run_of(ws.store, distill_run)
identified = result_of(identify_run) if identify_run is not None else None
if identified is not None:
    if identified.generator_weak:
        st.warning(f"Found with a weak VAE: {identified.generator_warning}")
    if identified.judge_reason:
        st.caption(f"Judge: {identified.judge_reason}."
                   + (f" {identified.confirmed_words[0].upper()}{identified.confirmed_words[1:]}."
                      if identified.confirmed_words else ""))
    if identified.judge_warning:
        st.warning(f"Judged by a classifier that may share the flaws: {identified.judge_warning}")
    _ui.shards_not_done(identified.not_done)
m1, m2, m3, m4 = st.columns(4)
m1.metric("Failures", f"{summary.failures:,}")
m2.metric("Clusters kept", summary.clusters)
m3.metric("In kept clusters", f"{summary.failures_in_kept_clusters:,}")
m4.metric("Distillation", f"{summary.seconds:.0f} s")

dataset_of_run, classifier_of_run, vae_of_run = queries.load_run_models(ws.registry, ws.store, distill_run.id,
                                                                         _ui.device())

clusters = queries.clusters(ws.store, distill_run.id)
st.subheader("Failure map (UMAP of latent codes)")
cached = queries.stored_embedding(ws.store, distill_run.id)
if cached is None:
    busy = bool(history.in_flight(ws.store, (EMBEDDING,),
                                  lambda r: r.config.get("distill_run") == distill_run.id))
    if busy:
        st.info("The map is being computed in the background…")
    elif st.button("Compute the map", key="defuse_embed",
                   help="UMAP on up to 5,000 codes, the rest placed by nearest neighbours; cached in the workspace"):
        submit_embedding(manager, ws.registry, distill_run.id)
        st.rerun()
else:
    failures = _ui.failures_of_run(distill_run.id)
    highlight = st.selectbox("Highlight a cluster", [None] + [c["cluster_index"] for c in clusters],
                             key=f"defuse_map_highlight_{distill_run.id}",
                             format_func=lambda index: "none: all clusters in colour" if index is None else
                             next(f"cluster {index + 1} (id {c['id']}, {c['size']:,} failures)"
                                  for c in clusters if c["cluster_index"] == index))
    figure = figures.failure_map_figure(cached, names, failures.predictions, failures.true_labels, highlight)
    event = st.plotly_chart(figure, on_select="rerun", selection_mode=("points", "box", "lasso"), key="defuse_map")

    def image_of_point(point: int) -> tuple[torch.Tensor, str]:
        if point < 0:
            row = -point - 1
            label = names[dataset_of_run.train_labels[row]]
            return dataset_of_run.train_images[row], f"training image {row}, class {label}"
        return (torch.from_numpy(failures.images[point]).float() / 255,
                f"failure {point}: predicted {names[failures.predictions[point]]}, "
                f"true {names[failures.true_labels[point]]}")

    _ui.hover_images("defuse_map", str(distill_run.id), image_of_point)
    points = (event or {}).get("selection", {}).get("points", []) if isinstance(event, dict) else \
        getattr(getattr(event, "selection", None), "points", [])
    chosen = [p["customdata"] for p in points if isinstance(p.get("customdata"), int) and p["customdata"] >= 0][:16]
    if chosen:
        chosen_images = torch.tensor(failures.images[chosen]).float() / 255
        st.caption("Selected failures (predicted / true): " + ", ".join(
            f"{names[failures.predictions[i]]}/{names[failures.true_labels[i]]}" for i in chosen))
        _ui.show_picture(chosen_images, columns=16)
    else:
        st.caption("Hover a point to see its image; click or lasso failures to see them side by side. "
                   "Grey: training codes; colours: failure clusters.")

st.subheader("Clusters")
tau = queries.distill_tau(ws.store, distill_run.id)


@st.cache_data(show_spinner=False, max_entries=512)
def review(cluster_id: int, count: int, tau: float, model_ids: tuple[str, str]):
    cluster = queries.cluster(ws.store, cluster_id)
    shown = review_samples(vae_of_run, classifier_of_run, cluster, count, tau)
    return shown["images"], shown["probs"].argmax(1).numpy()


columns = st.columns(3)
for position, cluster in enumerate(clusters):
    info = cluster["info"]
    with columns[position % 3].container(border=True):
        images, predicted = review(cluster["id"], 10, tau, (classifier_of_run.id, vae_of_run.id))
        st.markdown(f"**Cluster {cluster['cluster_index'] + 1}** (id {cluster['id']}) · weight {cluster['weight']:.3f} · "
                    f"{cluster['size']} failures")
        _ui.show_picture(images, columns=5)
        said = Counter(names[p] for p in predicted).most_common()
        st.caption(f"On these {len(predicted)} samples the classifier says "
                   + ", ".join(f"**{name}** {times}×" for name, times in said)
                   + f". Over all its failures it mostly says "
                   f"{names[info['majority_prediction']]} ({info['prediction_share'] * 100:.0f} %), and their "
                   f"training images were mostly {names[info['majority_true_label']]} "
                   f"({info['true_label_share'] * 100:.0f} %).")
