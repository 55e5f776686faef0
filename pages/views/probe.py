"""Probe: build a target, run Bayes-TrEx in the background, watch the chains live, inspect the hits."""

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st
import torch

from pages import ui as _ui
from probe_core.api.ui import (
    DEFAULT_INTEGRATION_STEPS,
    DEFAULT_SIGMA,
    GENERATOR_KINDS_OF_USE_CASES,
    JUMPING_INTEGRATION_STEPS,
    LATENT_MAP,
    NONE_OF_THE_ABOVE,
    PATH_PAGE_DEFAULTS,
    POOR_MIXING_NOTE,
    SAMPLE_RANGES,
    SIGMA_RANGE,
    SPEC_KINDS,
    TEST_IMAGE_VERDICTS,
    USE_CASES,
    ModelSpec,
    PathKind,
    TargetSpec,
    best_samples,
    dataset_entry,
    label_test_image,
    mixing_ok,
    npz_bytes,
    page_sampler_defaults,
    plan_use_case,
    report_classes,
    result_of,
    sample_arrays,
    sampling_report,
    spec_help,
    stored_latent_map,
    submit_latent_map,
    submit_training,
    summary_rows,
)
from probe_core import suites
from probe_core.bayestrex import queries as sample_queries
from probe_core.errors import ProbeError
from probe_core.reporting import figures
from probe_core.runs import history
from probe_core.team.accounts import Permission

ws = _ui.workspace()
st.title("Probe")
st.markdown("Sample in-distribution inputs on which the classifier hits a **target confidence** (Bayes-TrEx).")

dataset, classifier, generator, names = _ui.page_models()
st.caption(f"Classifier `{classifier.id}` · generator `{generator.id}` (change them on the Models page)")
differentiable = generator.capabilities.differentiable
describe_scene = generator.module.describe if generator.capabilities.structured_prior else None
if not differentiable:
    st.info("This generator is a renderer without gradients: runs use **random-walk Metropolis** over its scene "
            "descriptions (Gaussian steps on positions and rotation, categorical resampling of the rest).")


def _high() -> TargetSpec:
    return TargetSpec.high(names, names.index(st.selectbox("Class", names, key="probe_high")))


def _ambiguous() -> TargetSpec | None:
    first, second = st.columns(2)
    a = first.selectbox("Class i", names, index=min(4, len(names) - 1), key="probe_amb_a")
    b = second.selectbox("Class j", names, index=len(names) - 1, key="probe_amb_b")
    if a == b:
        st.warning("Pick two different classes.")
        return None
    return TargetSpec.ambiguous(names, names.index(a), names.index(b))


def _vector() -> TargetSpec | None:
    st.caption("Slide the weights; they are normalised onto the simplex (the vector below sums to 1).")
    columns = st.columns(min(len(names), 10))
    weights = np.array([columns[i % len(columns)].slider(name, 0.0, 1.0, 0.0, 0.05, key=f"probe_w_{i}")
                        for i, name in enumerate(names)])
    if weights.sum() <= 0:
        st.info("Give at least one class some weight.")
        return None
    vector = np.round(weights / weights.sum(), 4)
    vector[int(vector.argmax())] += 1.0 - vector.sum()
    st.plotly_chart(figures.confidence_bars(vector, names, "target vector"), key="probe_vector_chart")
    return TargetSpec.vector(names, [float(v) for v in vector])


def _path() -> TargetSpec | None:
    first, second, third = st.columns(3)
    a = first.selectbox("From class", names, index=min(8, len(names) - 1), key="probe_path_a")
    b = second.selectbox("To class", names, index=len(names) - 1, key="probe_path_b")
    steps = third.number_input("Steps", *PathKind.steps_range, PATH_PAGE_DEFAULTS["steps"], key="probe_path_steps")
    if a == b:
        st.warning("Pick two different classes.")
        return None
    return TargetSpec.path_between(names, names.index(a), names.index(b), int(steps))


# the controls of the kinds that have their own; any other registered kind is typed as text
TARGET_CONTROLS = {"high": _high, "ambiguous": _ambiguous, "uniform": lambda: TargetSpec.uniform(names),
                   "probs": _vector, "path": _path}
SPEC_TEXT = "Spec"


