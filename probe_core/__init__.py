"""Model Probe core library: data, models, sampling and failure analysis for image classifiers.

This package never imports streamlit; the dashboard (``app.py``, ``pages/``) and the
``probe`` CLI are both thin layers over it.
"""

__version__ = "0.1.0"
