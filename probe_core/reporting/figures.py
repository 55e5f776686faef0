"""The Plotly figures of the dashboard, built from stored results: the pages and the result objects'
``.plot()`` (:mod:`probe_core.api`) draw the same ones.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.colors import sample_colorscale

from probe_core.sampling.targets import report_classes

MISSING_CELL_GREY = 0.35


def confidence_bars(probs, class_names: Sequence[str], title: str | None = None, height: int = 160) -> go.Figure:
    """A small bar chart of one confidence vector, shape (K,), the largest in red."""
    values = [float(p) for p in probs]
    figure = go.Figure(go.Bar(x=list(class_names), y=values, marker_color=[
        "#d62728" if v == max(values) else "#1f77b4" for v in values]))
    figure.update_layout(height=height, margin=dict(l=10, r=10, t=30 if title else 10, b=10), title=title,
                         yaxis=dict(range=[0, 1], title=None), xaxis=dict(type="category"))
    return figure


def _chains_as_one_line(iterations: list[int], values: np.ndarray) -> tuple[list, list]:
    """Every chain's series in one line, chains separated by gaps: values (T, n) -> x and y of length n * (T + 1)."""
    gap = [None]
    xs, ys = [], []
    for column in range(values.shape[1]):
        xs += list(iterations) + gap
        ys += values[:, column].tolist() + gap
    return xs, ys


def trace_figure(trace: dict) -> dict:
    """A run's live trace as one chart of three panels with four lines, whatever the number of chains.

    ``trace`` holds ``iteration`` (T,), ``logdensity`` and ``confidence`` (T, chains), ``acceptance`` and
    ``step_size`` (T,). One line per series (the chains joined with gaps), because the server's cost of a
    refresh and the browser's cost of a redraw both grow with the number of lines: a live view must not
    take CPU from the run it shows. Returns the figure as a dict (cheaper to send than a ``go.Figure``).
    """
    panels = (("log density per chain", "logdensity"), ("achieved target confidence", "confidence"))
    traces = []
    for panel, (_, series) in enumerate(panels, start=1):
        values = np.array(trace[series], dtype=float) if trace[series] else np.zeros((0, 0))
        xs, ys = _chains_as_one_line(trace["iteration"], values)
        traces.append(dict(type="scatter", x=xs, y=ys, mode="lines", line=dict(width=1), showlegend=False,
                           name=series, xaxis=f"x{panel}", yaxis=f"y{panel}", hoverinfo="skip"))
    traces.append(dict(type="scatter", x=trace["iteration"], y=trace["acceptance"], name="acceptance",
                       xaxis="x3", yaxis="y3"))
    traces.append(dict(type="scatter", x=trace["iteration"], y=trace["step_size"], name="step size",
                       xaxis="x3", yaxis="y4"))
    thirds = ((0.0, 0.29), (0.355, 0.645), (0.71, 1.0))
    titles = [title for title, _ in panels] + ["acceptance and step size"]
    layout = dict(height=260, margin=dict(l=10, r=10, t=35, b=10), legend=dict(orientation="h"),
                  yaxis2=dict(anchor="x2", range=[0, 1]), yaxis3=dict(anchor="x3"),
                  yaxis4=dict(anchor="x3", overlaying="y3", side="right", type="log"),
                  yaxis=dict(anchor="x"),
                  annotations=[dict(text=title, x=sum(domain) / 2, y=1.0, xref="paper", yref="paper",
                                    xanchor="center", yanchor="bottom", showarrow=False)
                               for title, domain in zip(titles, thirds)])
    for number, domain in enumerate(thirds, start=1):
        layout[f"xaxis{number}"] = dict(domain=list(domain), anchor=f"y{number}")
    return dict(data=traces, layout=layout)


def achieved_violin(confidences: np.ndarray, class_names: Sequence[str], shown: Sequence[str],
                    title: str = "Achieved confidences of stored samples") -> go.Figure:
    """One violin per class in ``shown``: the confidences (N, K) of a target's stored samples in that class."""
    figure = go.Figure()
    for name in shown:
        index = list(class_names).index(name) if name in class_names else int(name)
        figure.add_trace(go.Violin(y=np.asarray(confidences)[:, index], name=f"p({name})", box_visible=True,
                                   meanline_visible=True))
    figure.update_layout(height=300, title=title, yaxis=dict(range=[0, 1]), margin=dict(l=10, r=10, t=35, b=10))
    return figure