def target_spec() -> TargetSpec | None:
    """The target built with the controls; None (after a message) when it is not valid yet."""
    choices = {kind.label: kind for kind in SPEC_KINDS.values()}
    label = st.radio("Target", [*choices, SPEC_TEXT], horizontal=True, key="probe_kind")
    kind = choices.get(label)
    try:
        if kind is not None and kind.name in TARGET_CONTROLS:
            return TARGET_CONTROLS[kind.name]()
        text = st.text_input("Target spec", kind.name if kind is not None else "ambiguous:4,9",
                             key="probe_spec" if kind is None else f"probe_spec:{kind.name}",
                             help=spec_help(" · ") + "; several separated by ';'")
        return TargetSpec.parse(text, names)
    except ProbeError as exc:
        st.error(_ui.plain(exc))
        return None


def use_case_section() -> None:
    """The paper's use cases: the models they need (trained here as a job when missing), then a run."""
    use_case = st.selectbox("Use case", list(USE_CASES), key="probe_use_case")
    st.caption(USE_CASES[use_case])
    options = {}
    if use_case == "misclassification":
        options["excluded_class"] = st.selectbox("Class the generator never sees", names, key="probe_uc_excluded")
        options["classifier"] = classifier.id
    elif use_case == "novel-class":
        default = [names[i] for i in (0, 1, 3, 6, 9) if i < len(names)]
        options["classifier_classes"] = tuple(st.multiselect("The classifier's classes (the generator gets the "
                                                             "others)", names, default=default, key="probe_uc_classes"))
    generator_kind = st.radio("Generator", list(GENERATOR_KINDS_OF_USE_CASES), horizontal=True,
                              key="probe_uc_generator", help="the paper used a GAN for these use cases")
    try:
        plan = plan_use_case(ws.registry, dataset.name, use_case, generator=generator_kind, **options)
    except ProbeError as exc:
        st.error(_ui.plain(exc))
        return
    resolved = {spec.resolved(dataset).model_id(): spec for spec in plan.model_specs()}
    missing = [spec for model_id, spec in resolved.items() if not ws.registry.exists(model_id)]
    ids = {kind: model.resolved(dataset).model_id() if isinstance(model, ModelSpec) else model
           for kind, model in (("classifier", plan.classifier), ("generator", plan.generator))}
    st.caption(f"Classifier `{ids['classifier']}` · generator `{ids['generator']}` · targets `{plan.target}`")
    if missing:
        st.info(f"{len(missing)} of these models are not trained yet: "
                + ", ".join(f"`{spec.resolved(dataset).model_id()}`" for spec in missing))
        if st.button("Train the missing models", key="probe_uc_train"):
            try:
                submit_training(_ui.job_manager(), ws.registry, missing, dataset.base_name, device=_ui.device(),
                                executor=_ui.scaleout()["executor"])
            except ProbeError as exc:
                st.error(_ui.plain(exc))
        _ui.active_runs("probe_uc", ("train",))
        return
    if st.button("Start the use case", type="primary", key="probe_uc_start"):
        started = _ui.start_sampling(dataset.name, plan.target, models=(ids["classifier"], ids["generator"]),
                                     **sampler_kwargs())
        if started is not None:
            st.session_state["probe_run_pick"] = started


spec = target_spec()
if spec is not None:
    st.caption(f"`{spec.text}` → {spec.describe()}")

if not differentiable and st.session_state.get("probe_sampler") != "rwm":
    st.session_state["probe_sampler"] = "rwm"
