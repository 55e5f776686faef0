"""One-page HTML reports for stakeholders: a run's target, settings, summary table and gallery."""

from __future__ import annotations

import base64
import html
import time

from probe_core.render import image_grid, png_bytes, upscale_for_display


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


def html_report(title: str, settings: dict, rows: list[dict], galleries: list[tuple[str, object]],
                notes: str = "") -> str:
    """A self-contained HTML page (images inlined as PNG).

    Parameters
    ----------
    settings : dict
        Shown as a two-column table (target, models, sampler settings, ...).
    rows : list of dict
        The summary table.
    galleries : list of (caption, images)
        Images are (N, C, H, W) tensors or arrays in [0, 1]; empty ones are skipped.
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
    style = ("body{font-family:sans-serif;max-width:960px;margin:2em auto;color:#222}"
             "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}"
             "img{image-rendering:pixelated;max-width:100%}.meta{color:#777}")
    return f"<!doctype html><html><head><meta charset=utf-8><title>{html.escape(title)}</title>" \
           f"<style>{style}</style></head><body>{''.join(parts)}</body></html>"