def matrix_figure(representatives: Sequence[np.ndarray | None], cells: Sequence[tuple[int, int, np.ndarray | None, str]],
                  image_shape: tuple[int, int, int] | None = None) -> go.Figure:
    """The ambiguity matrix (Bayes-TrEx Fig. 5): each pair's most ambiguous image, black where none was found.

    Parameters
    ----------
    representatives : sequence of ndarray (C, H, W) or None
        An image of each of the K classes for the top and left edges (None: grey).
    cells : sequence of (first, second, image, label)
        One per class pair: the pair's image (C, H, W) in [0, 1] or None (not reached), and its hover text.
        The image is drawn at (first, second) and (second, first).
    image_shape : tuple of int, optional
        (C, H, W), needed only when no image at all is given.

    Returns
    -------
    go.Figure
        The picture, and a scatter trace (curve 1) with two points per cell, in ``cells`` order, for clicks.
    """
    shape = next((np.asarray(image).shape for image in [*representatives, *(cell[2] for cell in cells)]
                  if image is not None), image_shape)
    channels, height, width = shape
    count, tile = len(representatives), height + 1
    canvas = np.full((channels, (count + 1) * tile, (count + 1) * tile), MISSING_CELL_GREY, dtype=np.float32)
    for c, image in enumerate(representatives):
        if image is not None:
            canvas[:, 0:height, (c + 1) * tile:(c + 1) * tile + width] = image
            canvas[:, (c + 1) * tile:(c + 1) * tile + height, 0:width] = image
    centres, labels = [], []
    for first, second, image, label in cells:
        picture = np.zeros(shape, np.float32) if image is None else np.asarray(image)
        for row, column in ((first, second), (second, first)):
            canvas[:, (row + 1) * tile:(row + 1) * tile + height, (column + 1) * tile:(column + 1) * tile + width] = picture
            centres.append(((column + 1) * tile + width / 2, (row + 1) * tile + height / 2))
            labels.append(label)
    rgb = (np.repeat(canvas, 3, axis=0) if channels == 1 else canvas).transpose(1, 2, 0)
    figure = go.Figure(go.Image(z=(np.clip(rgb, 0, 1) * 255).astype(np.uint8)))
    figure.add_trace(go.Scatter(x=[c[0] for c in centres], y=[c[1] for c in centres], mode="markers",
                                marker=dict(size=18, opacity=0.01), hovertext=labels, hoverinfo="text"))
    figure.update_layout(height=620, width=620, margin=dict(l=0, r=0, t=0, b=0), xaxis=dict(visible=False),
                         yaxis=dict(visible=False))
    return figure


def matrix_cells(class_names: Sequence[str], targets: Sequence[dict], best_images: dict[int, np.ndarray]
                 ) -> list[tuple[int, int, np.ndarray | None, str]]:
    """The cells of :func:`matrix_figure` from a matrix run's per-target entries (``spec`` ``ambiguous:i,j``,
    ``summary``, optional ``target_index`` where a lost shard skipped targets) and its best hit image per
    stored target index."""
    cells = []
    for index, entry in enumerate(targets):
        first, second = report_classes(entry, class_names)
        summary = entry["summary"]
        label = (f"{class_names[first]} vs {class_names[second]}: {summary['hits']} of {summary['kept']} samples "
                 f"are hits" if summary["hits"] else f"{class_names[first]} vs {class_names[second]}: not reached")
        cells.append((first, second, best_images.get(entry.get("target_index", index)), label))
    return cells


def agreement_figure(agreement: dict) -> go.Figure | None:
    """The Label page's annotator agreement (Defuse Fig. 7): per image, the share voting for its majority
    label, mean ± standard error over failure regions, other clusters and all (None before any label).

    ``agreement`` is :func:`probe_core.defuse.labels.agreement_summary`'s dict.
    """
    if not agreement.get("clusters_labelled"):
        return None
    parts = [("failure regions", agreement["failure_regions"]), ("other clusters", agreement["other_clusters"]),
             ("all", agreement["all"])]
    shown = [(name, part) for name, part in parts if part["mean"] is not None]
    figure = go.Figure(go.Bar(
        x=[name for name, _ in shown], y=[part["mean"] for _, part in shown],
        error_y=dict(type="data", array=[part["se"] or 0.0 for _, part in shown]),
        text=[f"{part['mean'] * 100:.0f} % ({part['images']} images)" for _, part in shown],
        marker_color=["#d62728", "#7f7f7f", "#1f77b4"][:len(shown)]))
    figure.update_layout(height=300, title="Annotator agreement per image (mean ± standard error, as in the paper)",
                         yaxis=dict(range=[0, 1.05], title="share voting for the majority", tickformat=".0%"),
                         margin=dict(l=10, r=10, t=40, b=10))
    return figure


def tradeoff_figure(sweep: Sequence[dict], baseline_sweep: Sequence[dict]) -> go.Figure:
    """The Finetune page's trade-off over λ: test and failure-region accuracy of Defuse and of the baseline.

    Each sweep holds one dict per λ with ``lambda``, ``test_accuracy`` and ``failure_accuracy``.
    """
    figure = go.Figure()
    for points, name, dash in ((sweep, "Defuse", None), (baseline_sweep, "baseline", "dot")):
        lam = [s["lambda"] for s in points]
        figure.add_trace(go.Scatter(x=lam, y=[s["test_accuracy"] for s in points], name=f"{name}: test accuracy",
                                    line=dict(dash=dash, color="#1f77b4")))
        figure.add_trace(go.Scatter(x=lam, y=[s["failure_accuracy"] for s in points], name=f"{name}: failure regions",
                                    line=dict(dash=dash, color="#d62728")))
    figure.update_layout(height=360, title="Trade-off over λ", xaxis=dict(type="log", title="λ"),
                         yaxis=dict(range=[0, 1.02], title="accuracy"), margin=dict(l=10, r=10, t=40, b=10))
    return figure


