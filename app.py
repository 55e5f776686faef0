"""Model Probe dashboard: entry point and router.

Run with ``make run`` (or ``streamlit run app.py``). The pages live in ``pages/``;
shared settings (data set, data folder, device) are in the sidebar.
"""

import os

import streamlit as st

from pages import _ui
from probe_core.errors import ProbeError
from probe_core.jobs import start_default_training

st.set_page_config(page_title="Model Probe", page_icon="🔬", layout="wide")

_ui.sidebar_settings()
_ui.warm_heavy_imports()

if os.environ.get(_ui.AUTOTRAIN_ENV, "1") != "0":
    # First start: train the embedded data set's default models in the background
    # while the page is already up (deduplicated across reruns and tabs).
    try:
        ws = _ui.workspace()
        start_default_training(_ui.job_manager(), ws.registry, "digits", device=_ui.device())
    except ProbeError as exc:
        st.error(f"Could not start training the default models: {exc}")

PAGES = [
    st.Page("pages/home.py", title="Models", icon="🏠", default=True),
    st.Page("pages/probe.py", title="Probe", icon="🎯"),
    st.Page("pages/matrix.py", title="Ambiguity matrix", icon="🔢"),
    st.Page("pages/interpolation.py", title="Interpolation", icon="↔️"),
    st.Page("pages/failures.py", title="Failures", icon="🧩"),
    st.Page("pages/label.py", title="Label", icon="🏷️"),
    st.Page("pages/finetune.py", title="Finetune", icon="🛠️"),
    st.Page("pages/compare.py", title="Compare", icon="⚖️"),
    st.Page("pages/saliency.py", title="Saliency", icon="🔥"),
]
navigation = st.navigation(PAGES)
navigation.run()
