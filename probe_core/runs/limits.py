"""What a server allows one person's runs: how many at once, how many waiting, and how big.

A team server is shared: without limits, one person (or one forged widget value) can start a worker
per click or ask for a million training epochs. :class:`ServerLimits` holds the bounds, read from the
environment (``probe ui --max-runs N --max-runs-per-person N`` sets them for the server and its
workers); :meth:`ServerLimits.check_request` is called by :class:`~probe_core.runs.jobs.JobManager` on
every run a signed-in person starts, whatever the page offered, and the run lifecycle
(:func:`probe_core.runs.lifecycle.execute_run`) waits for a free slot (:meth:`~probe_core.store.Store.claim_run_slot`)
before it starts, so runs beyond the limits wait, queued.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields

from probe_core.errors import ProbeError
from probe_core.runs.requests import SAMPLE_RANGES, SETTING_WORDS

MAX_RUNS_ENV = "PROBE_MAX_RUNS"
MAX_RUNS_PER_PERSON_ENV = "PROBE_MAX_RUNS_PER_PERSON"

# The run settings a signed-in person's request is bounded in: the config key and the bound's field.
_BOUNDED_SETTINGS = (("epochs", "epochs"), ("feature_epochs", "epochs"), ("chains", "chains"), ("warmup", "iterations"), ("samples", "iterations"),
                     ("samples_per_image", "perturbations"), ("samples_per_region", "perturbations"),
                     ("max_images", "images"))


@dataclass(frozen=True)
class ServerLimits:
    """Bounds on the runs of a shared server.

    Parameters
    ----------
    runs_in_total : int
        Runs working at once over everybody (default: the machine's cores, at least 2); later ones wait.
    runs_per_person : int
        Runs of one person working at once (default 2); their later ones wait.
    queued_per_person : int
        Runs one person may have waiting; one more is refused.
    epochs, chains, iterations, perturbations, images : int
        The largest value a signed-in person's run may ask for (see :meth:`check_request`).
    """

    runs_in_total: int = max(2, os.cpu_count() or 2)
    runs_per_person: int = 2
    queued_per_person: int = 20
    epochs: int = 1000
    chains: int = SAMPLE_RANGES["chains"][1]  # the most a sample request (and so the Probe page) allows
    iterations: int = 20_000
    perturbations: int = 1000
    images: int = 100_000

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ProbeError(f"the server limit {field.name.replace('_', ' ')} must be a whole number >= 1, "
                                 f"got {value!r}")

    @classmethod
    def from_environment(cls) -> "ServerLimits":
        """The limits ``$PROBE_MAX_RUNS`` and ``$PROBE_MAX_RUNS_PER_PERSON`` set (the defaults otherwise).

        Raises
        ------
        ProbeError
            If either variable is set to something that is not a whole number >= 1.
        """
        given = {}
        for name, field in ((MAX_RUNS_ENV, "runs_in_total"), (MAX_RUNS_PER_PERSON_ENV, "runs_per_person")):
            text = os.environ.get(name, "").strip()
            if not text:
                continue
            try:
                given[field] = int(text)
            except ValueError:
                given[field] = 0
            if given[field] < 1:
                raise ProbeError(f"{name} must be a whole number >= 1, got {text!r}")
        return cls(**given)

    def check_request(self, config: dict) -> None:
        """Refuse a run whose settings exceed these bounds (before anything is stored).

        Parameters
        ----------
        config : dict
            The run's stored request (:func:`probe_core.runs.requests.record`). Every bounded key is checked
            wherever it sits, nested ones included (a training request keeps its epochs in each model spec of
            its ``specs`` list); values that are not numbers are left to the request's own validation.

        Raises
        ------
        ProbeError
            Naming the first setting over its bound and the bound.
        """
        bounds = dict(_BOUNDED_SETTINGS)
        for key, value in _settings_in(config):
            if key not in bounds:
                continue
            bound = getattr(self, bounds[key])
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value > bound:
                words = SETTING_WORDS.get(key, key.replace("_", " "))
                raise ProbeError(f"this server allows at most {bound:,} {words} in a run, and {value:,} "
                                 f"were asked for; ask an admin to run it from the command line")


def _settings_in(value, depth: int = 0):
    """Every (key, value) pair of a stored request, at any depth of its dicts and lists."""
    if depth > 20:  # a stored request is a few levels deep; deeper is not a request
        raise ProbeError("this run's settings are nested too deeply to be a request")
    if isinstance(value, dict):
        for key, item in value.items():
            yield key, item
            yield from _settings_in(item, depth + 1)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _settings_in(item, depth + 1)
