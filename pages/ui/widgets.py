"""Small widgets the pages compose: pictures, tables, run pickers and progress, plots, live views."""

from __future__ import annotations

import base64
import functools
import time
from pages.ui.text import plain
from pathlib import Path
from typing import Callable

import pandas as pd
import streamlit as st
import torch

from pages.ui.session import (
    current_dataset,
    device,
    job_manager,
    load_model,
    model_ref,
    session_model,
    session_models,
    set_model_ref,
    workspace,
)
from probe_core.api.ui import FD_HELP, FD_METRIC, generator_dataset, split_view, submit_training
from probe_core.errors import ProbeError
from probe_core.reporting.render import image_grid, upscale_for_display
from probe_core.runs import history

# Seconds between refreshes of a live view. Each refresh re-reads the run from the database and
# redraws its charts in every watching tab; every 5 s keeps that cost small next to the run itself
# (benchmarks/watch.py: one tab on the same 2 cores, 1.09x) while progress still moves visibly.
LIVE_REFRESH_S = 5.0


def show_picture(images: torch.Tensor, caption: str | None = None, columns: int = 8, height: int = 64) -> None:
    """Show (N, C, H, W) images as one grid picture, each scaled up (nearest neighbour) to about ``height`` pixels."""
    scale = upscale_for_display(images.shape[-2], height)
    st.image(image_grid(images, columns=columns, scale=scale), caption=caption)


def models_table(models: list[dict], verdicts: dict | None = None) -> pd.DataFrame:
    """The stored models as a table; ``verdicts`` (model id -> its :class:`~probe_core.models.checks.ModelVerdict`)
    adds a check column."""
    rows = []
    for m in models:
        metrics = m["metrics"]
        rows.append({
            "id": m["id"],
            "kind": m["kind"],
            **({"check": verdicts[m["id"]].words if m["id"] in verdicts else ""} if verdicts is not None else {}),
            "data": m["spec"].get("dataset_view", m["dataset"]),
            "test accuracy": metrics.get("test_accuracy"),
            "test ELBO": metrics.get("test_elbo"),
            "recon MSE": metrics.get("test_reconstruction_mse"),
            "FD-clf": metrics.get(FD_METRIC),
            "train s": metrics.get("train_seconds"),
            "created": time.strftime("%Y-%m-%d %H:%M", time.localtime(m["created_at"])),
        })
    return pd.DataFrame(rows)


MODELS_COLUMN_CONFIG = {
    "check": st.column_config.TextColumn("check", help="classifiers: accuracy on the test images; generators: the "
                                         "generator check through the data set's default classifier (ok or weak, "
                                         "with why)", width="large"),
    "test accuracy": st.column_config.ProgressColumn("test accuracy", min_value=0.0, max_value=1.0, format="percent",
                                                     color="blue"),
    "FD-clf": st.column_config.NumberColumn("FD-clf", help=FD_HELP, format="%.1f"),
    "test ELBO": st.column_config.NumberColumn("test ELBO", help="nats per image, higher is better", format="%.1f"),
    "recon MSE": st.column_config.NumberColumn("recon MSE", help="per pixel, at the posterior mean", format="%.4f"),
}


def run_status_line(run) -> str:
    icon = {"running": ":material/autorenew:", "queued": ":material/schedule:", "done": ":material/check_circle:",
            "failed": ":material/error:", "cancelled": ":material/stop_circle:", "interrupted": ":material/warning:"}
    left = history.describe_time_left(history.time_left(run))
    return (f"{icon.get(run.status, '')} run {run.id} · {run.kind} · {run.status} · {run.message}"
            + (f" · {left}" if left else ""))


