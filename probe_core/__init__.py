"""Model Probe core library: data, models, sampling and failure analysis for image classifiers.

This package never imports streamlit and has no import cycles; the dashboard (``app.py``,
``pages/``) and the ``probe`` CLI (:mod:`probe_core.cli`) are both thin layers over it.

Where things are: data sets and what they use in :mod:`probe_core.catalog`; models in
:mod:`probe_core.models` (lookups never train); what a generator can do in
:mod:`probe_core.sampling.protocols`; generic MCMC in :mod:`probe_core.mcmc`, Bayes-TrEx's posterior
and its runs in :mod:`probe_core.sampling`; Bayes-TrEx in
:mod:`probe_core.bayestrex`; Defuse in :mod:`probe_core.defuse`; runs and their life in
:mod:`probe_core.runs.runconfig`, :mod:`probe_core.runs.lifecycle`, :mod:`probe_core.runs.jobs` and
:mod:`probe_core.runs.launchers`; the workspace database in :mod:`probe_core.store`. The Python API
(``import probe_core as mp; mp.sample(...)``) is :mod:`probe_core.api`.
"""

from probe_core.pyfixes import serialize_ast_parse

__version__ = "0.1.0"

serialize_ast_parse()

_API = ("check", "ModelCheck", "sample", "SampleResult", "TargetSpec", "matrix", "MatrixResult", "suite",
        "SuiteScore", "train", "open_workspace", "show", "Dashboard")


def __getattr__(name: str):
    """``probe_core.sample`` and the other API verbs (:mod:`probe_core.api`), and ``probe_core.defuse``'s verbs,
    imported on first use."""
    if name in ("show", "Dashboard"):
        from probe_core.api import dashboard

        return getattr(dashboard, name)
    if name in _API:
        from probe_core import api

        return getattr(api, name)
    if name == "defuse":
        import importlib

        return importlib.import_module("probe_core.defuse")
    raise AttributeError(f"module 'probe_core' has no attribute {name!r}")
