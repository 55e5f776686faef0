"""UI glue shared by the pages, split by concern; the pages use it as ``from pages import ui as _ui``.

- :mod:`pages.ui.auth`: signing in and who the session acts as (roles are enforced by ``probe_core``);
- :mod:`pages.ui.resources`: cached resources shared by every session (workspace, job manager,
  loaded models, read-only data) and the server's preloading;
- :mod:`pages.ui.session`: one person's settings in ``st.session_state`` and what derives from
  them (the session's data set, models, workspace view, starting a sampling run);
- :mod:`pages.ui.widgets`: pictures, tables, run pickers and progress, plots and live views;
- :mod:`pages.ui.text`: user text shown as plain text (:func:`~pages.ui.text.plain`);
- :mod:`pages.ui.router`: the ``st.navigation`` router that ``app.py`` and ``pages/<url>.py`` run.

Everything here calls into ``probe_core``; nothing in ``probe_core`` calls back.
"""

from pages.ui.auth import current_actor, may, needs_sign_in, require, sign_in, sign_in_form
from pages.ui.resources import AUTOTRAIN_ENV, generator_samples, get_job_manager, get_workspace, preload_for_server
from pages.ui.text import plain
from pages.ui.session import (
    MODEL_KINDS,
    annotator_name,
    current_dataset,
    dataset_chosen,
    device,
    failures_of_run,
    linked_file_card,
    job_manager,
    load_model,
    model_checks,
    model_ref,
    prior_samples,
    scaleout,
    session_model,
    session_models,
    set_model_ref,
    sidebar_settings,
    start_sampling,
    workspace,
)
from pages.ui.widgets import (
    FOLLOWED_DISTILL_RUN,
    LIVE_REFRESH_S,
    MODELS_COLUMN_CONFIG,
    active_runs,
    hover_images,
    keys_to_page,
    model_choice,
    models_table,
    page_models,
    pick_distill_run,
    pick_run,
    png_download,
    run_progress,
    run_status_line,
    shards_not_done,
    show_picture,
    suite_choice,
    training_fix_button,
)
from probe_core.reporting.render import image_grid, upscale_for_display

__all__ = [
    "AUTOTRAIN_ENV", "LIVE_REFRESH_S", "MODELS_COLUMN_CONFIG", "MODEL_KINDS", "active_runs", "annotator_name",
    "current_dataset", "dataset_chosen", "device", "failures_of_run", "generator_samples", "get_job_manager",
    "get_workspace", "hover_images", "keys_to_page", "image_grid", "job_manager", "load_model", "model_checks", "model_choice",
    "model_ref",
    "models_table", "page_models", "pick_distill_run", "pick_run", "png_download", "preload_for_server",
    "prior_samples", "run_progress", "run_status_line", "scaleout", "session_model", "session_models", "set_model_ref",
    "shards_not_done", "show_picture", "sidebar_settings", "start_sampling", "suite_choice", "training_fix_button",
    "upscale_for_display",
    "workspace", "FOLLOWED_DISTILL_RUN", "current_actor", "may", "require", "needs_sign_in", "sign_in", "sign_in_form", "plain",
    "linked_file_card",
]