def model_choice(kind: str, dataset: str) -> None:
    """A picker for the session's classifier or generator: zoo models of the data set, or a plugin file."""
    ws = workspace()
    if kind == "generator":
        ids = ws.registry.generator_choices(dataset)
    else:
        ids = ws.registry.classifier_choices(dataset)
    options = ["default"] + ids + ["plugin file…"]
    current = model_ref(kind, dataset)
    index = options.index(current) if current in options else len(options) - 1
    choice = st.selectbox(f"{kind.capitalize()} for this session", options, index=index,
                          key=f"{kind}_pick:{dataset}",
                          help="'default' is the data set's default zoo model; a plugin is a .py file")
    if choice == "plugin file…":
        path = st.text_input(f"{kind.capitalize()} plugin path", value="" if current in options else current,
                             key=f"{kind}_plugin_path:{dataset}", placeholder="/path/to/my_model.py").strip()
        if not path:
            return
        try:  # checked here, where it is typed, not later on another page
            loaded = load_model(path, kind, dataset)
        except ProbeError as exc:
            st.error(f"Cannot use this plugin: {plain(exc)}")
            return
        set_model_ref(kind, loaded.id, dataset)
        st.caption(f"Using `{loaded.id}`")
    else:
        set_model_ref(kind, choice, dataset)


def run_progress(run, cancel_key: str) -> None:
    """A run's progress bar, status line and (while it is active) a Stop button."""
    st.progress(min(max(run.progress, 0.0), 1.0), text=run_status_line(run))
    if run.active:
        if st.button("Stop", key=cancel_key, help="stops at the next progress report; what was found is kept"):
            job_manager().cancel(run.id)
    elif run.status == "failed":
        st.error(f"Run {run.id} failed: {run.error}")
    elif run.status == "interrupted":
        st.warning(f"Run {run.id} was interrupted (the process running it stopped); what it stored is kept.")


def shards_not_done(missing: list[dict] | None) -> None:
    """A warning naming the shards of a sharded run that gave no result (failed after their retry, or lost):
    its result's ``not_done`` entries (``covers``, ``error``)."""
    if missing:
        st.warning(f"{len(missing)} shard(s) of this run were not done, so their part is missing: " + "; ".join(
            f"{entry['covers']} ({entry['error']})" for entry in missing))


def pick_run(kind: str, label: str, key: str, only_done: bool = False, describe=None, dataset: str | None = None,
             on_change=None):
    """A select box over runs of a kind, newest first; returns the chosen run or None.

    The options are run ids (a run's other fields change while it runs), so the choice
    sticks across reruns; set ``st.session_state[key] = run_id`` before calling to select one.
    With ``dataset``, only runs on that data set are offered (their classes are the page's).
    """
    runs = history.runs(workspace().store, kind, (lambda r: r.status == "done") if only_done else None)
    if dataset is not None:
        runs = [r for r in runs if r.config.get("dataset", dataset) == dataset]
    if not runs:
        return None
    by_id = {r.id: r for r in runs}
    if key in st.session_state and st.session_state[key] not in by_id:
        del st.session_state[key]
    describe = describe or (lambda r: f"run {r.id} · {r.status} · {time.strftime('%H:%M', time.localtime(r.created_at))}")
    chosen = st.selectbox(label, list(by_id), format_func=lambda run_id: describe(by_id[run_id]), key=key,
                          on_change=on_change)
    return by_id[chosen]


# The distillation run the Failures, Label and Finetune pages follow together: labels given on one page are the
# ones the next page finetunes with. Set when a person picks a run on any of them; cleared when a new one ends.
FOLLOWED_DISTILL_RUN = "defuse_followed_run"


def pick_distill_run(key: str):
    """The picker over finished Defuse distillation runs (Failures, Label and Finetune pages), all three on the
    same run: a pick on one page is the run the other two open with, and the page says which run it is."""
    from probe_core.defuse.queries import DISTILL

    def describe(run) -> str:
        summary = run.result or {}
        return f"run {run.id} · {summary.get('clusters', '?')} clusters from {summary.get('failures', '?')} failures"

    followed = st.session_state.get(FOLLOWED_DISTILL_RUN)
    if followed is not None:
        st.session_state[key] = followed  # pick_run drops it when that run is gone
    run = pick_run(DISTILL, "Distillation run", key, only_done=True, describe=describe,
                   on_change=lambda: st.session_state.__setitem__(FOLLOWED_DISTILL_RUN, st.session_state[key]))
    if run is not None:
        st.session_state[FOLLOWED_DISTILL_RUN] = run.id
        st.caption(f"Following distillation run {run.id}: the Failures, Label and Finetune pages all use this run.")
    return run


