"""/regressions on a server's first view in Streamlit's folder-based mode: the router (pages/ui/router.py)."""
from pages.ui.router import run

run()
