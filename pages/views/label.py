"""Label: judge each failure cluster from its samples; every label is saved the moment it is given."""

import numpy as np
import pandas as pd
import streamlit as st

from pages import ui as _ui
from probe_core.defuse import labels as label_tools
from probe_core.defuse import pipeline
from probe_core.errors import ProbeError
from probe_core.export import npz_bytes

ws = _ui.workspace()
st.title("Label")
st.markdown("For each cluster: is it a **failure** of the classifier, and what is the **correct class**? "
            "Labels are stored at once, per annotator; changing your mind replaces your earlier label.")

distill_run = _ui.pick_distill_run("label_run_pick")
if distill_run is None:
    st.info("Nothing to label yet: find failures on the **Failures** page first.")
    st.stop()
try:
    dataset, classifier, vae = pipeline.load_run_models(ws.registry, ws.store, distill_run.id, _ui.device())
except ProbeError as exc:
    st.error(f"Cannot load the models of run {distill_run.id}: {exc}")
    st.stop()
names = dataset.class_names
clusters = ws.store.get_clusters(distill_run.id)
if not clusters:
    st.info("This run kept no clusters.")
    st.stop()

annotator = _ui.annotator_name()
if not annotator:
    st.info("Enter your name to start labelling; labels are stored per annotator.")

mine = {label["cluster_id"]: label for cluster in clusters
        for label in ws.store.get_labels(cluster_id=cluster["id"], source=label_tools.HUMAN)
        if label["annotator"] == annotator}
done = sum(cluster["id"] in mine for cluster in clusters)
st.progress(done / len(clusters), text=f"{done} of {len(clusters)} clusters labelled by {annotator or '…'}")

positions = {cluster["id"]: index for index, cluster in enumerate(clusters)}
st.session_state.setdefault("label_position", 0)
if st.session_state["label_position"] >= len(clusters):
    st.session_state["label_position"] = 0
nav1, nav2, nav3, nav4 = st.columns([1, 1, 1, 3])
if nav1.button("◀ Previous", key="label_prev"):
    st.session_state["label_position"] = (st.session_state["label_position"] - 1) % len(clusters)
if nav2.button("Next ▶", key="label_next"):
    st.session_state["label_position"] = (st.session_state["label_position"] + 1) % len(clusters)
if nav3.button("Next unlabelled", key="label_next_open"):
    open_ones = [positions[c["id"]] for c in clusters if c["id"] not in mine]
    if open_ones:
        st.session_state["label_position"] = open_ones[0]
cluster = clusters[st.session_state["label_position"]]
info = cluster["info"]

st.subheader(f"Cluster {cluster['cluster_index'] + 1} (id {cluster['id']}) · "
             f"{st.session_state['label_position'] + 1} of {len(clusters)} to label")
count = st.select_slider("Samples shown", [10, 20, 40], value=10, key="label_count")
shown = pipeline.review_samples(vae, classifier, cluster, count, pipeline.distill_tau(ws.store, distill_run.id))
predicted = shown["probs"].argmax(1).numpy()
_ui.show_picture(shown["images"], columns=10)
majority = names[int(np.bincount(predicted, minlength=len(names)).argmax())]
st.caption(f"The classifier says **{majority}** for most of these ({', '.join(names[p] for p in predicted)}). "
           f"{cluster['size']} failures, weight {cluster['weight']:.3f}.")

previous = mine.get(cluster["id"])
choices = list(names) + ["none of the above"]
# Nothing is preselected for a cluster you have not labelled: a careless Save cannot invent a label.
default_class = None if previous is None else (
    choices.index(previous["label"]) if previous["label"] in choices else
    choices.index("none of the above") if previous["label"] == label_tools.NONE_OF_THE_ABOVE else None)