def png_download(images, label: str, file_name: str, key: str, columns: int = 8) -> None:
    """A download button for (N, C, H, W) images as one PNG grid."""
    from probe_core.reporting.render import png_bytes

    scale = upscale_for_display(images.shape[-2])
    st.download_button(label, png_bytes(image_grid(images, columns=columns, scale=scale)), file_name=file_name,
                       mime="image/png", key=key)


@functools.lru_cache(maxsize=1)
def _hover_script() -> str:
    return (Path(__file__).parent / "hover_image.js").read_text()


def keys_to_page() -> None:
    """Keep button shortcuts working after a dropdown was used (``keys_to_page.js``: the focus is released)."""
    script = (Path(__file__).parent / "keys_to_page.js").read_text()
    st.components.v2.component("model_probe_keys_to_page", html="<span></span>", js=script)(key="keys_to_page")


def hover_images(chart_key: str, scope: str, image_of: Callable[[int], tuple[torch.Tensor, str]]) -> None:
    """Show the image of the point under the mouse beside it, on the plotly chart keyed ``chart_key``.

    Streamlit's ``plotly_chart`` reports clicks and selections but not hovers, so a small
    component (``_hover_image.js``) listens to the chart's ``plotly_hover`` events in the page.
    Points carry an integer ``customdata``; for a hovered point the component asks Python,
    in a fragment rerun, for ``image_of(customdata)``.

    Parameters
    ----------
    chart_key : str
        The ``key`` the chart was drawn with.
    scope : str
        What the points' ids refer to (e.g. a run id); images are cached in the browser per scope.
    image_of : callable
        ``customdata -> (image (C, H, W) in [0, 1], caption)``.
    """
    _hover_fragment(chart_key, scope, image_of)


@st.fragment
def _hover_fragment(chart_key: str, scope: str, image_of) -> None:
    from probe_core.reporting.render import png_bytes

    component = st.components.v2.component("model_probe_hover_image", html="<span></span>", js=_hover_script())
    state_key = f"{chart_key}_hover_{scope}"
    point = (st.session_state.get(state_key) or {}).get("hover")
    answer = None
    if isinstance(point, int):
        try:
            image, caption = image_of(point)
        except (IndexError, KeyError):  # a stale id from an older chart: nothing to show
            image = None
        if image is not None:
            picture = image_grid(image[None], columns=1, padding=0, scale=upscale_for_display(image.shape[-2]))
            answer = {"id": point, "caption": caption,
                      "src": "data:image/png;base64," + base64.b64encode(png_bytes(picture)).decode()}
    component(data={"chart": chart_key, "scope": scope, "image": answer}, key=state_key,
              on_hover_change=lambda: None)


def page_models(need_generator: bool = True):
    """The page preamble: data set and session models, or ``st.stop()`` after saying why not.

    Returns ``(dataset, classifier, generator, class_names)``; ``generator`` is None when not needed.
    """
    dataset = current_dataset()
    if dataset is None:
        st.stop()
    if need_generator:
        classifier, generator = session_models(dataset.name)
    else:
        classifier, generator = session_model("classifier", dataset.name), None
    if classifier is None:
        # a training run that ends (started here, on the Models page or at first start) reruns the page
        active_runs("page-models", ("train",))
        st.stop()
    if not model_check_card(dataset, classifier, generator):
        st.stop()
    return dataset, classifier, generator, tuple(classifier.class_names)


