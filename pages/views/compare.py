"""Compare: two classifiers' high-confidence samples per class on one generator, labelled by hand (Table 3)."""

import pandas as pd
import streamlit as st
import torch

from pages import ui as _ui
from probe_core.api.ui import (
    SAMPLE_RANGES,
    CompareRequest,
    comparison_table,
    field_defaults,
    result_of,
    samples_to_label,
    submit_run,
)
from probe_core import suites
from probe_core.bayestrex import queries as sample_queries
from probe_core.errors import ProbeError
from probe_core.team.accounts import Permission

ws = _ui.workspace()
st.title("Compare classifiers")
st.markdown("Each classifier gets samples it is **at least 90 % confident** about, per class, from the same "
            "generator. Say what you see in a few of them: the share that really show the class is each "
            "classifier's accuracy on its own confident samples (Bayes-TrEx Table 3).")

dataset = _ui.current_dataset()
if dataset is None:
    st.stop()
classifiers = [m["id"] for m in ws.registry.list() if m["kind"] == "classifier"
               and m["dataset"].partition("[")[0] == dataset.base_name and not m["spec"].get("classes")]
session_classifier = _ui.session_model("classifier", dataset.name)
if session_classifier is not None and session_classifier.id not in classifiers:
    classifiers.insert(0, session_classifier.id)  # e.g. a plugin chosen on the Models page
if len(classifiers) < 2:
    st.info("Train a second classifier on the Models page (another seed, or the always-ambiguous variant) to compare.")
    st.stop()

with st.form("compare-form", enter_to_submit=False):
    c1, c2 = st.columns(2)
    first = c1.selectbox("Classifier A", classifiers, index=0, key="compare_a")
    second = c2.selectbox("Classifier B", classifiers, index=1, key="compare_b")
    c3, c4, c5 = st.columns(3)
    defaults = field_defaults(CompareRequest)
    chains = c3.number_input("Chains per class", *SAMPLE_RANGES["chains"], defaults["chains"], key="compare_chains")
    warmup = c4.number_input("Warm-up", *SAMPLE_RANGES["warmup"], defaults["warmup"], key="compare_warmup")
    samples = c5.number_input("Samples per chain", *SAMPLE_RANGES["samples"], defaults["samples"],
                              key="compare_samples")
    start = st.form_submit_button("Sample both", type="primary")
if start:
    loaded = _ui.session_model("generator", dataset.name)  # stored by its resolved reference
    if loaded is None:
        st.stop()
    try:
        request = CompareRequest.build(ws.registry, dataset=dataset.name, classifier_a=first, classifier_b=second,
                                       generator=loaded.id, chains=int(chains), warmup=int(warmup),
                                       samples=int(samples))
    except ProbeError as error:
        st.error(_ui.plain(error))
    else:
        submit_run(_ui.job_manager(), request, ws.registry.data_dir, device=_ui.device())


_ui.active_runs("compare", ("compare",), reset=("compare_run",))


def describe_comparison(compare_run) -> str:
    outcome = result_of(compare_run)
    return f"run {compare_run.id} · " + (" vs ".join(outcome.classifiers) if outcome else "stored by an older version")


run = _ui.pick_run("compare", "Comparison run", "compare_run", only_done=True, dataset=dataset.name,
                   describe=describe_comparison)
compared = None if run is None else result_of(run)
if compared is None:
    st.stop()
names = compared.class_names
annotator = _ui.annotator_name()
shown_class = st.selectbox("Class", names, key="compare_class")
to_label = [s for s in samples_to_label(ws.store, run.id) if s["target_index"] % len(names)
            == names.index(shown_class)]
choices = ["(not labelled)"] + list(names) + ["none"]


def save(sample_id: int, key: str) -> None:
    value = st.session_state[key]
    if value != "(not labelled)" and annotator:
        sample_queries.label_sample(ws.store, annotator, sample_id, value, actor=_ui.current_actor())


for side, classifier_id in enumerate(compared.classifiers):
    rows = [s for s in to_label if s["target_index"] // len(names) == side]
    st.markdown(f"**{'AB'[side]}: `{classifier_id}`** is ≥ 90 % sure these are **{shown_class}**"
                + ("" if rows else " — no confident samples were found"))
    columns = st.columns(max(len(rows), 1))
    for column, sample in zip(columns, rows):
        column.image(_ui.image_grid(torch.tensor(sample["image"])[None], columns=1,
                                    scale=_ui.upscale_for_display(sample["image"].shape[-2]) * 2))
        mine = sample_queries.sample_label(ws.store, sample["id"], annotator)
        key = f"compare_label_{sample['id']}"
        column.selectbox("I see", choices, index=choices.index(mine) if mine in choices else 0,
                         key=key, on_change=save, args=(sample["id"], key), disabled=not annotator,
                         label_visibility="collapsed")
if not annotator:
    st.caption("Enter your name to label; each choice is saved at once.")

try:
    table = comparison_table(ws.store, run.id)
except ProbeError as exc:
    st.error(_ui.plain(exc))
    st.stop()
frame = pd.DataFrame({
    f"{'AB'[side]} ({classifier_id})": {
        **{name: f"{accuracy * 100:.0f} % (n={count})" for name, (accuracy, count) in row["per_class"].items()},
        "overall": "–" if row["overall"] is None else f"{row['overall'] * 100:.1f} % (n={row['labelled']})"}
    for side, (classifier_id, row) in enumerate(table.items())})
st.subheader("Accuracy on their own confident samples")
st.dataframe(frame, key="compare_table")

with st.expander("Keep the labelled samples as regression checks"):
    st.caption("One check per classifier: its confident samples with what people said they show; every new "
               "classifier version can then be scored on them (Regressions page).")
    suite_name = _ui.suite_choice(dataset.name, "compare_suite")
    if st.button("Add to the suite", key=f"compare_add_checks_{run.id}", disabled=not suite_name):
        try:
            _ui.require(Permission.SUITES)
            added = suites.add_finding_checks(ws.registry, ws.store, suite_name, run.id, device=_ui.device())
        except ProbeError as exc:
            st.error(_ui.plain(exc))
        else:
            st.success(f"Checks {', '.join(map(str, added))} added to {suite_name}.")
