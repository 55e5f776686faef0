"""Finetune: correct the classifier on the labelled failure clusters over a λ sweep; before/after/baseline."""

import pandas as pd
import streamlit as st

from pages import ui as _ui
from probe_core.api.ui import (
    BASELINES,
    HUMAN,
    REAL_SIZE_LABEL,
    REAL_SIZE_SELECTION,
    SELECTION_RULES,
    SMALL_IMAGE_SELECTION,
    CorrectRequest,
    cluster_label_table,
    correction_plan,
    field_defaults,
    generator_dataset,
    result_of,
    submit_step,
)
from probe_core import suites
from probe_core.defuse import queries
from probe_core.errors import ProbeError
from probe_core.reporting import figures
from probe_core.runs import history

ws = _ui.workspace()
manager = _ui.job_manager()
st.title("Finetune")
st.markdown("Finetune the classifier on **L(D) + λ·CE(D_f)**, D_f sampled from the clusters labelled as failures, "
            "for each λ of a sweep, and keep the best epoch of the best λ. The baseline runs the same sweep on "
            "other data (by default the paper's: the individually labelled failures). The corrected classifier "
            "is a new model; the original is kept.")

distill_run = _ui.pick_distill_run("finetune_run_pick")
if distill_run is None:
    st.info("Find failures and label them first (Failures and Label pages).")
    st.stop()

sources = queries.label_sources(ws.store, distill_run.id)
source = st.selectbox("Labels to use", sorted(set(sources) | {HUMAN}), key="finetune_source",
                      help="human labels, or an oracle's automatic labels (demos)")
run_data = queries.run_dataset(ws.store, distill_run.id, ws.registry.data_dir)
class_names = run_data.class_names
table = cluster_label_table(ws.store, distill_run.id, class_names, source)
usable = [r for r in table if r["usable"]]
st.caption(f"{len(usable)} of {len(table)} clusters are labelled as failures with a class ({source}).")

correct_defaults = field_defaults(CorrectRequest)
data_plan = correction_plan(CorrectRequest(distill_run.id), run_data.image_shape)
st.caption(f"Defaults for this data: {data_plan.note}.")
with st.form("finetune-form", enter_to_submit=False):
    c1, c2, c3 = st.columns(3)
    lambdas = c1.text_input("λ grid", ",".join(f"{v:g}" for v in data_plan.lambdas), key="finetune_lambdas")
    correct_ranges = CorrectRequest.ranges
    epochs = c2.number_input("Epochs per λ", *correct_ranges["epochs"], correct_defaults["epochs"], key="finetune_epochs")
    per_region = c3.number_input("Samples per failure region", *correct_ranges["samples_per_region"],
                                 correct_defaults["samples_per_region"],
                                 key="finetune_per_region")
    c4, c5 = st.columns(2)
    baseline_kind = c4.selectbox("Baseline", list(BASELINES), key="finetune_baseline",
                                 help="\n\n".join(f"**{k}**: {v}" for k, v in BASELINES.items()))
    rules = list(SELECTION_RULES)
    selection = c5.selectbox("Select λ and epoch by", rules, index=rules.index(data_plan.selection),
                             key=f"finetune_selection_{run_data.name}",
                             help="\n\n".join(f"**{k}**: {v}" for k, v in SELECTION_RULES.items())
                             + f"\n\nThe default comes from the image size: {SMALL_IMAGE_SELECTION} below "
                               f"{REAL_SIZE_LABEL}, {REAL_SIZE_SELECTION} on "
                               f"{REAL_SIZE_LABEL} and up")
    go_button = st.form_submit_button("Finetune", type="primary", disabled=not usable)
if go_button:
    try:
        grid = tuple(float(v) for v in lambdas.split(",") if v.strip())
        if not grid:
            raise ValueError
    except ValueError:
        st.error(f"The λ grid must be comma-separated numbers, e.g. 0.1,1,10; got {lambdas!r}")
    else:
        try:
            settings = CorrectRequest.build(ws.registry, distill_run=distill_run.id, source=source,
                                            lambdas=grid, epochs=int(epochs),
                                            samples_per_region=int(per_region),
                                            executor=_ui.scaleout()["executor"], baseline=baseline_kind,
                                            selection=selection)
        except ProbeError as exc:
            st.error(f"Cannot start: {_ui.plain(exc)}")
        else:
            submit_step(manager, ws.registry, settings, _ui.device())


_ui.active_runs("finetune", (queries.CORRECT,))


def of_this_run(run) -> bool:
    return run.config.get("distill_run") == distill_run.id


finished = history.finished(ws.store, queries.CORRECT, of_this_run, limit=20)
last = history.latest_ended(ws.store, queries.CORRECT, of_this_run)
if last is not None and last.status == "failed":
    st.error(f"The last finetuning run failed: {last.error}")
if not finished:
    st.stop()
run = finished[0]
result = result_of(run)
if result is None:
    st.info(f"Finetuning run {run.id} was stored by an older version of Model Probe: run it again to see it here.")
    st.stop()
missing = {phase: lambdas for phase, lambdas in result.lambdas_not_done.items() if lambdas}
if missing:
    st.warning("Some λ of the sweep were not done (their shard failed after a retry): " + "; ".join(
        f"{phase}: " + ", ".join(f"{lam:g}" for lam in lambdas) for phase, lambdas in missing.items()))
st.subheader(f"Results (run {run.id}, labels: {result.source}, {len(result.regions)} failure regions)")
rows = []
baseline_title = {"labelled-images": "baseline: labelled individual failures",
                  "cluster-labels": "baseline: failures with their region's label"}[
    result.results["baseline"].get("kind", "cluster-labels")]