def model_check_card(dataset, classifier, generator=None) -> bool:
    """The model check (:mod:`probe_core.models.checks`) as a card; returns False, after an error, for a refused classifier.

    A weak generator is shown as a warning beside its sample grid; runs may still start, and carry the flag.
    """
    from probe_core.api.ui import ModelCheckError, check_classifier, check_generator

    try:
        classifier_check = check_classifier(classifier, dataset)
        generator_check = check_generator(generator, classifier, dataset) if generator is not None else None
    except ModelCheckError as exc:
        st.error(f"Model check failed: {plain(exc)}")
        return False
    if not classifier_check.usable:
        st.error(f"Model check failed, so no run can start: {classifier_check.message}")
        if classifier_check.remedy is not None:
            training_fix_button(classifier_check.remedy, key=f"fix-{classifier_check.classifier}-check")
        return False
    verdict = "" if generator_check is None else f" · generator {generator_check.verdict}"
    with st.expander(f"Model check: classifier {classifier_check.accuracy:.1%} on {classifier_check.images} test "
                     f"images{verdict}", expanded=bool(generator_check and generator_check.weak)):
        st.caption("Classes matched by name (classifier's = data set's): " + ", ".join(
            f"{k}={v}" for k, v in classifier_check.class_map.items()) + f". {classifier_check.message}.")
        st.caption("Accuracy per class: " + ", ".join(f"{name} {value:.0%}"
                                                      for name, value in classifier_check.per_class.items()))
        if generator_check is not None:
            if generator_check.weak:
                st.warning(generator_check.warning)
                if generator_check.remedy is not None:
                    training_fix_button(generator_check.remedy, key=f"fix-{generator_check.generator}-check")
            st.caption("Generator figures: " + ", ".join(f"{k} {v}" for k, v in generator_check.figures.items()))
            show_picture(torch.from_numpy(generator_check.samples), "samples of the generator", columns=16)
    return True


def training_fix_button(remedy, key: str) -> None:
    """A button that trains a weak model's remedy (:mod:`probe_core.models.remedies`) in the background.

    It says what it trains and for about how long before it is pressed, and that training started at once; once
    the fix is trained it names the new model instead."""
    what = "classifier" if remedy.spec.kind == "classifier" else "generator"
    registry = workspace().registry
    fixed = registry.model_id(remedy.spec)
    if registry.exists(fixed):
        st.caption(f"The fix for `{remedy.weak_model}` ({remedy.description}) is trained: `{fixed}`. Pick it as "
                   f"this session's {what} on the Models page; its check is in the models table.")
        return
    st.caption(f"Fix for `{remedy.weak_model}`: {remedy.description}. Same as `{remedy.command}`.")
    if st.button(f"Train the fix ({remedy.time_words})", key=key):
        try:
            run_id = submit_training(job_manager(), registry, [remedy.spec],
                                     split_view(remedy.spec.dataset)[0], device=device())
            st.success(f"Training started (run {run_id}); its progress is at the top of the Models page. "
                       f"When it ends, pick the new {what} for this session there.")
        except ProbeError as exc:
            st.error(plain(exc))


@st.fragment(run_every=LIVE_REFRESH_S)
def active_runs(key: str, kinds: tuple[str, ...], predicate=None, reset: tuple[str, ...] = ()) -> None:
    """Progress of this page's active runs, polled every LIVE_REFRESH_S; reruns the page once when they end.

    ``predicate(run)`` narrows the runs of the given kinds (e.g. sampling runs of one target kind);
    the widget keys in ``reset`` are cleared when they end, so run pickers jump to the newest run.
    """
    store = workspace().store
    runs = [r for kind in kinds for r in history.runs(store, kind, predicate, limit=10)]
    running = [r for r in runs if r.active]
    for run in running:
        run_progress(run, f"{key}_stop_{run.id}")
    # A run that changed since the last look (even one that started and ended between two polls)
    # reruns the page once, so every status it shows comes from the runs' current state.
    latest = max((r.updated_at for r in runs if not r.active), default=0.0)
    ended_since = latest > st.session_state.get(f"{key}_seen", latest)
    st.session_state[f"{key}_seen"] = latest
    if running:
        st.session_state[f"{key}_watching"] = True
    elif st.session_state.pop(f"{key}_watching", False) or ended_since:
        for widget in reset:
            st.session_state.pop(widget, None)
        st.rerun(scope="app")


def suite_choice(dataset_name: str, key: str) -> str:
    """The regression suite this person adds to or scores on, remembered across pages in their session.

    An existing suite of the data set is picked from a list; a new name makes a new suite.
    """
    existing = [s["name"] for s in workspace().store.list_suites(generator_dataset(dataset_name))]
    default = f"{generator_dataset(dataset_name).partition(':')[0]}-regressions"
    remembered = st.session_state.get("suite_name") or (existing[-1] if existing else default)
    name = st.text_input("Regression suite", value=remembered, key=key,
                         help="the suite's name; an existing one is extended, a new name makes a new suite"
                              + (f" (this data set's: {', '.join(existing)})" if existing else "")).strip()
    st.session_state["suite_name"] = name
    return name
