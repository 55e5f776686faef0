"""Ambiguity matrix: an ambiguous example for every class pair, failed pairs blacked out (Bayes-TrEx Fig. 5)."""

import numpy as np
import streamlit as st
import torch

from pages import ui as _ui
from probe_core.api.ui import (
    SAMPLE_RANGES,
    TargetSpec,
    best_hit_per_target,
    best_samples,
    config_of,
    matrix_sampler_defaults,
    result_of,
)
from probe_core.bayestrex import queries as sample_queries
from probe_core.reporting import figures
from probe_core.runs import history

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
    chains = c1.number_input("Chains per pair", *SAMPLE_RANGES["chains"], defaults["chains"],
                             key=f"matrix_chains:{dataset.name}")
    warmup = c2.number_input("Warm-up", *SAMPLE_RANGES["warmup"], defaults["warmup"],
                             key=f"matrix_warmup:{dataset.name}")
    samples = c3.number_input("Samples per chain", *SAMPLE_RANGES["samples"], defaults["samples"],
                              key=f"matrix_samples:{dataset.name}")
    keep_every = c4.number_input("Store every n-th", *SAMPLE_RANGES["keep_every"], defaults["keep_every"],
                                 key=f"matrix_keep:{dataset.name}")
    start = st.form_submit_button(f"Build the {K}×{K} matrix", type="primary")
if start:
    kwargs = {"chains": int(chains), "warmup": int(warmup), "samples": int(samples), "keep_every": int(keep_every)}
    _ui.start_sampling(dataset.name, TargetSpec.matrix(names), **kwargs)

def is_matrix(run) -> bool:
    """An ambiguity-matrix run on this data set (typed fields of the stored configuration)."""
    config = config_of(run)
    return config is not None and config.is_matrix and config.dataset == dataset.name


_ui.active_runs("matrix", ("sample",), is_matrix, reset=("matrix_run",))
finished = history.finished(ws.store, "sample", is_matrix)
if not finished:
    if history.in_flight(ws.store, ("sample",), is_matrix):
        st.info("The matrix is being built (progress above); it appears here when the run ends.")
    else:
        st.info(f"No matrix yet: press Build (all {K * (K - 1) // 2} pairs run as one batch; digits: about "
                "2 minutes, MNIST about 8 on 2 cores).")
    st.stop()
by_id = {r.id: r for r in finished}
run = by_id[st.selectbox("Matrix run", list(by_id), key="matrix_run",
                         format_func=lambda i: f"run {i} · {config_of(by_id[i]).chains} chains/pair")]

result = result_of(run)
_ui.shards_not_done(result.not_done)
stored = sample_queries.samples(ws.store, run.id)
best = {index: sample["image"] for index, sample in best_hit_per_target(stored).items()}
representatives = []
for c in range(K):  # a test image of each class for the edges (grey where the data set has none)
    members = (dataset.test_labels == c).nonzero()
    representatives.append(dataset.test_images[members[0, 0]].numpy() if len(members) else None)
cells = figures.matrix_cells(names, result.targets, best)
pairs = [(first, second) for first, second, _, _ in cells]
figure = figures.matrix_figure(representatives, cells)
reached = result.reached
st.caption(f"{reached} of {len(pairs)} pairs reached · edges: a test image of each class · click a cell to open it")
event = st.plotly_chart(figure, on_select="rerun", selection_mode="points", key="matrix_chart")
points = event.selection.points if event and hasattr(event, "selection") else []
clicked = [p.get("point_index", p.get("pointIndex")) for p in points if p.get("curve_number", p.get("curveNumber")) == 1]
pair_names = [f"{names[a]} vs {names[b]}" for a, b in pairs]
if clicked and clicked[0] is not None and st.session_state.get("matrix_clicked") != clicked[0]:
    # a click on a cell opens its pair (the picker below is keyed, so it is set through its state)
    st.session_state["matrix_clicked"] = clicked[0]
    st.session_state["matrix_pair"] = clicked[0] // 2
picked = st.selectbox("Pair", range(len(pairs)), format_func=lambda i: pair_names[i], key="matrix_pair")
entry = result.targets[picked]
pair_samples = [s for s in stored if s["target_index"] == entry.get("target_index", picked)]
shown = best_samples(pair_samples, misses_limit=10)
keep_every = config_of(run).keep_every
st.write(f"**{entry['description']}** · {entry['summary']['hits']} of {entry['summary']['kept']} samples are hits "
         f"({entry['hit_rate'] * 100:.0f} %) · "
         + ("FAILED: closest samples shown" if entry["failed"] else
            f"{len(shown)} hits stored (every {keep_every}th sample is stored) and shown below"))
if shown:
    _ui.show_picture(torch.tensor(np.stack([s["image"] for s in shown[:30]])), columns=10)
