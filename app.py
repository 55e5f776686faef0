"""Model Probe dashboard: entry point and router.

Run with ``make run`` (``python app.py [streamlit options]``) or ``streamlit run app.py``. The
pages live in ``pages/``; shared settings (data set, data folder, device) are in the sidebar.
"""

import os
import sys

import streamlit as st

if __name__ == "__main__" and not st.runtime.exists():
    # `python app.py`: import the heavy libraries (torch, pandas, the core) into the server
    # process before it serves, so the first page view does not wait for them, then start
    # Streamlit on this file (it runs in this process and finds the modules already loaded).
    import pages._ui
    from streamlit.runtime.pages_manager import PagesManager
    from streamlit.web import cli

    pages._ui.preload_for_server()
    # With a `pages/` folder beside the main script, Streamlit runs the server's very first
    # session in the old folder-based multipage mode (a sidebar of file names, and a deep link
    # such as /failures runs that file without this router) until some run calls st.navigation.
    PagesManager.uses_pages_directory = False

    sys.argv = ["streamlit", "run", os.path.abspath(__file__), *sys.argv[1:]]
    sys.exit(cli.main())

from pages import _ui  # noqa: E402
from probe_core.errors import ProbeError  # noqa: E402
from probe_core.jobs import start_default_training  # noqa: E402

st.set_page_config(page_title="Model Probe", page_icon=":material/biotech:", layout="wide")

_ui.sidebar_settings()

if os.environ.get(_ui.AUTOTRAIN_ENV, "1") != "0":
    # First start: train the embedded data set's default models in the background
    # while the page is already up (deduplicated across reruns and tabs).
    try:
        ws = _ui.workspace()
        start_default_training(_ui.job_manager(), ws.registry, "digits", device=_ui.device())
    except ProbeError as exc:
        st.error(f"Could not start training the default models: {exc}")

PAGES = [
    st.Page("pages/home.py", title="Models", icon=":material/home:", default=True),
    st.Page("pages/probe.py", title="Probe", icon=":material/target:"),
    st.Page("pages/matrix.py", title="Ambiguity matrix", icon=":material/grid_view:"),
    st.Page("pages/interpolation.py", title="Interpolation", icon=":material/swap_horiz:"),
    st.Page("pages/failures.py", title="Failures", icon=":material/bug_report:"),
    st.Page("pages/label.py", title="Label", icon=":material/label:"),
    st.Page("pages/finetune.py", title="Finetune", icon=":material/build:"),
    st.Page("pages/compare.py", title="Compare", icon=":material/balance:"),
    st.Page("pages/saliency.py", title="Saliency", icon=":material/local_fire_department:"),
]
navigation = st.navigation(PAGES)
navigation.run()