page_defaults = page_sampler_defaults(dataset.image_shape, dataset_entry(dataset.name).sized_defaults)
with st.expander("Sampler settings", expanded=False):
    c1, c2, c3, c4 = st.columns(4)
    chains = c1.number_input("Chains per target", *SAMPLE_RANGES["chains"], page_defaults["chains"],
                             key="probe_chains")
    warmup = c2.number_input("Warm-up iterations", *SAMPLE_RANGES["warmup"], page_defaults["warmup"],
                             key="probe_warmup")
    samples = c3.number_input("Samples per chain", *SAMPLE_RANGES["samples"], page_defaults["samples"],
                              key="probe_samples")
    sigma = c4.number_input("σ (likelihood width)", *SIGMA_RANGE, DEFAULT_SIGMA, 0.005, format="%.3f",
                            key="probe_sigma")
    c5, c6, c7, c8 = st.columns(4)
    sampler = c5.selectbox("Sampler", ["hmc", "rwm", "nuts"] if differentiable else ["rwm"], key="probe_sampler",
                           help="hmc: batched HMC (differentiable generators); rwm: random-walk Metropolis "
                                "(non-differentiable); nuts: Pyro's NUTS, one chain per target (the paper's sampler)")
    anneal = c6.selectbox("σ annealing", ["auto", "off", "from 0.5", "from 0.2"], key="probe_anneal",
                          help="anneal σ down to its value during warm-up; auto: on for high-confidence targets")
    keep_every = c7.number_input("Store every n-th sample", *SAMPLE_RANGES["keep_every"], page_defaults["keep_every"],
                                 key="probe_keep")
    seed = c8.number_input("Seed", *SAMPLE_RANGES["seed"], 0, key="probe_seed")
    jumps = st.number_input("Independence jumps per iteration (hmc)", *SAMPLE_RANGES["independence_moves"], 0,
                            key="probe_jumps",
                            disabled=sampler != "hmc",
                            help="after warm-up, each HMC step is followed by this many independence "
                                 "Metropolis-Hastings proposals from a mixture fitted to each target's warm-up "
                                 "draws: chains move between modes instead of staying near their start, "
                                 f"and HMC's trajectories are capped at {JUMPING_INTEGRATION_STEPS} leapfrog steps "
                                 f"instead of {DEFAULT_INTEGRATION_STEPS}")

    NO_JUDGE = "none"
    judge = st.selectbox("Judge", [NO_JUDGE] + [m for m in ws.registry.classifier_choices(dataset.name)
                                                if m != classifier.id],
                         key=f"probe_judge_{dataset.name}",
                         help="another classifier of this data, never the probed one: it judges each high or "
                              "ambiguous target's hits, and a target whose hits it mostly puts elsewhere is flagged "
                              "(hits that fool only the probed classifier)")

anneal_value = {"auto": "auto", "off": None, "from 0.5": 0.5, "from 0.2": 0.2}[anneal]


def sampler_kwargs() -> dict:
    return {"chains": int(chains), "warmup": int(warmup), "samples": int(samples), "sigma": float(sigma),
            "sampler": sampler, "seed": int(seed), "keep_every": int(keep_every), "anneal_sigma_from": anneal_value,
            "independence_moves": int(jumps) if sampler == "hmc" else 0,
            "judge": None if judge == NO_JUDGE else judge}


if st.button("Start sampling", type="primary", disabled=spec is None, key="probe_start"):
    st.session_state["probe_run_pick"] = _ui.start_sampling(dataset.name, spec, **sampler_kwargs())
if differentiable:
    with st.expander("The paper's use cases: misclassification, novel class, always ambiguous", expanded=False):
        use_case_section()

run = _ui.pick_run("sample", "Run", "probe_run_pick", dataset=dataset.name,
                   describe=lambda r: f"run {r.id} · {r.config.get('target', r.config.get('recipe', '?'))} · "
                                      f"{r.status}")
if run is None:
    st.info("No sampling runs yet: build a target and press Start.")
    st.stop()


@st.fragment(run_every=_ui.LIVE_REFRESH_S)
def live_view(run_id: int) -> None:
    """Polls the run every LIVE_REFRESH_S seconds; reruns the page once when the run ends."""
    current = history.run(ws.store, run_id)
    if current is None:
        return
    _ui.run_progress(current, f"probe_stop_{run_id}")
    details = current.details or {}
    trace = details.get("trace")
    if trace and trace["iteration"]:
        st.plotly_chart(figures.trace_figure(trace), key=f"trace_{run_id}")
        m1, m2, m3, m4 = st.columns([2, 1, 1, 1])  # the stage text is the longest
        m1.metric("Stage", f"{details.get('stage', '?')} {details.get('iteration', 0)}/{details.get('total', 0)}")
        m2.metric("σ now", f"{details.get('sigma', float('nan')):.3f}")
        m3.metric("split R-hat (max)", f"{details['rhat']:.2f}" if "rhat" in details else "–")
        m4.metric("ESS (min)", f"{details['ess']:.0f}" if "ess" in details else "–")
    if details.get("images"):
        # One picture and one caption, not an element per chain: each element is work for the browser per refresh.
        images = torch.tensor(details["images"])
        st.image(_ui.image_grid(images, columns=len(images), scale=_ui.upscale_for_display(images.shape[-2]),
                                padding=4))
        st.caption("Current state of the first chains, left to right: " + " · ".join(
            ", ".join(f"{names[rank]} {probs[rank]:.2f}" for rank in np.argsort(probs)[::-1][:2])
            for probs in details["image_confidences"]))
    if current.active:
        st.session_state[f"probe_watching_{run_id}"] = True
    elif st.session_state.pop(f"probe_watching_{run_id}", False):
        st.rerun(scope="app")


