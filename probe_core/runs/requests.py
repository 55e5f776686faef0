"""What every run request shares: one constructor for front ends (:class:`BuiltFromSettings`), the words and
ranges messages use, references resolved without training, and a request's record (:func:`record`,
:func:`from_record`) for the store and other processes.

Each domain's request is beside its domain: :class:`~probe_core.bayestrex.request.SampleRequest` in
:mod:`probe_core.bayestrex`, the Defuse steps' in :mod:`probe_core.defuse`, the suites' score request in
:mod:`probe_core.suites.scoring`, training's in :mod:`probe_core.runs.training`.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import dataclasses
import numbers
from typing import ClassVar

from probe_core.catalog import classifier_dataset, load_dataset
from probe_core.data.classes import split_class_map, with_class_map
from probe_core.errors import ProbeError, check_number_ranges
from probe_core.models.spec import SEED_RANGE
from probe_core.runs.history import require_run
from probe_core.sampling.targets import TargetSpec

# The whole numbers a sample request's settings may take, inclusive (checked by
# :func:`check_sampler_settings`; the pages' widgets take their bounds from here).
SAMPLE_RANGES = {"chains": (1, 1024), "warmup": (0, 100_000), "samples": (1, 100_000), "keep_every": (1, 10_000),
                 "independence_moves": (0, 64), "seed": SEED_RANGE}
# The likelihood's width σ (the paper's 0.05): below 0.001 no chain moves, above 10 the target no longer matters.
SIGMA_RANGE = (0.001, 10.0)

# How messages name the runs' bounded settings (the sampler's checks and a shared server's limits).
SETTING_WORDS = {"chains": "chains per target", "warmup": "warm-up iterations per chain",
                 "samples": "samples per chain", "keep_every": "keep-every",
                 "independence_moves": "independence moves per iteration", "epochs": "training epochs",
                 "samples_per_image": "perturbations per image", "samples_per_region": "samples per failure region",
                 "max_images": "images", "max_per_image": "failures kept per image", "noise_scale": "the noise scale",
                 "shards": "shards", "n_components": "clusters (K)", "weight_threshold": "the weight threshold ε",
                 "max_samples": "failures fitted", "tau": "the review spread τ", "batch_size": "the batch size",
                 "learning_rate": "the learning rate", "validation_fraction": "the validation fraction",
                 "rho": "ρ", "sigma": "sigma (the paper uses 0.05)",
                 "steps_per_epoch": "batches of the training data per epoch",
                 "projection_dim": "the principal components clustered (0: none)",
                 "class_share": "the class share that keeps a light cluster"}


# A request's values are checked once, when it is made from settings (scikit-learn's rule). While this is set a
# request is made from values already checked (:meth:`BuiltFromSettings.derived`, a record of this version read
# back by :func:`from_record`): its ``__post_init__`` converts what it must but does not check again.
_ALREADY_CHECKED = contextvars.ContextVar("request_values_already_checked", default=False)
# Written into every request's record; a record without it (an older version) is checked as it is read back.
# Raise it when a request's fields or checks change in a way a stored record of the old ones would not meet.
REQUEST_VERSION = 2


def checking_values() -> bool:
    """Whether a value being made now checks its settings: False while a request is made from values already
    checked (:func:`already_checked`), so a settings type it carries does not check them again either."""
    return not _ALREADY_CHECKED.get()


@contextlib.contextmanager
def already_checked():
    """Make requests (and the settings they carry) from values that were checked when first given."""
    token = _ALREADY_CHECKED.set(True)
    try:
        yield
    finally:
        _ALREADY_CHECKED.reset(token)


def refuse_unknown(given, allowed, what: str) -> None:
    """Refuse settings a request does not have, naming them and the ones it has.

    Parameters
    ----------
    given : iterable of str
        The setting names asked for.
    allowed : sequence of str
        The request's settings, in the order the message lists them.
    what : str
        What they set, e.g. ``"sampler"`` (the message says "unknown sampler setting(s)").

    Raises
    ------
    ProbeError
        If any name in ``given`` is not in ``allowed``.
    """
    unknown = sorted(set(given) - set(allowed))
    if unknown:
        raise ProbeError(f"unknown {what} setting(s) {', '.join(unknown)}; use {', '.join(allowed)}")


class BuiltFromSettings:
    """A request dataclass whose one constructor for front ends is :meth:`build`.

    Every run request has the same constructor, ``Request.build(registry, **settings)``: the workspace's
    :class:`~probe_core.models.registry.ModelRegistry` (its store is the workspace's runs) and the settings by
    name. It checks what needs the workspace (runs that must exist, models that must resolve), and the request's
    :meth:`check_values` checks the values once, when the request is made from settings (built, or made
    directly), so a front end (CLI, page, API verb) gets one clear message for any bad input before a run is
    stored, and jobs trust the request they are given: values the product derives from checked ones
    (:meth:`derived`) and a stored record of this version read back (:func:`from_record`) are not checked
    again; an older record is checked as it is read.

    Its fields' defaults are its defaults table; :meth:`from_settings` adds the check for names the request does
    not have and turns a wrong type into the project's error.
    """

    setting_word: ClassVar[str] = "request"  # the message's word: "unknown <word> setting(s)"
    # The inclusive bounds of its number settings (both bounds whole: a whole number), checked by
    # check_ranges() in check_values(); the pages' widgets take their bounds from here. None is left to the type.
    ranges: ClassVar[dict[str, tuple[float, float]]] = {}
    # (field, run kind): the field names a stored run of that kind, which build() requires; None: no such field
    follows_run: ClassVar[tuple[str, str] | None] = None

    def __post_init__(self) -> None:
        self.convert_values()
        if checking_values():
            self.check_values()

    def convert_values(self) -> None:
        """Turn values given in another form into the request's own (a target's text into its spec): run however
        the request is made, checked or not."""

    def check_values(self) -> None:
        """Refuse values a run cannot use, with the project's error: run once, when the request is made from
        settings (not by :meth:`derived` or when a record of this version is read back). Requests with more
        than ranges to check extend it."""
        self.check_ranges()

    def derived(self, **values):
        """This request with ``values`` the product derived from checked ones (sizes chosen from the data,
        references resolved to stored ids, the use case it serves), not checked again.

        Raises
        ------
        ProbeError
            For a name the request does not have.
        """
        refuse_unknown(values, [field.name for field in dataclasses.fields(self)], self.setting_word)
        with already_checked():
            return dataclasses.replace(self, **values)

    def check_ranges(self) -> None:
        """Refuse a number setting outside :attr:`ranges` (or not a number) with the project's error."""
        check_number_ranges({name: getattr(self, name) for name in self.ranges}, self.ranges, SETTING_WORDS)

    @classmethod
    def from_settings(cls, **settings):
        """The request from settings named as its fields, those left out taking the defaults, without the
        workspace's checks (settings nested in another request, such as an identification's ``distill_after``).

        Raises
        ------
        ProbeError
            For a name the request does not have, or a value it cannot use.
        """
        refuse_unknown(settings, [field.name for field in dataclasses.fields(cls)], cls.setting_word)
        try:
            return cls(**settings)
        except TypeError as exc:  # e.g. a text where a number goes: the comparisons in __post_init__
            raise ProbeError(f"bad {cls.setting_word} settings: {exc}") from None

    @classmethod
    def build(cls, registry, **settings):
        """The request from ``settings`` (:meth:`from_settings`), checked against the workspace of ``registry``:
        the run its :attr:`follows_run` field names must be stored there, of that kind.

        Raises
        ------
        ProbeError
            For a name the request does not have, a value it cannot use, or what the workspace lacks.
        """
        request = cls.from_settings(**settings)
        if cls.follows_run is not None:
            field, kind = cls.follows_run
            require_run(registry.store, getattr(request, field), kind)
        return request


