"""One-page HTML reports for stakeholders: a run's target, settings, summary table and gallery."""

from __future__ import annotations

import base64
import html
import time

import numpy as np

from probe_core.reporting.render import image_grid, png_bytes, upscale_for_display


def _image_tag(images, columns: int = 10) -> str:
    picture = image_grid(images, columns=columns, scale=upscale_for_display(images.shape[-2]))
    return f'<img alt="samples" src="data:image/png;base64,{base64.b64encode(png_bytes(picture)).decode()}">'


def _table(rows: list[dict]) -> str:
    if not rows:
        return "<p>(nothing)</p>"
    header = "".join(f"<th>{html.escape(str(k))}</th>" for k in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_cell(v))}</td>" for v in row.values()) + "</tr>"
                   for row in rows)
    return f"<table><tr>{header}</tr>{body}</table>"


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


MAP_COLOURS = ("#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22",
               "#7f7f7f")


def scatter_svg(groups: list[tuple[str, object, str]], size: int = 480) -> str:
    """A small self-contained SVG scatter plot of 2-D point groups: ``(name, xy (N, 2), colour)`` each,
    drawn in order (the first underneath), with a legend."""
    points = [np.asarray(xy, dtype=float) for _, xy, _ in groups if len(xy)]
    if not points:
        return ""
    everything = np.concatenate(points)
    low, high = everything.min(0), everything.max(0)
    scale = (size - 40) / np.maximum(high - low, 1e-9)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{size}" height="{size + 20 * len(groups)}" '
             f'viewBox="0 0 {size} {size + 20 * len(groups)}"><rect width="100%" height="100%" fill="white"/>']
    for name, xy, colour in groups:
        for x, y in (np.asarray(xy, dtype=float) - low) * scale + 20:
            parts.append(f'<circle cx="{x:.1f}" cy="{size - y:.1f}" r="2" fill="{colour}" fill-opacity="0.6"/>')
    for row, (name, xy, colour) in enumerate(groups):
        parts.append(f'<circle cx="12" cy="{size + 10 + 20 * row}" r="5" fill="{colour}"/><text x="24" '
                     f'y="{size + 14 + 20 * row}" font-size="12">{html.escape(name)} ({len(xy)})</text>')
    return "".join(parts) + "</svg>"


def html_report(title: str, settings: dict, rows: list[dict], galleries: list[tuple[str, object]],
                notes: str = "", figures: list[tuple[str, str]] = ()) -> str:
    """A self-contained HTML page (images inlined as PNG).

    Parameters
    ----------
    settings : dict
        Shown as a two-column table (target, models, sampler settings, ...).
    rows : list of dict
        The summary table.
    galleries : list of (caption, images)
        Images are (N, C, H, W) tensors or arrays in [0, 1]; empty ones are skipped.
    figures : list of (caption, svg)
        Inline SVG figures (e.g. :func:`scatter_svg`); empty ones are skipped.
    """
    parts = [f"<h1>{html.escape(title)}</h1>",
             f"<p class=meta>Model Probe report, {time.strftime('%Y-%m-%d %H:%M')}</p>",
             "<h2>Settings</h2>", _table([{"setting": k, "value": v} for k, v in settings.items()]),
             "<h2>Summary</h2>", _table(rows)]
    if notes:
        parts.append(f"<p>{html.escape(notes)}</p>")
    for caption, images in galleries:
        if images is not None and len(images):
            parts += [f"<h2>{html.escape(caption)}</h2>", _image_tag(images)]
    for caption, svg in figures:
        if svg:
            parts += [f"<h2>{html.escape(caption)}</h2>", svg]
    return _page(title, parts)


def _page(title: str, parts: list[str]) -> str:
    style = ("body{font-family:sans-serif;max-width:960px;margin:2em auto;color:#222}"
             "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}"
             "img{image-rendering:pixelated;max-width:100%}.meta{color:#777}")
    return f"<!doctype html><html><head><meta charset=utf-8><title>{html.escape(title)}</title>" \
           f"<style>{style}</style></head><body>{''.join(parts)}</body></html>"


def accuracy_colour(accuracy: float | None) -> str:
    """A background colour for an accuracy in [0, 1]: red (0) through yellow to green (1); grey for None."""
    if accuracy is None:
        return "#eeeeee"
    red, green = (255, int(510 * accuracy)) if accuracy < 0.5 else (int(510 * (1 - accuracy)), 200)
    return f"#{red:02x}{min(green, 200):02x}60"


def suite_html_report(title: str, suite: dict, check_names: list[str], classifiers: list[str],
                      accuracies: list[list[float | None]], sections: list[dict]) -> str:
    """A regression suite as one self-contained page: the checks × classifiers matrix, then each check.

    Parameters
    ----------
    suite : dict
        ``name``, ``dataset``, ``version``.
    accuracies : list of list
        One row per check, one accuracy (or None: not scored) per classifier.
    sections : list of dict
        Per check: ``title``, ``facts`` (dict), ``images`` (N, C, H, W) in [0, 1], ``scores`` (rows).
    """
    header = "".join(f"<th>{html.escape(c)}</th>" for c in classifiers)
    body = "".join(
        f"<tr><td>{html.escape(name)}</td>" + "".join(
            f'<td style="background:{accuracy_colour(a)}">{"–" if a is None else f"{a * 100:.0f} %"}</td>'
            for a in row) + "</tr>"
        for name, row in zip(check_names, accuracies))
    parts = [f"<h1>{html.escape(title)}</h1>",
             f"<p class=meta>Model Probe suite report, {time.strftime('%Y-%m-%d %H:%M')} · data set "
             f"{html.escape(suite['dataset'])} · suite version {suite['version']}</p>",
             "<h2>Accuracy per check and classifier</h2>",
             f"<table><tr><th>check</th>{header}</tr>{body}</table>"]
    for section in sections:
        parts += [f"<h2>{html.escape(section['title'])}</h2>",
                  _table([{"fact": k, "value": v} for k, v in section["facts"].items()])]
        if section["images"] is not None and len(section["images"]):
            parts.append(_image_tag(section["images"]))
        parts.append(_table(section["scores"]))
    return _page(title, parts)