st.subheader(f"Run {run.id}: {run.config.get('target', run.config.get('recipe', ''))}")
live_view(run.id)

result = result_of(run) if run.status == "done" else None
if result is None:
    st.stop()

_ui.shards_not_done(result.not_done)
if result.cancelled:
    st.warning("This run was stopped early; the summary covers what it kept.")
if result.generator_weak:
    st.warning(f"Made with a weak generator: {result.generator_warning}")
for line in result.judge_warnings + result.provenance_warnings:
    st.warning(line)
st.subheader("Summary (paper Table 2, with the test-set baseline)")
st.dataframe(pd.DataFrame(summary_rows(result.targets)), hide_index=True,
             column_config={"hit rate": st.column_config.ProgressColumn("hit rate", min_value=0.0, max_value=1.0,
                                                                        format="percent"),
                            "ESS": st.column_config.NumberColumn("ESS", format="%.0f", help="minimum over latent dims"),
                            "R-hat": st.column_config.NumberColumn("R-hat", format="%.2f", help="split R-hat, max"),
                            "acceptance": st.column_config.NumberColumn("acceptance", format="%.2f"),
                            "status": st.column_config.TextColumn("status", width="medium"),
                            "target": st.column_config.TextColumn("target", width="medium")})
st.caption("'test set' counts test images that meet the same constraint (paper Sec. 4.10), next to the hit rate.")
if any(not mixing_ok(entry["summary"]) for entry in result.targets):
    st.warning(POOR_MIXING_NOTE[0].upper() + POOR_MIXING_NOTE[1:])

stored = sample_queries.samples(ws.store, run.id)
if not stored:
    st.info("No samples were stored for this run.")
    st.stop()
descriptions = [t["description"] for t in result.targets]
chosen = st.selectbox("Target", range(len(descriptions)), format_func=lambda i: descriptions[i], key="probe_target_pick")
rows = [s for s in stored if s["target_index"] == chosen]
hits = [s for s in rows if s["hit"]]
picked_target = result.targets[chosen]
achieved = picked_target["summary"]["achieved"]
violin = figures.achieved_violin(np.array([s["confidences"] for s in rows]), names, list(achieved))
left, right = st.columns([3, 2])
left.plotly_chart(violin, key="probe_violin")
baseline = picked_target.get("test_set_baseline")
if baseline:
    right.metric("Sampler hit rate", f"{picked_target['hit_rate'] * 100:.0f} %")
    right.metric("Test images meeting the target", f"{baseline['meeting_target']} / {baseline['test_images']}")
    if baseline["indices"]:
        right.caption("Some of them:")
        with right:
            _ui.show_picture(dataset.test_images[baseline["indices"][:16]], columns=8)
mistakes = (baseline or {}).get("confident_mistakes")
annotator = None  # the name box is shown once, in the first box below that needs it
if mistakes and mistakes["count"]:
    [target_class] = [names[c] for c in report_classes(picked_target, names)]
    with st.expander(f"The misclassification test-set baseline: {mistakes['count']} test images the classifier "
                     f"calls {target_class} with ≥ {mistakes['threshold']:.0%} confidence are labelled otherwise "
                     f"(paper Sec. 4.10). Mislabel or misclassification?"):
        annotator = _ui.annotator_name()
        test_data_name = run.config.get("dataset", dataset.name)
        verdicts = sample_queries.test_image_verdicts(ws.store, test_data_name)

        def judge(index: int, widget_key: str) -> None:
            try:
                label_test_image(ws.store, dataset, index, annotator, st.session_state[widget_key])
            except ProbeError as exc:
                st.session_state["probe_verdict_problem"] = str(exc)

        shown = list(zip(mistakes["indices"], mistakes["labels"], mistakes["confidences"]))[:30]
        for row_start in range(0, len(shown), 6):
            for column, (index, label, confidence) in zip(st.columns(6), shown[row_start:row_start + 6]):
                with column:
                    _ui.show_picture(dataset.test_images[index:index + 1], columns=1,
                                     caption=f"#{index}: labelled {names[label]}, p({target_class}) = "
                                             f"{confidence:.2f}")
                    mine = next((v["label"] for v in verdicts.get(index, []) if v["annotator"] == annotator), None)
                    others = [v["label"] for v in verdicts.get(index, []) if v["annotator"] != annotator]
                    widget_key = f"probe_verdict_{test_data_name}_{index}_{annotator}"
                    st.radio("verdict", TEST_IMAGE_VERDICTS, key=widget_key, label_visibility="collapsed",
                             index=TEST_IMAGE_VERDICTS.index(mine) if mine else None, disabled=not annotator,
                             on_change=judge, args=(index, widget_key))
                    if others:
                        st.caption("others: " + ", ".join(sorted(others)))
        if "probe_verdict_problem" in st.session_state:
            st.error(_ui.plain(st.session_state.pop("probe_verdict_problem")))
        if not annotator:
            st.info("Enter your name to judge these images; verdicts are stored at once, per person.")