def checked_run_id(value, what: str) -> int:
    """A run id as an ``int`` (NumPy's whole numbers too); a :class:`ProbeError` for anything but a whole number of
    at least 1 (``what`` names it in the message)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ProbeError(f"{what} is a run id (a whole number from 1), got {value!r}")
    return int(value)


def check_reference(value, what: str) -> None:
    """Refuse a reference (a model id, a file path, a suite's name) that is not a non-empty text."""
    if not isinstance(value, str) or not value.strip():
        raise ProbeError(f"name the {what} (a non-empty text), got {value!r}")


def resolved_reference(registry, reference, role: str, dataset: str) -> tuple[str, tuple[str, ...], object]:
    """``(stored reference, class names, the model)`` of a model on ``dataset``, without training anything.

    A model already resolved for ``dataset`` (a ``LoadedModel``, as the dashboard holds) is taken as it
    is. A ``default`` that is not trained yet keeps its name (the run trains it, announced) and has no model
    (None); a classifier's names are then the data set's, which it will be trained on. Anything else is
    resolved, so a classifier's classes are matched to the data set's by name here, its id is what is stored,
    and the ``LoadedModel`` is returned for what else the caller asks of it (a generator's capabilities).

    Raises
    ------
    ClassMismatchError, ModelNotFoundError, PluginError
    """
    if not isinstance(reference, str):
        return reference.id, tuple(reference.class_names), reference
    base, _ = split_class_map(reference)
    if base == "default":
        spec = registry.default_spec(dataset, role)
        if spec is not None and not registry.exists(registry.default_id(dataset, role)):
            if role != "classifier":
                return reference, (), None
            return reference, tuple(load_dataset(classifier_dataset(dataset), registry.data_dir).class_names), None
    loaded = registry.resolve(reference, role, dataset)
    return loaded.id, tuple(loaded.class_names), loaded


def mapped_classifier(classifier, class_map) -> str:
    """The classifier reference a request stores (``default`` where none is given), carrying ``class_map``
    (``MODEL=DATA,...`` or a dict) where one is given.

    Raises
    ------
    ProbeError
        For a class map given with an already resolved classifier rather than a reference.
    """
    classifier = classifier or "default"
    if not class_map:
        return classifier
    if not isinstance(classifier, str):
        raise ProbeError("a class map goes with a classifier reference, not an already resolved classifier")
    return with_class_map(classifier, class_map)


def classifier_class_names(registry, reference: str | None, dataset: str) -> tuple[str, ...]:
    """The class names a classifier's targets are written in on ``dataset``, without training anything."""
    return resolved_reference(registry, reference or "default", "classifier", dataset)[1]




def record(config) -> dict:
    """The configuration as the run stores it (JSON-ready; tuples become lists, a target spec its text)."""
    data = {"request_version": REQUEST_VERSION} if isinstance(config, BuiltFromSettings) else {}
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if isinstance(value, TargetSpec):
            value = value.text
        elif dataclasses.is_dataclass(value) or isinstance(value, (tuple, list, dict)):
            value = dataclasses.asdict(value) if dataclasses.is_dataclass(value) else copy.deepcopy(value)
        data[field.name] = list(value) if isinstance(value, tuple) else value
    return data


def field_defaults(request_type: type) -> dict:
    """A request type's defaults by field (those with one): what a page's widgets start from."""
    defaults = {}
    for field in dataclasses.fields(request_type):
        if field.default is not dataclasses.MISSING:
            defaults[field.name] = field.default
        elif field.default_factory is not dataclasses.MISSING:
            defaults[field.name] = field.default_factory()
    return defaults


def from_record(request_type: type, data: dict):
    """The inverse of :func:`record`: ``request_type`` rebuilt from what a run stored (lists become tuples again).

    A record of this version (:data:`REQUEST_VERSION`) was checked when its request was made, so it is not
    checked again; an older one is checked as it is read. Keys the type does not know (written by another
    version) are left out; a record that no longer fits raises ``TypeError`` or :class:`ProbeError`, as the
    type's own constructor does.
    """
    names = {field.name for field in dataclasses.fields(request_type)}
    values = {key: tuple(value) if isinstance(value, list) else value for key, value in data.items() if key in names}
    if data.get("request_version") != REQUEST_VERSION:
        return request_type(**values)
    with already_checked():
        return request_type(**values)
