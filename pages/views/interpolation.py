"""Interpolation: samples along a graded path from one class to another, with both confidence curves (Fig. 8)."""

import numpy as np
import plotly.graph_objects as go
import streamlit as st
import torch

from pages import ui as _ui
from probe_core.api.ui import (
    PATH_PAGE_DEFAULTS,
    SAMPLE_RANGES,
    PathKind,
    TargetSpec,
    best_samples,
    config_of,
    result_of,
)
from probe_core.bayestrex import queries as sample_queries
from probe_core.runs import history

ws = _ui.workspace()
st.title("Interpolation")
st.markdown("Targets p(A) = 1 − t, p(B) = t for t from 0 to 1: how does the classifier's evidence move from one "
            "class to the other, and what do the in-between images look like?")

dataset, classifier, generator, names = _ui.page_models()

with st.form("path-form", enter_to_submit=False):
    c1, c2, c3, c4, c5 = st.columns(5)
    source = c1.selectbox("From class", names, index=min(8, len(names) - 2), key="path_from")
    destination = c2.selectbox("To class", names, index=len(names) - 1, key="path_to")
    steps = c3.number_input("Steps", *PathKind.steps_range, PATH_PAGE_DEFAULTS["steps"], key="path_steps")
    chains = c4.number_input("Chains per step", *SAMPLE_RANGES["chains"], PATH_PAGE_DEFAULTS["chains"],
                             key="path_chains")
    iterations = c5.number_input("Warm-up = samples", *SAMPLE_RANGES["samples"], PATH_PAGE_DEFAULTS["iterations"],
                                 key="path_iterations")
    start = st.form_submit_button("Sample the path", type="primary")
if start:
    if source == destination:
        st.error("Pick two different classes.")
    else:
        spec = TargetSpec.path_between(names, names.index(source), names.index(destination), int(steps))
        kwargs = {"chains": int(chains), "warmup": int(iterations), "samples": int(iterations),
                  "keep_every": PATH_PAGE_DEFAULTS["keep_every"]}
        _ui.start_sampling(dataset.name, spec, **kwargs)


def is_path(run) -> bool:
    """A path run on this data set (typed fields of the stored configuration)."""
    config = config_of(run)
    return config is not None and config.path is not None and config.dataset == dataset.name


_ui.active_runs("path", ("sample",), is_path, reset=("path_run",))
finished = history.finished(ws.store, "sample", is_path)
if not finished:
    if history.in_flight(ws.store, ("sample",), is_path):
        st.info("A path is being sampled (progress above); the strip appears here when the run ends.")
    else:
        st.info("No path sampled yet: pick two classes and press Sample.")
    st.stop()
by_id = {r.id: r for r in finished}
run = by_id[st.selectbox("Path run", list(by_id), key="path_run",
                         format_func=lambda i: f"run {i} · {by_id[i].config['target']}")]
first, second, count = config_of(run).path
result = result_of(run)
stored = sample_queries.samples(ws.store, run.id)
strip, achieved_a, achieved_b, hit_rates = [], [], [], []
for index in range(count):
    rows = [s for s in stored if s["target_index"] == index]
    hits = [s for s in rows if s["hit"]]
    chosen = best_samples(rows, 1, 1)[0] if rows else None
    channels, height, width = dataset.image_shape
    strip.append(chosen["image"] if chosen else np.zeros((channels, height, width), np.float32))
    pool = hits or rows
    achieved_a.append(float(np.mean([s["confidences"][first] for s in pool])) if pool else np.nan)
    achieved_b.append(float(np.mean([s["confidences"][second] for s in pool])) if pool else np.nan)
    hit_rates.append(result.targets[index]["hit_rate"])
t = np.linspace(0, 1, count)
st.caption(f"Best sample per step (a hit where there is one), from p({names[first]}) = 1 to p({names[second]}) = 1")
_ui.show_picture(torch.tensor(np.stack(strip)), columns=count)
figure = go.Figure()
figure.add_trace(go.Scatter(x=t, y=achieved_a, name=f"p({names[first]}) achieved", line=dict(color="#1f77b4")))
figure.add_trace(go.Scatter(x=t, y=achieved_b, name=f"p({names[second]}) achieved", line=dict(color="#d62728")))
figure.add_trace(go.Scatter(x=t, y=1 - t, name=f"p({names[first]}) target", line=dict(color="#1f77b4", dash="dot")))
figure.add_trace(go.Scatter(x=t, y=t, name=f"p({names[second]}) target", line=dict(color="#d62728", dash="dot")))
figure.add_trace(go.Bar(x=t, y=hit_rates, name="hit rate", marker_color="rgba(0,0,0,0.15)", width=0.5 / count))
figure.update_layout(height=360, xaxis=dict(title="t"), yaxis=dict(range=[0, 1.02], title="confidence"),
                     margin=dict(l=10, r=10, t=10, b=10), legend=dict(orientation="h"))
st.plotly_chart(figure, key="path_curves")
