"""Reading a stored run's request and result back, whatever its kind.

A run kind is declared next to its domain code (:func:`probe_core.runs.lifecycle.run_kind` on its request
type, naming its result type): Bayes-TrEx sampling (:mod:`probe_core.bayestrex.jobs`), comparison
(:mod:`probe_core.bayestrex.compare`) and latent maps (:mod:`probe_core.bayestrex.latent_map`), the Defuse
steps (:mod:`probe_core.defuse.steps`), suite scores (:mod:`probe_core.suites`) and training
(:mod:`probe_core.runs.training`). The package's entry points (``model_probe.run_kinds`` in pyproject.toml)
name each kind's module, and :func:`~probe_core.runs.lifecycle.kind_named` imports it when a stored run of
that kind is first read, so this module imports no domain. All start through one lifecycle,
:func:`probe_core.runs.lifecycle.run_now` or :func:`probe_core.runs.lifecycle.submit`.

:func:`config_of` reads a stored run's request back as its dataclass, so pickers filter on typed
fields instead of slicing strings; :func:`result_of` reads a run's result back as its typed result.
"""

from __future__ import annotations

from probe_core.runs.lifecycle import kind_named


def config_of(run):
    """A stored run's request as its dataclass (a :class:`~probe_core.runs.lifecycle.RunRequest`).

    None for kinds without one, and for configurations stored by older versions that no longer fit.
    """
    kind = kind_named(run.kind)
    return None if kind is None else kind.request_of(run)


def result_of(run):
    """A finished run's result as its typed result (:class:`~probe_core.runs.lifecycle.RunResult`), read back from
    the store; None while it has none, for kinds whose results are plain records (``run.result``), and for
    a result stored by an older version that no longer fits."""
    kind = kind_named(run.kind)
    return None if kind is None else kind.result_of(run)
