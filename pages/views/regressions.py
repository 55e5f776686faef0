"""Regressions: a suite's checks × classifier versions, coloured by accuracy; a cell opens the check's images."""

import numpy as np
import plotly.graph_objects as go
import streamlit as st
import torch

from pages import ui as _ui
from probe_core.api.ui import generator_dataset
from probe_core import suites
from probe_core.errors import ProbeError
from probe_core.runs import history
from probe_core.team.accounts import Permission

ws = _ui.workspace()
st.title("Regressions")
st.markdown("Failures that stay found: each **check** keeps the images of a labelled Defuse failure region or of "
            "Bayes-TrEx samples people labelled, with their labels. Score every new classifier version on the "
            "suite; a check whose accuracy falls shows at once. Add checks on the **Label** page (a failure "
            "region), the **Probe** page (labelled hits) or with `probe suite add`.")

dataset = _ui.current_dataset()
if dataset is None:
    st.stop()
available = suites.suite_names(ws.store, generator_dataset(dataset.name))
if not available:
    st.info("No regression suite for this data set yet: add a labelled failure region on the **Label** page, "
            "labelled hits on the **Probe** page, or run `probe suite add --suite NAME ...`.")
    st.stop()
# a link can name the suite (?suite=NAME: a page to send to stakeholders); else the one this person used last
wanted = st.query_params.get("suite") or st.session_state.get("suite_name")
if wanted in available and "regressions_suite" not in st.session_state:
    st.session_state["regressions_suite"] = wanted
suite_name = st.selectbox("Suite", available, key="regressions_suite")
st.session_state["suite_name"] = suite_name
if st.query_params.get("suite") != suite_name:
    st.query_params["suite"] = suite_name

with st.form("regressions_score", enter_to_submit=False):
    classifiers = [m["id"] for m in ws.registry.list(kind="classifier")
                   if generator_dataset(m["dataset"]) == generator_dataset(dataset.name)]
    session_classifier = _ui.model_ref("classifier", dataset.name)
    if session_classifier == "default":
        session_classifier = ws.registry.default_id(dataset.name, "classifier")
    if session_classifier not in classifiers:
        classifiers.insert(0, session_classifier)  # e.g. a plugin chosen on the Models page
    s1, s2 = st.columns([3, 1])
    to_score = s1.selectbox("Score a classifier on this suite", classifiers, key="regressions_classifier",
                            index=classifiers.index(session_classifier) if session_classifier in classifiers else 0)
    if s2.form_submit_button("Score", type="primary"):
        try:
            suites.submit_score(_ui.job_manager(), ws.registry, suite_name, to_score, _ui.device())
        except ProbeError as exc:
            st.error(_ui.plain(exc))
_ui.active_runs("regressions", (suites.SCORE_KIND,))
failed = next((r for r in history.runs(ws.store, suites.SCORE_KIND, limit=1) if r.status == "failed"), None)
if failed is not None and failed.config.get("suite") == suite_name:
    st.error(f"Scoring {failed.config.get('classifier')} failed: {failed.error}")

try:
    matrix = suites.suite_matrix(ws.store, suite_name)
except ProbeError as exc:
    st.error(_ui.plain(exc))
    st.stop()
checks, versions = matrix["checks"], matrix["classifiers"]
suite = matrix["suite"]
st.caption(f"Suite **{suite_name}** · version {suite['version']} · {len(checks)} checks · "
           f"{len(versions)} classifier versions scored")
if not checks:
    st.info("Every check of this suite was retired.")
    st.stop()

x, y, accuracy, text, hover = [], [], [], [], []
for row, check in enumerate(checks):
    for column, version in enumerate(versions):
        cell = matrix["cells"].get((check["id"], version))
        if cell is None:
            continue
        x.append(column)
        y.append(row)
        accuracy.append(cell["accuracy"])
        text.append(f"{cell['accuracy'] * 100:.0f} %")
        hover.append(f"{check['name']}<br>{version}: {cell['accuracy'] * 100:.0f} % of {cell['count']} images"
                     + (" (found on this one)" if version == check["found_on"] else ""))
figure = go.Figure(go.Scatter(
    x=x, y=y, mode="markers+text", text=text, hovertext=hover, hoverinfo="text", textfont=dict(color="black"),
    marker=dict(symbol="square", size=46, color=accuracy, colorscale="RdYlGn", cmin=0, cmax=1,
                colorbar=dict(title="accuracy", tickformat=".0%"))))