def accuracy_bars(names: Sequence[str], accuracies: Sequence[float], title: str,
                  reference: Sequence[float] | None = None, reference_name: str = "") -> go.Figure:
    """Accuracy per class or per check (and, grey, a reference accuracy of each, e.g. the model it was found on)."""
    figure = go.Figure(go.Bar(x=list(names), y=list(accuracies), name="accuracy", marker_color="#1f77b4"))
    if reference is not None:
        figure.add_trace(go.Bar(x=list(names), y=list(reference), name=reference_name, marker_color="#aaaaaa"))
    figure.update_layout(height=320, title=title, barmode="group", xaxis=dict(type="category"),
                         yaxis=dict(range=[0, 1.02], tickformat=".0%"), margin=dict(l=10, r=10, t=40, b=10))
    return figure


def confusion_figure(true_labels: np.ndarray, predictions: np.ndarray, class_names: Sequence[str],
                     title: str = "Failures: true class (rows) and prediction (columns)") -> go.Figure:
    """Counts of (true class, prediction) pairs, shape (K, K), as a heat map."""
    count = len(class_names)
    counts = np.zeros((count, count), dtype=int)
    np.add.at(counts, (np.asarray(true_labels, int), np.asarray(predictions, int)), 1)
    figure = go.Figure(go.Heatmap(z=counts, x=list(class_names), y=list(class_names), colorscale="Reds",
                                  text=counts, texttemplate="%{text}"))
    figure.update_layout(height=420, title=title, xaxis=dict(type="category", title="prediction"),
                         yaxis=dict(type="category", title="true class", autorange="reversed"),
                         margin=dict(l=10, r=10, t=40, b=10))
    return figure


def failure_map_figure(embedding: dict, class_names: Sequence[str], predictions: np.ndarray,
                       true_labels: np.ndarray, highlight: int | None = None) -> go.Figure:
    """The failure map: training codes in grey and failures coloured by kept cluster, in the 2-D embedding.

    Parameters
    ----------
    embedding : dict
        :func:`probe_core.defuse.review.embedding`'s arrays: ``train_xy`` (N, 2), ``train_labels`` (N,),
        ``failure_xy`` (M, 2), ``failure_cluster`` (M,) (-1: no kept cluster) and ``failure_index`` (M,).
    class_names : sequence of str
    predictions, true_labels : np.ndarray
        Of every failure of the run, indexed by ``failure_index``.
    highlight : int, optional
        A kept cluster's index: it is drawn large and on top, every other failure faint and grey.

    Returns
    -------
    go.Figure
        One trace for the training codes, then one per cluster (the highlighted one last). Points carry
        ``customdata``: failure i -> i, training image j -> -(j + 1).
    """
    figure = go.Figure()
    figure.add_trace(go.Scattergl(x=embedding["train_xy"][:, 0], y=embedding["train_xy"][:, 1], mode="markers",
                                  name="training data", marker=dict(color="lightgrey", size=4),
                                  customdata=-(np.arange(len(embedding["train_xy"])) + 1),
                                  hovertext=[f"training image, class {class_names[c]}"
                                             for c in embedding["train_labels"]], hoverinfo="text"))
    index, assigned = embedding["failure_index"], embedding["failure_cluster"]
    kept = [c for c in np.unique(assigned) if c >= 0]
    # one distinct colour per cluster however many there are (a qualitative palette repeats after 10-24)
    colours = dict(zip(kept, sample_colorscale("Turbo", list(np.linspace(0.05, 0.95, max(len(kept), 2))))))
    order = sorted(np.unique(assigned), key=lambda cluster: cluster == highlight)
    for cluster in order:
        members = assigned == cluster
        rows = index[members]
        hover = [f"failure {i}: predicted {class_names[predictions[i]]}, true {class_names[true_labels[i]]}"
                 for i in rows]
        colour = "black" if cluster < 0 else colours[cluster]
        marker = dict(size=4, color=colour, opacity=0.7)
        if highlight is not None:
            marker = dict(size=8, color=colour, opacity=1.0) if cluster == highlight else \
                dict(size=3, color="grey", opacity=0.15)
        figure.add_trace(go.Scattergl(
            x=embedding["failure_xy"][members, 0], y=embedding["failure_xy"][members, 1], mode="markers",
            name="no kept cluster" if cluster < 0 else f"cluster {cluster + 1}", customdata=rows, marker=marker,
            hovertext=hover, hoverinfo="text"))
    # the legend sits below the map, clear of the tool bar in the top right corner
    figure.update_layout(height=560, margin=dict(l=10, r=10, t=30, b=10), dragmode="lasso",
                         legend=dict(itemsizing="constant", orientation="h", yanchor="top", y=-0.04, x=0))
    return figure