for key, title in (("before", "before"), ("defuse", "Defuse"), ("baseline", baseline_title)):
    entry = result.results[key]
    rows.append({"classifier": title, "test accuracy": entry["test_accuracy"],
                 "failure-region accuracy": entry["failure_accuracy"],
                 "λ": entry.get("lambda")})
percent = {k: st.column_config.ProgressColumn(k, min_value=0.0, max_value=1.0, format="percent")
           for k in ("test accuracy", "failure-region accuracy")}
st.dataframe(pd.DataFrame(rows), hide_index=True, column_config=percent)
recognised = result.recognisable_words
if recognised and recognised.startswith("warning: "):
    st.warning(recognised[len("warning: "):].capitalize())
elif recognised:
    st.caption(recognised[0].upper() + recognised[1:] + ".")
st.caption(f"Selected: {result.selection['description']}. Baseline: "
           f"{result.results['baseline']['description']}." + (f" Swept: {result.budget}." if result.budget else ""))
before, after = result.results["before"], result.results["defuse"]
test_drop = before["test_accuracy"] - after["test_accuracy"]
allowed = st.number_input("Warn when test accuracy falls by more than (points)", 0.0, 100.0, 1.0, 0.5,
                          key="finetune_allowed_drop")
st.caption(f"At the chosen λ = {after.get('lambda', float('nan')):g}: test accuracy "
           f"{before['test_accuracy'] * 100:.1f} → {after['test_accuracy'] * 100:.1f} % "
           f"({-test_drop * 100:+.1f} points), failure-region accuracy {before['failure_accuracy'] * 100:.1f} → "
           f"{after['failure_accuracy'] * 100:.1f} %.")
if test_drop * 100 > allowed:
    st.warning(f"The corrected classifier costs {test_drop * 100:.1f} points of test accuracy (more than the "
               f"{allowed:g} you allow): look at the trade-off below before using it.")

figure = figures.tradeoff_figure(result.sweep, result.baseline_sweep)
event = st.plotly_chart(figure, key="finetune_tradeoff", on_select="rerun", selection_mode="points")

# Another point of the trade-off: click it on the chart (or pick it), then finetune at that λ alone.
swept = [s["lambda"] for s in result.sweep]
clicked = [p.get("x") for p in (event.selection.points if event and hasattr(event, "selection") else [])]
if clicked and clicked[0] in swept and st.session_state.get("finetune_clicked") != clicked[0]:
    st.session_state["finetune_clicked"] = clicked[0]
    st.session_state["finetune_other_lambda"] = clicked[0]
o1, o2 = st.columns([2, 1])
other = o1.selectbox("Another λ from the sweep", swept, key="finetune_other_lambda",
                     format_func=lambda v: next(f"λ = {v:g}: test {s['test_accuracy'] * 100:.1f} %, failure regions "
                                                f"{s['failure_accuracy'] * 100:.1f} %" for s in result.sweep
                                                if s["lambda"] == v))
if o2.button("Finetune at this λ", key="finetune_other_start"):
    submit_step(manager, ws.registry, CorrectRequest.build(
        ws.registry, distill_run=distill_run.id, source=result.source, lambdas=(float(other),),
        epochs=int(run.config.get("epochs", 3)), samples_per_region=int(run.config.get("samples_per_region", 256)),
        executor=run.config.get("executor", "local"), baseline=run.config.get("baseline", "cluster-labels"),
        selection=run.config.get("selection", "data-and-failures")),
        _ui.device())
    st.rerun()

corrected = result.corrected_model
st.write(f"Corrected classifier: `{corrected}` (original `{result.original_model}` kept).")
if _ui.model_ref("classifier") == corrected:
    st.success("The corrected classifier is the session classifier (kept in the page address, so a reload keeps it).")
elif st.button("Use the corrected classifier in this session", key="finetune_promote"):
    _ui.set_model_ref("classifier", corrected)
    st.rerun()

# The loop closed: score the corrected classifier (and the original, beside it) on a regression suite,
# so "fixed here, broken there" shows at once.
st.subheader("Score it on a regression suite")
suites_here = suites.suite_names(ws.store, generator_dataset(queries.run_models(ws.store, distill_run.id)["dataset"]))
if not suites_here:
    st.caption("No regression suite for this data set yet: on the **Label** page, add a labelled failure region to "
               "one (or `probe suite add`), then score the corrected classifier on it here.")
else:
    remembered = st.session_state.get("suite_name")
    suite_name = st.selectbox("Suite", suites_here, key="finetune_suite",
                              index=suites_here.index(remembered) if remembered in suites_here else len(suites_here) - 1)
    if st.button("Score the original and the corrected classifier", key="finetune_score"):
        st.session_state["suite_name"] = suite_name
        scored = suites.scored_classifiers(ws.store, suite_name)
        try:
            for classifier_id in (result.original_model, corrected):
                if classifier_id == corrected or classifier_id not in scored:
                    suites.submit_score(manager, ws.registry, suite_name, classifier_id, _ui.device())
        except ProbeError as exc:  # e.g. a plugin classifier whose file has gone
            st.error(f"Cannot score: {_ui.plain(exc)}")
    _ui.active_runs("finetune_suite", (suites.SCORE_KIND,))
    if corrected in suites.scored_classifiers(ws.store, suite_name):
        st.success(f"`{corrected}` is scored on {suite_name}: see the Regressions page.")
    st.page_link("pages/views/regressions.py", label="Open the Regressions page", icon=":material/fact_check:")