st.subheader(f"Hits ({len(hits)} stored)" if hits else "No hits: the closest stored samples")
gallery = best_samples(rows, hits_limit=40, misses_limit=16)
images = torch.tensor(np.stack([s["image"] for s in gallery]))
_ui.show_picture(images, columns=10)
# each shown sample beside its nearest training image: is it new, or a copy of what the data already holds?
nearest = sample_queries.nearest_training_images(dataset, gallery, names)
placed = nearest["provenance"]
with st.expander(f"Each {'hit' if hits else 'sample'} beside its nearest training image "
                 f"({int(placed.near_copy.sum())} of {len(placed)} shown are near copies)",
                 expanded=bool(placed.near_copy.mean() > 0.5)):
    for start in range(0, len(gallery), 10):
        pair_rows = torch.cat([images[start:start + 10], nearest["images"][start:start + 10]])
        _ui.show_picture(pair_rows, columns=min(10, len(gallery) - start))
    st.caption("Top of each pair of rows: the samples above; below each, the training image nearest it (ℓ2 in pixel "
               "space). A near copy is nearer its training image than half a real test image's median distance to "
               "its own nearest training image; a new image sits about as far as a test image does (ratio about 1).")
    placed_target = picked_target.get("provenance") or {}
    if placed_target.get("measured"):
        st.caption(f"All {placed_target['measured']:,} hits measured: {placed_target['near_copy_share']:.0%} near "
                   f"copies, median distance {placed_target['median_ratio']:.2f}× a test image's, "
                   f"{placed_target['distinct_nearest']:,} distinct nearest training images.")
# Scene descriptions, when this run's codes are the session renderer's scene vectors.
scenes_described = callable(describe_scene) and gallery[0]["z"].shape[-1] == generator.module.latent_dim
if scenes_described:
    with st.expander("Scene descriptions", expanded=True):
        st.dataframe(pd.DataFrame([{"#": i, "scene": describe_scene(torch.as_tensor(s["z"])),
                                    "prediction": names[int(np.argmax(s["confidences"]))],
                                    "confidence": float(np.max(s["confidences"]))} for i, s in enumerate(gallery)]),
                     hide_index=True)
# the inspector reaches every stored hit (the gallery above shows the best 40), or the closest misses if none
inspected = hits or gallery
pick = st.slider(f"Inspect sample (of {len(inspected)} {'stored hits' if hits else 'closest samples'})", 0,
                 len(inspected) - 1, 0, key=f"probe_inspect_{run.id}_{chosen}") if len(inspected) > 1 else 0
a, b = st.columns([1, 3])
one = torch.as_tensor(inspected[pick]["image"])[None]
inspected_nearest = sample_queries.nearest_training_images(dataset, [inspected[pick]], names)
beside = torch.cat([one, inspected_nearest["images"]])
a.image(_ui.image_grid(beside, columns=2, scale=_ui.upscale_for_display(one.shape[-2]) * 2))
inspected_place = inspected_nearest["provenance"]
a.caption(f"Right: its nearest training image (a {inspected_nearest['labels'][0]}), distance "
          f"{inspected_place.distance[0]:.2f}, nearer than {100 - inspected_place.percentile[0]:.0f} % of test images' "
          f"nearest training images" + (" — a near copy" if inspected_place.near_copy[0] else ""))
if scenes_described:
    a.caption("Scene: " + describe_scene(torch.as_tensor(inspected[pick]["z"])))
b.plotly_chart(figures.confidence_bars(inspected[pick]["confidences"], names, f"chain {inspected[pick]['chain']}, "
                                     f"step {inspected[pick]['step']}"), key="probe_inspect_bars")

