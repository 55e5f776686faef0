"""Two classifiers compared on one generator (Bayes-TrEx Table 3): the run kind, its request and its job.

:func:`~probe_core.bayestrex.recipes.compare_classifiers` runs it from the CLI and the API; the Compare page
submits the same :class:`CompareRequest`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from probe_core.bayestrex.request import SamplerSettings
from probe_core.bayestrex.results import COMPARE, ComparisonResult
from probe_core.bayestrex.run import sample
from probe_core.catalog import load_dataset
from probe_core.errors import ProbeError
from probe_core.progress import Reporter, rewritten
from probe_core.runs.lifecycle import job_of, run_kind, training_announcer
from probe_core.runs.requests import BuiltFromSettings, refuse_unknown
from probe_core.runs.validation import check_record, checked_models
from probe_core.sampling.targets import DEFAULT_SIGMA, TargetSpec


@run_kind(ComparisonResult)
@dataclass(frozen=True)
class CompareRequest(BuiltFromSettings):
    """High-confidence samples of every class for two classifiers on one generator (paper Table 3)."""

    kind: ClassVar[str] = COMPARE

    dataset: str
    classifier_a: str
    classifier_b: str
    generator: str = "default"
    chains: int = 8
    warmup: int = 100
    samples: int = 50
    keep_every: int = 10
    seed: int = 0
    sigma: float = DEFAULT_SIGMA

    def convert_values(self) -> None:
        object.__setattr__(self, "_sampler_settings", SamplerSettings(  # checked with the request; the job trusts it
            chains=self.chains, warmup=self.warmup, samples=self.samples, keep_every=self.keep_every,
            sigma=self.sigma, seed=self.seed))

    def check_values(self) -> None:
        """Checks the request when it is made from settings (:meth:`build`, or directly)."""
        if not self.classifier_a or not self.classifier_b:
            raise ProbeError("a comparison needs two classifiers (classifier A and classifier B)")
        if self.classifier_a == self.classifier_b:
            raise ProbeError("pick two different classifiers to compare")

    def sampler_settings(self) -> SamplerSettings:
        """The sampler's settings, checked when this request was made."""
        return self._sampler_settings

    @property
    def classifiers(self) -> list[str]:
        return [self.classifier_a, self.classifier_b]

    @classmethod
    def build(cls, registry, *, dataset: str, classifier_a: str, classifier_b: str, generator: str | None = None,
              **settings) -> "CompareRequest":
        """The one way to make a comparison request: settings not given (or None) take this type's defaults,
        and all are checked once, when the request is made (:meth:`check_values`), before any work; the job
        trusts them.

        Parameters
        ----------
        registry : ModelRegistry
            The workspace (the models are resolved there by the run, which may train missing defaults).
        dataset, classifier_a, classifier_b, generator : str
            The models as references (resolved, and trained if they are missing defaults, by the run).
        **settings
            Any of :data:`COMPARE_SETTINGS`.

        Raises
        ------
        ProbeError
            For a missing classifier, an unknown setting or a value the sampler cannot use.
        """
        refuse_unknown(settings, COMPARE_SETTINGS, "comparison")
        return cls(dataset=dataset, classifier_a=classifier_a, classifier_b=classifier_b,
                   generator=generator or "default",
                   **{key: value for key, value in settings.items() if value is not None})  # which checks them


COMPARE_SETTINGS = ("chains", "warmup", "samples", "keep_every", "seed", "sigma")


@job_of(CompareRequest)
def compare_job(registry, request: CompareRequest, device: str = "cpu"):
    """The work of :func:`compare_classifiers` as a job (the dashboard runs it in the background); the request's
    settings were checked when it was built (:meth:`CompareRequest.build`)."""

    def run(context) -> ComparisonResult:
        models = registry.announcing(training_announcer(context))
        dataset = request.dataset
        data = load_dataset(dataset, models.data_dir)
        gen = models.get_or_train_reference(request.generator or "default", "generator", dataset, device=device)
        sides = [models.get_or_train_reference(ref, "classifier", dataset, device=device)
                 for ref in request.classifiers]
        names = tuple(sides[0].class_names)  # both matched to the data set's classes by name, in its order
        if tuple(sides[1].class_names) != names:
            raise ProbeError("both classifiers must have the same classes to be compared")
        checks = [checked_models(clf, data, gen if side == 0 else None) for side, clf in enumerate(sides)]
        spec = TargetSpec.join([TargetSpec.high(names, c) for c in range(len(names))])
        summaries = []
        for side, clf in enumerate(sides):
            result = sample(clf.module, gen.module, spec, class_names=names, settings=request.sampler_settings(),
                            store=context.store, run_id=context.run_id, target_index_offset=side * len(names),
                            reporter=side_of_comparison(context, side))
            summaries.append({"classifier": clf.id, "hit_rates": [t["hit_rate"] for t in result["targets"]]})
        return ComparisonResult(summaries, list(names), [s.id for s in sides], gen.id, checks[0][1].weak,
                                check_record(*checks[0]))

    return run


def side_of_comparison(context: Reporter, side: int) -> Reporter:
    """``context`` for one classifier's half of a comparison run: its fraction is the first or second half of
    the run's, its line names the side."""
    return rewritten(context, lambda progress, message, details, force: (
        None if progress is None else (side + progress) / 2,
        f"classifier {'AB'[side]}: {message}" if message else None, None, force))
