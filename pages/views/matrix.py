"""Ambiguity matrix: an ambiguous example for every class pair, failed pairs blacked out (Bayes-TrEx Fig. 5)."""

import numpy as np
import plotly.graph_objects as go
import streamlit as st
import torch

from pages import ui as _ui
from probe_core.bayestrex import best_hit_per_target, best_samples, matrix_sampler_defaults
from probe_core.runconfig import config_of
from probe_core.targets import MATRIX_SPEC

ws = _ui.workspace()
st.title("Ambiguity matrix")
st.markdown("For every pair of classes, Bayes-TrEx looks for in-distribution images the classifier finds "
            "**equally likely to be either** (both near 0.5). Black cells: no chain reached the target.")

dataset, classifier, generator, names = _ui.page_models()
K = len(names)

# The same defaults as `probe sample --target ambiguous-matrix` (they depend on the image size); the
# widgets are keyed by data set, so each data set keeps its own settings in this session.
defaults = matrix_sampler_defaults(dataset.image_shape)
with st.form("matrix-form", enter_to_submit=False):
    c1, c2, c3, c4 = st.columns(4)
    chains = c1.number_input("Chains per pair", 2, 256, defaults["chains"], key=f"matrix_chains:{dataset.name}")
    warmup = c2.number_input("Warm-up", 10, 2000, defaults["warmup"], key=f"matrix_warmup:{dataset.name}")
    samples = c3.number_input("Samples per chain", 10, 2000, defaults["samples"], key=f"matrix_samples:{dataset.name}")
    keep_every = c4.number_input("Store every n-th", 1, 100, defaults["keep_every"], key=f"matrix_keep:{dataset.name}")
    start = st.form_submit_button(f"Build the {K}×{K} matrix", type="primary")
if start:
    kwargs = {"chains": int(chains), "warmup": int(warmup), "samples": int(samples), "keep_every": int(keep_every)}
    _ui.start_sampling(dataset.name, MATRIX_SPEC, **kwargs)

def is_matrix(run) -> bool:
    """An ambiguity-matrix run on this data set (typed fields of the stored configuration)."""
    config = config_of(run)
    return config is not None and config.is_matrix and config.dataset == dataset.name


runs = [r for r in ws.store.list_runs(kind="sample", limit=50) if is_matrix(r)]

_ui.active_runs("matrix", ("sample",), is_matrix, reset=("matrix_run",))
finished = [r for r in runs if r.status == "done" and r.result]
if not finished:
    if any(r.active for r in runs):
        st.info("The matrix is being built (progress above); it appears here when the run ends.")
    else:
        st.info(f"No matrix yet: press Build (all {K * (K - 1) // 2} pairs run as one batch; digits: about "
                "2 minutes, MNIST about 8 on 2 cores).")
    st.stop()
by_id = {r.id: r for r in finished}
run = by_id[st.selectbox("Matrix run", list(by_id), key="matrix_run",
                         format_func=lambda i: f"run {i} · {config_of(by_id[i]).chains} chains/pair")]

_ui.shards_not_done(run.result)
pairs, stored_index = {}, {}  # pair -> position in the result; position -> target index of its stored samples
for index, entry in enumerate(run.result["targets"]):
    first, second = (int(c) for c in entry["spec"].split(":", 1)[1].split(","))
    pairs[(first, second)] = index
    stored_index[index] = entry.get("target_index", index)  # sharded runs with a lost shard skip targets
stored = ws.store.get_samples(run.id)
best = best_hit_per_target(stored)
channels, height, width = dataset.image_shape
representatives = []
for c in range(K):  # a test image of each class for the edges (grey where the data set has none)
    members = (dataset.test_labels == c).nonzero()
    representatives.append(dataset.test_images[members[0, 0]] if len(members) else
                           torch.full((channels, height, width), 0.35))
tile = height + 1
canvas = np.ones((channels, (K + 1) * tile, (K + 1) * tile), dtype=np.float32) * 0.35
for c in range(K):  # class representatives on the top and left edges
    canvas[:, 0:height, (c + 1) * tile:(c + 1) * tile + width] = representatives[c].numpy()
    canvas[:, (c + 1) * tile:(c + 1) * tile + height, 0:width] = representatives[c].numpy()
for (first, second), index in pairs.items():
    picture = best[stored_index[index]]["image"] if stored_index[index] in best else np.zeros((channels, height, width), np.float32)
    for row, column in ((first, second), (second, first)):
        canvas[:, (row + 1) * tile:(row + 1) * tile + height, (column + 1) * tile:(column + 1) * tile + width] = picture
rgb = (np.repeat(canvas, 3, axis=0) if channels == 1 else canvas).transpose(1, 2, 0)
figure = go.Figure(go.Image(z=(rgb * 255).astype(np.uint8)))
centres, labels = [], []
for (first, second), index in pairs.items():
    for row, column in ((first, second), (second, first)):
        centres.append(((column + 1) * tile + width / 2, (row + 1) * tile + height / 2))
        summary = run.result["targets"][index]["summary"]
        hits = summary["hits"]
        labels.append(f"{names[first]} vs {names[second]}: {hits} of {summary['kept']} samples are hits" if hits
                      else f"{names[first]} vs {names[second]}: not reached")
figure.add_trace(go.Scatter(x=[c[0] for c in centres], y=[c[1] for c in centres], mode="markers",
                            marker=dict(size=18, opacity=0.01), hovertext=labels, hoverinfo="text"))
figure.update_layout(height=620, width=620, margin=dict(l=0, r=0, t=0, b=0), xaxis=dict(visible=False),
                     yaxis=dict(visible=False))
reached = sum(not t["failed"] for t in run.result["targets"])
st.caption(f"{reached} of {len(pairs)} pairs reached · edges: a test image of each class · click a cell to open it")
event = st.plotly_chart(figure, on_select="rerun", selection_mode="points", key="matrix_chart")
points = event.selection.points if event and hasattr(event, "selection") else []
cells = [p.get("point_index", p.get("pointIndex")) for p in points if p.get("curve_number", p.get("curveNumber")) == 1]
pair_names = [f"{names[a]} vs {names[b]}" for a, b in pairs]
if cells and cells[0] is not None and st.session_state.get("matrix_clicked") != cells[0]:
    # a click on a cell opens its pair (the picker below is keyed, so it is set through its state)
    st.session_state["matrix_clicked"] = cells[0]
    st.session_state["matrix_pair"] = cells[0] // 2
picked = st.selectbox("Pair", range(len(pairs)), format_func=lambda i: pair_names[i], key="matrix_pair")
index = list(pairs.values())[picked]
entry = run.result["targets"][index]
pair_samples = [s for s in stored if s["target_index"] == stored_index[index]]
shown = best_samples(pair_samples, misses_limit=10)
keep_every = config_of(run).keep_every
st.write(f"**{entry['description']}** · {entry['summary']['hits']} of {entry['summary']['kept']} samples are hits "
         f"({entry['hit_rate'] * 100:.0f} %) · "
         + ("FAILED: closest samples shown" if entry["failed"] else
            f"{len(shown)} hits stored (every {keep_every}th sample is stored) and shown below"))
if shown:
    _ui.show_picture(torch.tensor(np.stack([s["image"] for s in shown[:30]])), columns=10)