figure.update_layout(
    height=110 + 56 * len(checks), margin=dict(l=10, r=10, t=10, b=10),
    xaxis=dict(tickvals=list(range(len(versions))), ticktext=[v if len(v) < 40 else "…" + v[-38:] for v in versions],
               range=[-0.6, len(versions) - 0.4], side="top"),
    yaxis=dict(tickvals=list(range(len(checks))), ticktext=[c["name"][:48] for c in checks], autorange="reversed",
               range=[-0.6, len(checks) - 0.4]))
st.caption("Rows: checks; columns: classifier versions in the order they were scored. Click a cell to open it.")
event = st.plotly_chart(figure, on_select="rerun", selection_mode="points", key="regressions_matrix")
points = event.selection.points if event and hasattr(event, "selection") else []
clicked = [p.get("point_index", p.get("pointIndex")) for p in points]
if clicked and clicked[0] is not None and st.session_state.get("regressions_clicked") != clicked[0]:
    st.session_state["regressions_clicked"] = clicked[0]
    st.session_state["regressions_check"] = checks[y[clicked[0]]]["id"]
    st.session_state["regressions_version"] = versions[x[clicked[0]]]

c1, c2 = st.columns(2)
names_of = {check["id"]: check["name"] for check in checks}
check_id = c1.selectbox("Check", list(names_of), format_func=lambda i: f"{i}: {names_of[i]}", key="regressions_check")
version = c2.selectbox("Classifier version", versions, key="regressions_version")
check = suites.suite_check(ws.store, check_id)
cell = matrix["cells"].get((check_id, version))
found = matrix["cells"].get((check_id, check["found_on"]))
st.markdown(f"**{check['name']}** · {suites.CHECK_KINDS.get(check['kind'], check['kind'])} · found on "
            f"`{check['found_on']}` · added in version {check['added_version']}")
if cell is None:
    st.info(f"`{version}` has not been scored on this check yet: score it above.")
else:
    m1, m2, m3 = st.columns(3)
    m1.metric("Accuracy", f"{cell['accuracy'] * 100:.0f} %",
              None if found is None or version == check["found_on"]
              else f"{(cell['accuracy'] - found['accuracy']) * 100:+.0f} points vs found-on")
    m2.metric("Confidence on the label", "–" if cell["confidence"] is None else f"{cell['confidence']:.2f}")
    m3.metric("Confidence in the wrong answer", "–" if cell["wrong_confidence"] is None
              else f"{cell['wrong_confidence']:.2f}",
              help="the mean probability this classifier gives the class the found-on classifier wrongly chose: "
                   "is it still sure of the wrong answer?")
    labels = suites.label_names(check)
    class_names = check["evidence"]["class_names"]
    predictions = [class_names[int(p)] for p in cell["predictions"]]
    wrong = [i for i in range(len(labels)) if labels[i] != predictions[i]]
    order = wrong + [i for i in range(len(labels)) if i not in wrong]  # its mistakes first
    shown = order[:20]
    st.caption(f"{len(wrong)} of {len(labels)} images are not called what people said they show; "
               "mistakes first. Under each: the label, then the prediction.")
    images = torch.as_tensor(np.asarray(check["data"]["images"]))
    for start in range(0, len(shown), 10):
        for column, index in zip(st.columns(10), shown[start:start + 10]):
            with column:
                _ui.show_picture(images[index:index + 1], columns=1,
                                 caption=f"{labels[index]} → {predictions[index]}"
                                         + (" ✗" if index in wrong else ""))

d1, d2 = st.columns(2)
d1.download_button("Suite report (HTML, self-contained)",
                   lambda: suites.suite_report(ws.store, suite_name, actor=_ui.current_actor()),
                   f"suite-{suite_name}.html", mime="text/html", key="regressions_report")
if d2.button("Retire this check", key=f"regressions_retire_{check_id}", disabled=not _ui.may(Permission.SUITES),
             help="take it out of the suite from the next version on; its evidence and scores are kept"):
    _ui.require(Permission.SUITES)
    suites.retire_check(ws.store, suite_name, check_id, actor=_ui.current_actor())
    st.session_state.pop("regressions_check", None)
    st.rerun()
