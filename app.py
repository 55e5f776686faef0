"""Model Probe dashboard: entry point and router.

Run with ``make run`` (``python app.py [streamlit options]``) or ``streamlit run app.py``: both
serve the router in ``pages/ui/router.py``. The page scripts live in ``pages/views/``; the files
``pages/<url>.py`` only run the router too (see there why). Shared settings (data set, data
folder, device) are in the sidebar.
"""

import os
import sys

import streamlit as st

if __name__ == "__main__" and not st.runtime.exists():
    # `python app.py`: import the heavy libraries (torch, pandas, the core) into the server
    # process before it serves, so the first page view does not wait for them, then start
    # Streamlit on this file (it runs in this process and finds the modules already loaded).
    import pages.ui
    from streamlit.web import cli

    pages.ui.preload_for_server()
    sys.argv = ["streamlit", "run", os.path.abspath(__file__), *sys.argv[1:]]
    sys.exit(cli.main())

from pages.ui.router import run  # noqa: E402

run()
