"""Bayes-TrEx's run request: :class:`SampleRequest` (a target spec on a classifier and a generator, and the
sampler's settings), the sampler's settings type and their one check, and the sampling defaults by target and
image size. Built by :meth:`SampleRequest.build` alone; registered as the ``sample`` run kind in
:mod:`probe_core.bayestrex.jobs`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from probe_core.catalog import dataset_entry, load_dataset
from probe_core.data import is_real_size
from probe_core.errors import ProbeError, check_number_ranges
from probe_core.models.checks import check_classifier, require_usable
from probe_core.runs.requests import (
    SAMPLE_RANGES,
    SETTING_WORDS,
    SIGMA_RANGE,
    BuiltFromSettings,
    already_checked,
    checking_values,
    mapped_classifier,
    refuse_unknown,
    resolved_reference,
)
from probe_core.runs.scaleout import check_executor, check_shards
from probe_core.sampling.runner import DEFAULT_CHAINS, DEFAULT_SAMPLES, DEFAULT_WARMUP, INIT_MODES
from probe_core.sampling.targets import DEFAULT_SIGMA, Target, TargetSpec

SAMPLERS = ("hmc", "nuts", "rwm")
# Chain starts a run may name: "auto" lets the run choose from its targets and generator
# (:func:`~probe_core.bayestrex.run.auto_init`).
CHAIN_STARTS = ("auto", *INIT_MODES)
MAX_CHAINS = SAMPLE_RANGES["chains"][1]  # per target
MAX_ITERATIONS = SAMPLE_RANGES["samples"][1]
MAX_INDEPENDENCE_MOVES = SAMPLE_RANGES["independence_moves"][1]
SAMPLER_DEFAULTS = {"chains": DEFAULT_CHAINS, "warmup": DEFAULT_WARMUP, "samples": DEFAULT_SAMPLES, "keep_every": 1}
# A user's real-size data (32x32 and up): a gradient of the default models costs about 30 times the digits'
# one, and the optimised start already places the chains near the target, so a third of the iterations reach
# it (SVHN-like 32x32 set with its default models, benchmarks/real_size.py: high:7 hit by 16 of 16 chains in
# about 2 minutes on 2 cores, where 300 + 300 took about 6).
REAL_SIZE_SAMPLER_DEFAULTS = {"chains": DEFAULT_CHAINS, "warmup": 100, "samples": 100, "keep_every": 1}
# The ambiguity matrix runs K(K-1)/2 targets at once (45 on digits): fewer chains and iterations per pair
# reach as many pairs (benchmarks/matrix_defaults.py: 40 of 45 on digits in about 2 minutes on 2 cores,
# where the general defaults take about 9), and every 10th sample is stored.
MATRIX_SAMPLER_DEFAULTS = {"chains": 24, "warmup": 50, "samples": 50, "keep_every": 10}
# From 28×28 on, one decoder + classifier forward+backward costs about ten times the digits one, and the
# SMC start alone already places chains on the reachable pairs (MNIST: 42 of 45 with 8 chains per pair):
# fewer chains and a short HMC run after it (benchmarks/matrix_defaults.py --dataset mnist: 42 of 45 pairs
# in about 8 minutes on 2 cores; 50 + 50 iterations took 15 minutes even with 8 chains per pair).
LARGE_IMAGE_MATRIX_SAMPLER_DEFAULTS = {"chains": 8, "warmup": 20, "samples": 20, "keep_every": 5}
SMALL_IMAGE_VALUES = 16 * 16  # values per image (C·H·W) up to which the digits matrix defaults apply
# The Probe page's starting values: half the chains and iterations, for a first look while one watches the run
# (:func:`page_sampler_defaults` halves the real-size ones in the same way).
PAGE_SAMPLER_DEFAULTS = {"chains": DEFAULT_CHAINS // 2, "warmup": DEFAULT_WARMUP // 2, "samples": DEFAULT_SAMPLES // 2,
                         "keep_every": 5}
# The Interpolation page's starting values: a path of 11 steps is 11 targets, so a quarter of the chains and a
# third of the iterations keep one run near a single target's cost.
PATH_PAGE_DEFAULTS = {"steps": 11, "chains": DEFAULT_CHAINS // 4, "iterations": DEFAULT_WARMUP // 3, "keep_every": 5}


def matrix_sampler_defaults(image_shape: tuple[int, int, int]) -> dict:
    """The ambiguity matrix's chains per pair, warm-up, samples and storage stride for images of (C, H, W)."""
    channels, height, width = image_shape
    small = channels * height * width <= SMALL_IMAGE_VALUES
    return dict(MATRIX_SAMPLER_DEFAULTS if small else LARGE_IMAGE_MATRIX_SAMPLER_DEFAULTS)