with st.form(f"label-form-{cluster['id']}"):
    verdict = st.radio("Is this a failure of the classifier?", ["failure", "not a failure"], horizontal=True,
                       index=None if previous is None else (0 if previous["is_failure"] else 1),
                       key=f"label_failure_{cluster['id']}")
    correct = st.selectbox("What do these images show?", choices, index=default_class,
                           key=f"label_class_{cluster['id']}", placeholder="choose the class you see")
    saved = st.form_submit_button("Save label and go to the next cluster", type="primary", disabled=not annotator)
if saved and (verdict is None or correct is None):
    st.error("Choose whether this is a failure and what the images show, then save; nothing was stored.")
elif saved:
    try:
        label_tools.label_cluster(ws.store, cluster["id"], annotator, is_failure=verdict == "failure",
                                  label="none" if correct == "none of the above" else correct, class_names=names)
        st.session_state["label_position"] = (st.session_state["label_position"] + 1) % len(clusters)
        st.session_state["label_saved"] = f"Saved: cluster {cluster['id']} = {verdict}, {correct}"
        st.rerun()
    except ProbeError as exc:
        st.error(str(exc))
if "label_saved" in st.session_state:
    st.success(st.session_state.pop("label_saved"))
if previous:
    st.caption(f"Your current label: {'failure' if previous['is_failure'] else 'not a failure'}, "
               f"{previous['label']}")

st.subheader("All annotators")
table = label_tools.cluster_label_table(ws.store, distill_run.id)
frame = pd.DataFrame([{
    "cluster": r["id"], "classifier says": names[r["majority_prediction"]], "annotators": r["annotators"],
    "failure votes": f"{r['failure_votes']}/{r['votes']}", "failure region": r["is_failure"],
    "label": r["label"] if r["is_failure"] else ("not a failure" if r["votes"] else ""),
    "agreement": r["agreement"]} for r in table])
st.dataframe(frame, hide_index=True, column_config={
    "agreement": st.column_config.ProgressColumn("agreement", min_value=0.0, max_value=1.0, format="percent",
                                                 help="share of annotators voting for the majority label")})
agreement = label_tools.agreement_summary(table)
if agreement["clusters_labelled"]:
    a1, a2, a3 = st.columns(3)
    fmt = lambda v: "–" if v is None else f"{v * 100:.0f} %"  # noqa: E731
    a1.metric("Agreement, failure regions", fmt(agreement["failure_regions"]))
    a2.metric("Agreement, other clusters", fmt(agreement["other_regions"]))
    a3.metric("Agreement, all", fmt(agreement["all"]))

st.subheader("Export")
e1, e2, e3 = st.columns(3)
text, rows = label_tools.labels_csv(ws.store, distill_run.id)
e1.download_button(f"Labels (CSV, {rows} rows)", text, f"labels-run{distill_run.id}.csv", mime="text/csv",
                   key="label_csv")


def labelled_failures_npz() -> bytes:
    """Built only when the button is clicked: it reads every failure of the run."""
    return npz_bytes(**pipeline.labelled_failure_set(ws.store, distill_run.id, names), class_names=names)


in_failure_regions = sum(r["size"] for r in table if r["usable"])  # the failures assigned to those clusters
e2.download_button(f"Labelled failures (.npz, {in_failure_regions})", labelled_failures_npz,
                   f"labelled-failures-run{distill_run.id}.npz", key="label_npz")
with e3.popover("Auto-label (demo)"):
    st.caption("For demos only: an oracle classifier labels every cluster. Stored as 'oracle:MODEL', never mixed "
               "with human labels; pick its labels on the Finetune page.")
    oracle = st.text_input("Oracle model id or plugin", "default", key="label_oracle")
    if st.button("Auto-label all clusters", key="label_auto"):
        try:
            source, written = pipeline.auto_label(ws.registry, ws.store, distill_run.id, oracle, device=_ui.device())
            st.success(f"{len(written)} clusters labelled as {source}")
        except ProbeError as exc:
            st.error(str(exc))
