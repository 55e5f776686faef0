"""The dashboard's router: page config, sidebar settings, first-start training and ``st.navigation``.

``app.py`` runs it. So does each ``pages/<url>.py``: Streamlit serves a server's first
session in its folder-based page mode when a ``pages/`` folder sits beside the main script,
and in that mode a first visit to ``/label`` runs ``pages/label.py``. Those files only call
:func:`run`, so that visit gets this same router, which then runs ``pages/views/label.py``
(and switches Streamlit to ``st.navigation`` for good). Both ways in, the first view is the
same app: same navigation, same sidebar, same page.
"""

from __future__ import annotations

import os
from pages.ui.text import plain
from pathlib import Path

import streamlit as st

from pages import ui as _ui
from probe_core.api.ui import DEFAULT_DATASET, start_default_training
from probe_core.errors import ProbeError
from probe_core.team.accounts import Permission, PermissionDenied

VIEWS = Path(__file__).resolve().parents[1] / "views"

# (script in pages/views/, title, icon); the first is the default page at "/".
PAGES = [
    ("home.py", "Models", ":material/home:"),
    ("probe.py", "Probe", ":material/target:"),
    ("matrix.py", "Ambiguity matrix", ":material/grid_view:"),
    ("interpolation.py", "Interpolation", ":material/swap_horiz:"),
    ("failures.py", "Failures", ":material/bug_report:"),
    ("label.py", "Label", ":material/label:"),
    ("finetune.py", "Finetune", ":material/build:"),
    ("compare.py", "Compare", ":material/balance:"),
    ("saliency.py", "Saliency", ":material/local_fire_department:"),
    ("regressions.py", "Regressions", ":material/fact_check:"),
]


def run() -> None:
    """Set up the page and run the page the URL names."""
    st.set_page_config(page_title="Model Probe", page_icon=":material/biotech:", layout="wide")
    pages = [st.Page(VIEWS / script, title=title, icon=icon, default=index == 0)
             for index, (script, title, icon) in enumerate(PAGES)]
    if _ui.needs_sign_in():
        # The form runs as the addressed page: one page identity in all its reruns, so the cookie
        # component keeps its identity and a new one cannot interrupt the run of the Sign in click.
        # The address is kept for after signing in.
        st.navigation([st.Page(_ui.sign_in_form, title=title, icon=icon, url_path=Path(script).stem,
                               default=index == 0) for index, (script, title, icon) in enumerate(PAGES)],
                      position="hidden").run()
        return
    actor = _ui.sign_in()
    if actor is None:  # the sign-in form is showing; no page runs before someone signs in
        st.navigation(pages, position="hidden")  # keeps the address's page for after signing in
        st.stop()
    _ui.sidebar_settings()
    for kind in _ui.MODEL_KINDS:  # a file a link named waits here, on every page, for an admin's Load
        _ui.linked_file_card(kind, st.session_state.get("dataset", DEFAULT_DATASET))
    if os.environ.get(_ui.AUTOTRAIN_ENV, "1") != "0" and actor.may(Permission.RUN) \
            and st.session_state.get("dataset") == DEFAULT_DATASET and _ui.dataset_chosen():
        # The embedded data set, chosen: train its missing default models in the background while the page is
        # up (deduplicated across reruns and tabs). A fresh workspace's first view only offers it (the Models
        # page's button), so someone who came to probe their own data trains nothing they did not ask for.
        try:
            ws = _ui.workspace()
            start_default_training(_ui.job_manager(), ws.registry, DEFAULT_DATASET, device=_ui.device())
        except ProbeError as exc:
            st.error(f"Could not start training the default models: {plain(exc)}")
    try:
        st.navigation(pages).run()
    except PermissionDenied as exc:  # the one place a page's refused action is shown
        st.error(f"Not allowed: {plain(exc)}")