def sampler_defaults(spec: TargetSpec | None, image_shape: tuple[int, int, int] | None = None,
                     sized: bool = False) -> dict:
    """Chains per target, warm-up, samples and storage stride for a target spec, where none are given.

    ``image_shape`` is the data set's (C, H, W): the ambiguity matrix's defaults depend on it, and with
    ``sized`` (the data set's entry chooses its defaults from its size: a user's data) real-size images
    (:func:`~probe_core.data.is_real_size`) take :data:`REAL_SIZE_SAMPLER_DEFAULTS`. The built-in colour sets
    keep the general ones (the scene world's renderer is sampled with random-walk Metropolis, which needs them).
    """
    if spec is not None and spec.is_matrix:
        if image_shape is None:
            raise ProbeError("the ambiguity matrix's defaults depend on the image size: give the data set's "
                             "image_shape")
        return matrix_sampler_defaults(image_shape)
    if sized and image_shape is not None and is_real_size(image_shape):
        return dict(REAL_SIZE_SAMPLER_DEFAULTS)
    return dict(SAMPLER_DEFAULTS)


def page_sampler_defaults(image_shape: tuple[int, int, int], sized: bool = False) -> dict:
    """The Probe page's starting values for images of (C, H, W): half of :func:`sampler_defaults`' chains and
    iterations, every 5th sample stored (:data:`PAGE_SAMPLER_DEFAULTS` where the general defaults apply)."""
    general = sampler_defaults(None, image_shape, sized)
    return {"chains": general["chains"] // 2, "warmup": general["warmup"] // 2, "samples": general["samples"] // 2,
            "keep_every": PAGE_SAMPLER_DEFAULTS["keep_every"]}


def check_sampler_settings(chains: int = DEFAULT_CHAINS, warmup: int = DEFAULT_WARMUP,
                           samples: int = DEFAULT_SAMPLES, sigma: float = DEFAULT_SIGMA,
                           sampler: str = "hmc", keep_every: int = 1, independence_moves: int = 0,
                           seed: int = 0, init: str = "auto", **_ignored) -> None:
    """Raise :class:`ProbeError` with a clear message for settings the sampler
    (:func:`~probe_core.bayestrex.run.sample`) cannot run with.

    Called before a run is stored, so bad input leaves the workspace as it was.
    """
    if sampler not in SAMPLERS:
        raise ProbeError(f"unknown sampler {sampler!r}; use one of {', '.join(SAMPLERS)}")
    if init not in CHAIN_STARTS:
        raise ProbeError(f"unknown chain start {init!r}; use one of {', '.join(CHAIN_STARTS)}")
    check_number_ranges({"chains": chains, "warmup": warmup, "samples": samples, "keep_every": keep_every,
                         "independence_moves": independence_moves, "seed": seed, "sigma": sigma},
                        {**SAMPLE_RANGES, "sigma": SIGMA_RANGE}, SETTING_WORDS)


@dataclass(frozen=True)
class SamplerFields:
    """The sampler's settings as fields, with their defaults: written once, for :class:`SamplerSettings` and for
    :class:`SampleRequest`, which carries them beside its models and targets.

    Parameters
    ----------
    chains, warmup, samples : int
        Chains per target, warm-up iterations, samples per chain.
    sigma : float
        The likelihood width σ (the paper's 0.05).
    sampler : {"hmc", "rwm", "nuts"}
    seed : int
    keep_every : int
        Store every n-th kept sample.
    anneal_sigma_from : float, None or "auto"
    init : str
        Where chains start, one of :data:`CHAIN_STARTS`; "auto" chooses from the targets and the generator
        (:func:`~probe_core.bayestrex.run.auto_init`), "prior" is the paper's.
    independence_moves : int
        HMC's independence jumps per iteration after warm-up (:class:`~probe_core.sampling.SamplerConfig`).
    """

    chains: int = DEFAULT_CHAINS
    warmup: int = DEFAULT_WARMUP
    samples: int = DEFAULT_SAMPLES
    sigma: float = DEFAULT_SIGMA
    sampler: str = "hmc"
    seed: int = 0
    keep_every: int = 1
    anneal_sigma_from: float | str | None = "auto"
    init: str = "auto"
    independence_moves: int = 0