if hits:
    with st.expander("Mark findings for a regression suite: say what the hits show, keep them as a check"):
        st.caption("Say what each image really shows (saved at once, per person, as on Compare). Confident mistakes, "
                   "novel classes (none) and ambiguous samples with their true class become a check that every new "
                   "classifier version is scored on (Regressions page).")
        if annotator is None:
            annotator = _ui.annotator_name()
        marked = hits[:10]
        finding_choices = ["(not labelled)", *names, NONE_OF_THE_ABOVE]

        def mark(sample_id: int, widget_key: str) -> None:
            if st.session_state[widget_key] != "(not labelled)" and annotator:
                sample_queries.label_sample(ws.store, annotator, sample_id, st.session_state[widget_key],
                                             actor=_ui.current_actor())

        for column, sample in zip(st.columns(len(marked)), marked):
            with column:
                _ui.show_picture(torch.as_tensor(sample["image"])[None], columns=1,
                                 caption=f"says {names[int(np.argmax(sample['confidences']))]}")
                mine = sample_queries.sample_label(ws.store, sample["id"], annotator)
                widget_key = f"probe_finding_{sample['id']}_{annotator}"
                st.selectbox("shows", finding_choices, key=widget_key, label_visibility="collapsed",
                             index=finding_choices.index(mine) if mine in finding_choices else 0,
                             disabled=not annotator, on_change=mark, args=(sample["id"], widget_key))
        labelled = [s["id"] for s in suites.labelled_samples(ws.store, run.id, [m["id"] for m in marked],
                                                               require_all=False, samples=marked)]
        suite_name = _ui.suite_choice(dataset.name, "probe_suite")
        if st.button(f"Add the {len(labelled)} labelled samples to the suite", key=f"probe_add_check_{run.id}",
                     disabled=not (labelled and suite_name)):
            try:
                _ui.require(Permission.SUITES)
                added = suites.add_finding_checks(ws.registry, ws.store, suite_name, run.id, labelled,
                                                  device=_ui.device())
            except ProbeError as exc:
                st.error(_ui.plain(exc))
            else:
                st.success(f"Check {', '.join(map(str, added))} added to {suite_name}.")
        if not annotator:
            st.info("Enter your name to label; each choice is saved at once.")

st.subheader("Downloads")
if hits and not generator.capabilities.structured_prior:
    st.subheader("Where the hits are in the latent space")
    mapped = stored_latent_map(ws.store, run.id)
    if mapped is None:
        st.caption("A 2-D map (UMAP) of the hits' latent codes among draws of the prior N(0, I) (Bayes-Probe "
                   "Fig. 5): hits spread over the cloud are in-distribution, hits off to one side are not.")
        if st.button("Map the hits (UMAP, in the background)", key=f"probe_map_{run.id}"):
            submit_latent_map(_ui.job_manager(), ws.registry, run.id)
        _ui.active_runs("probe_map", (LATENT_MAP,), predicate=lambda r: r.config.get("run") == run.id)
    else:
        figure = go.Figure(go.Scattergl(x=mapped["prior_xy"][:, 0], y=mapped["prior_xy"][:, 1], mode="markers",
                                        name="prior draws", marker=dict(size=4, color="#b0b0b0")))
        for index, description in enumerate(descriptions):
            picked = mapped["hits_target"] == index
            if picked.any():
                figure.add_trace(go.Scattergl(x=mapped["hits_xy"][picked, 0], y=mapped["hits_xy"][picked, 1],
                                              mode="markers", name=f"hits: {description}", marker=dict(size=5)))
        figure.update_layout(height=420, margin=dict(l=10, r=10, t=10, b=10), legend=dict(orientation="h"),
                             xaxis=dict(showticklabels=False), yaxis=dict(showticklabels=False))
        st.plotly_chart(figure, key=f"probe_latent_map_{run.id}")
        st.caption(f"{len(mapped['hits_xy'])} hits among {len(mapped['prior_xy'])} prior draws; the map is in the "
                   "HTML report too.")

d1, d2, d3 = st.columns(3)
with d1:
    _ui.png_download(images, "Gallery (PNG)", f"run{run.id}-target{chosen}.png", "probe_png")
d2.download_button("Samples and latents (.npz)",
                   lambda: npz_bytes(**sample_arrays(stored, actor=_ui.current_actor())), f"run{run.id}-samples.npz",
                   key="probe_npz")
report = sampling_report(ws.store, run.id, chosen, dataset=dataset)
d3.download_button("One-page report (HTML)", report, f"run{run.id}-report.html", mime="text/html", key="probe_html")