@dataclass(frozen=True)
class SamplerSettings(SamplerFields):
    """How a Bayes-TrEx run samples (the fields of :class:`SamplerFields`), checked when made
    (:func:`check_sampler_settings`): a value of this type is valid, so the sampler
    (:func:`~probe_core.bayestrex.run.sample`) runs one without checking it again. A :class:`SampleRequest`
    carries one (:meth:`SampleRequest.sampler_settings`); the sampler makes one from keywords.
    """

    def __post_init__(self) -> None:
        if checking_values():  # not again for the settings of a request made from checked values
            check_sampler_settings(**dataclasses.asdict(self))

    def derived(self, **values) -> "SamplerSettings":
        """These settings with values the sampler derived from them, not checked again: a shard's seed (the run's
        plus a stride, beyond the range a person may give) and what ``init="auto"`` and annealing ``"auto"`` chose."""
        unknown = set(values) - set(SAMPLER_SETTING_NAMES)
        if unknown:
            raise ProbeError(f"not sampler settings: {', '.join(sorted(unknown))}")
        with already_checked():
            return dataclasses.replace(self, **values)


SAMPLER_SETTING_NAMES = tuple(field.name for field in dataclasses.fields(SamplerFields))


@dataclass(frozen=True, kw_only=True)
class SampleRequest(BuiltFromSettings, SamplerFields):
    """A Bayes-TrEx run, validated: a target spec on a classifier and a generator, and the sampler's settings.

    Build it with :meth:`build`, the one constructor for front ends: it fills the target's defaults, resolves
    the model references and parses the target (the CLI, the dashboard, the API and the use cases all call
    it). The settings are checked by the request itself, however it is made (:meth:`build`, a stored run read
    back by :func:`from_record`, or the constructor), so no request with settings a run cannot use exists.

    Parameters
    ----------
    dataset : str
    target : TargetSpec
        The targets, parsed in ``class_names`` (text read back from a stored run is parsed here, once).
    classifier, generator : str
        Stored references: model ids, plugin or model-file references with their sha256, or
        ``default`` for a data set default not trained yet (the run trains it, announced).
    class_names : tuple of str
        The classifier's classes on the data set, in the data set's order (matched by name); the
        words the target is written in.
    chains, warmup, samples, sigma, sampler, seed, keep_every, anneal_sigma_from, init, independence_moves
        The sampler's settings (:class:`SamplerFields`).
    executor : str
        Where the target shards run: ``local``, ``ray`` or ``ray:ADDRESS`` (:mod:`probe_core.runs.scaleout`).
    shards : int or None
        None: one per worker of the executor (decided where the run runs).
    allow_weak_classifier : bool
        Sample with a classifier near chance on the data (refused otherwise); the result is flagged.
    use_case : dict or None
        The paper's use case this request is (a :class:`~probe_core.bayestrex.recipes.UseCasePlan`'s
        ``use_case``), named in the result.
    judge : str or None
        A stored reference to a classifier that is not the probed one, on the same classes: each high or
        ambiguous target's hits are judged by it (:func:`~probe_core.bayestrex.run.judged_hits`).
    """

    kind: ClassVar[str] = "sample"

    dataset: str
    target: TargetSpec
    classifier: str = "default"
    generator: str = "default"
    class_names: tuple[str, ...] = ()
    executor: str = "local"
    shards: int | None = 1
    allow_weak_classifier: bool = False
    use_case: dict | None = None
    judge: str | None = None

    def convert_values(self) -> None:
        if isinstance(self.target, str):  # the text of a stored run's record
            object.__setattr__(self, "target", TargetSpec.parse(self.target, self.class_names))
        # checked with the request (not again when it is derived or read back); the sampler trusts it
        object.__setattr__(self, "_sampler_settings",
                           SamplerSettings(**{name: getattr(self, name) for name in SAMPLER_SETTING_NAMES}))
        object.__setattr__(self, "allow_weak_classifier", bool(self.allow_weak_classifier))

    def check_values(self) -> None:
        if not isinstance(self.target, TargetSpec):
            raise ProbeError(f"a sample request's target is a TargetSpec, not {type(self.target).__name__}")
        if self.class_names and self.target.class_names != tuple(self.class_names):
            raise ProbeError("the target spec is written in other classes than the request's classifier has")
        object.__setattr__(self, "executor", check_executor(self.executor, connect=False))
        if self.shards is None and self.executor == "local":
            object.__setattr__(self, "shards", 1)  # one shard here; None means one per worker of a cluster
        check_shards(self.shards)

    def sampler_settings(self) -> SamplerSettings:
        """The sampler's settings, checked when this request was made."""
        return self._sampler_settings

    @classmethod
    def build(cls, registry, *, dataset: str, target: "str | TargetSpec", classifier="default", generator="default",
              class_map: str | None = None, judge: str | None = None, **settings) -> "SampleRequest":
        """The one way to make a sample request: defaults, checks, references, targets.

        Settings left out (or None) take the target's defaults (the ambiguity matrix has its own, by image
        size). Every setting, the executor and shards, the data set, the classifier's classes (matched to
        the data set's by name; ``class_map`` gives ``MODEL=DATA,...`` where the names differ) and the
        target are checked before any work: nothing is trained, stored or connected to. A classifier given
        already resolved is checked on the data too (:func:`~probe_core.models.checks.require_usable`).

        Parameters
        ----------
        registry : ModelRegistry
        dataset : str
        target : str or TargetSpec
            Spec text (parsed here, once, in the classifier's class names) or a spec already made in them.
        classifier, generator : str or LoadedModel
            References as the user gave them (``default``, a model id, a plugin or model file path), or
            models already resolved for ``dataset`` (:meth:`ModelRegistry.resolve`; not loaded again).
        class_map : str, optional
        judge : str, optional
            A classifier reference other than ``classifier``, on the same classes (checked here without loading
            it; it must be trained already, since a lookup never trains, and is checked on the data where the
            run loads it).
        **settings
            Any of :data:`SAMPLE_SETTINGS`.

        Raises
        ------
        ProbeError
            For an unknown setting or any value a run cannot use (one clear message).
        ModelCheckError
            For a classifier given resolved whose classes look matched wrongly, or that is near chance without
            ``allow_weak_classifier``.
        """
        refuse_unknown(settings, SAMPLE_SETTINGS, "sampler")
        if not isinstance(target, TargetSpec) and (not isinstance(target, str) or not target.strip()):
            raise ProbeError("a target spec is needed, e.g. high:3 or ambiguous:4,9")
        data = load_dataset(dataset, registry.data_dir)
        classifier = mapped_classifier(classifier, class_map)
        classifier_id, names, _ = resolved_reference(registry, classifier, "classifier", dataset)
        if isinstance(target, str):
            # the one parse: a bad target stops here, in the classifier's words
            spec = TargetSpec.parse(target, names)
        elif target.class_names != names:  # made in other names (a plan's): its text read in the classifier's
            spec = TargetSpec.parse(target.text, names)
        else:
            spec = target
        given = {key: value for key, value in settings.items() if value is not None or key in ("shards",
                                                                                              "anneal_sigma_from")}
        given = {**sampler_defaults(spec, data.image_shape, dataset_entry(dataset).sized_defaults), **given}
        generator_id, _, loaded_generator = resolved_reference(registry, generator or "default", "generator", dataset)
        judge_id = None
        if judge:
            judge_id, judge_names, _ = resolved_reference(registry, judge, "classifier", dataset)
            if judge_id == classifier_id or judge_id == "default":
                raise ProbeError(f"the judge must be a trained classifier other than the probed one ({classifier_id}): "
                                 "it says what a model that was never probed sees in the hits")
            if tuple(judge_names) != tuple(names):
                raise ProbeError(f"the judge's classes {list(judge_names)} are not the probed classifier's "
                                 f"{list(names)}")
        request = cls(dataset=dataset, target=spec, classifier=classifier_id, generator=generator_id,
                      class_names=names, judge=judge_id, **given)  # which checks the settings
        if request.init == "classes" and not registry.can_start_in_classes(loaded_generator or generator_id,
                                                                             dataset):
            raise ProbeError("chains start in classes only with a generator whose prior has class components (a "
                             "density autoencoder's, --kind rae); this one has none: use auto, prior or optimize")
        if not isinstance(classifier, str):
            # a classifier the caller already holds is checked now (a few forward passes), so a refused one
            # starts nothing; one named by reference is checked where the run loads it
            require_usable(check_classifier(classifier, data), request.allow_weak_classifier)
        return request

    @property
    def targets(self) -> tuple[Target, ...]:
        """The targets, in batch order."""
        return self.target.targets

    @property
    def is_matrix(self) -> bool:
        """Whether the target is the K×K ambiguity matrix."""
        return self.target.is_matrix

    @property
    def path(self) -> tuple[int, int, int] | None:
        """``(from, to, steps)`` class indices of a ``path:A->B:N`` target; None for other targets."""
        return self.target.path


SAMPLE_SETTINGS = tuple(f.name for f in dataclasses.fields(SampleRequest)
                        if f.name not in ("dataset", "target", "classifier", "generator", "class_names", "use_case",
                                          "judge"))
