"""What the Defuse steps return and store: :class:`IdentificationResult`, :class:`DistillationResult`,
:class:`CorrectionResult` and :class:`EmbeddingResult` (:func:`probe_core.runs.runconfig.result_of` reads them back).

The failures, clusters and maps themselves are in the store (:mod:`probe_core.defuse.queries`); a result
is their summary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from probe_core.runs.lifecycle import StoredResult

IDENTIFY, DISTILL, CORRECT, EMBEDDING = "defuse-identify", "defuse-distill", "defuse-correct", "defuse-embedding"


@dataclass(frozen=True)
class IdentificationResult(StoredResult):
    """Algorithm 1 over a data set's training images: the misclassified decodings kept.

    Attributes
    ----------
    dataset, classifier, vae : str
        The stored references the failures were found with.
    images : int
        Training images perturbed.
    failures : int
        Failures kept (at most ``max_per_image`` per image).
    images_with_failures : int
    failures_by_prediction : list of int
        (K,) failures per predicted class.
    seconds : float
    generator_weak : bool
        The VAE failed its check: the failures are decodings of a weak generator.
    generator_warning : str or None
    generator_check : dict
    not_done : list of dict
        Shards that gave no result (``shard``, ``covers``, ``error``).
    distill_run : int or None
        The distillation run the dashboard's one button started next (None: none, or too few failures).
    classifier_warning : str or None
        Set when the user insisted on a classifier near chance: the failures say little about a trained model.
    noise : dict
        The noise the perturbations were drawn with: ``noise``, ``a``, ``b``, ``noise_scale`` (empty in runs
        stored before it was recorded).
    judge : str or None
        The classifier that confirmed each failure's decoding still shows its source label (None: none did).
    judge_sure : float or None
        The judge's least probability of the source label for a failure to count.
    judge_warning : str or None
        Set when the judge was trained on the same data as the classifier: it may share, and hide, its flaws.
    judge_reason : str or None
        Why this judge ran (given by the user, or chosen from the data's size) and what it may share.
    misclassified : int or None
        Decodings the classifier got wrong, before the judge confirmed any (None in runs stored before it was
        counted).
    confirmed : int or None
        Of those, the decodings the judge confirmed still show their source class (the failures before the M per
        image are kept); without a judge, all of them.
    class_names : list of str
        The data set's classes, in the order ``failures_by_prediction`` counts them (empty in runs stored before
        it was kept).
    """

    kind: ClassVar[str] = IDENTIFY

    dataset: str
    classifier: str
    vae: str
    images: int
    failures: int
    images_with_failures: int
    failures_by_prediction: list[int]
    seconds: float
    generator_weak: bool = False
    generator_warning: str | None = None
    generator_check: dict = field(default_factory=dict)
    not_done: list[dict] = field(default_factory=list)
    distill_run: int | None = None
    classifier_warning: str | None = None
    noise: dict = field(default_factory=dict)
    judge: str | None = None
    judge_sure: float | None = None
    judge_warning: str | None = None
    judge_reason: str | None = None
    misclassified: int | None = None
    confirmed: int | None = None
    class_names: list[str] = field(default_factory=list)

    @property
    def confirmed_words(self) -> str | None:
        """With a judge: how many misclassified decodings it confirmed still show their source class, in words."""
        if self.judge is None or not self.misclassified or self.confirmed is None:
            return None
        return (f"the judge {self.judge} confirmed {self.confirmed:,} of {self.misclassified:,} misclassified "
                f"decodings ({self.confirmed / self.misclassified:.1%}) still show their source class")


@dataclass(frozen=True)
class DistillationResult(StoredResult):
    """The failures clustered (Dirichlet-process GMM) into failure regions to label.

    Attributes
    ----------
    dataset, classifier, vae : str
    identify_run : int
    failures : int
    clusters : int
        Kept clusters with at least one failure.
    converged : bool
    failures_in_kept_clusters : int
    seconds : float
    tau : float
        The sampling temperature of a region's review and finetuning samples.
    projection_dim : int
        The principal components the mixture was fitted in (0: the codes themselves).
    class_share : float
        Light clusters holding this share of one class's failures were kept too (0: the weight threshold alone).
    recognisable_clusters : int or None
        With the identification's judge: the clusters whose review images it calls one class (each cluster's
        ``info`` says, :func:`~probe_core.defuse.review.recognisability`); None without a judge.
    """

    kind: ClassVar[str] = DISTILL

    dataset: str
    classifier: str
    vae: str
    identify_run: int
    failures: int
    clusters: int
    converged: bool
    failures_in_kept_clusters: int
    seconds: float
    tau: float = 0.5
    projection_dim: int = 0
    class_share: float = 0.0
    recognisable_clusters: int | None = None


@dataclass(frozen=True)
class CorrectionResult(StoredResult):
    """Finetuning with L(D) + λ·CE(D_f) over a λ sweep, and the baseline, before/after.

    Attributes
    ----------
    distill_run : int
    source : str
        The labels used (``human`` or ``oracle:MODEL``).
    regions : list of dict
        The labelled failure regions (``cluster_id``, ``label`` and, where a judge looked, ``recognisable``).
    results : dict
        ``before``, ``defuse`` and ``baseline``: ``test_accuracy`` and ``failure_accuracy`` (fractions); the
        chosen ``lambda``; the baseline's ``kind`` and ``description``.
    selection : dict
        The rule choosing λ and epoch (``rule``, ``description``).
    sweep, baseline_sweep : list of dict
        Per λ: its scores (``lambda``, ``test_accuracy``, ``failure_accuracy``, ``validation_accuracy``, ``score``).
    baseline_failures : int
        Images the baseline finetuned on.
    lambdas_not_done : dict
        Per phase, the λ whose shard gave no result.
    corrected_model, original_model : str
        The corrected classifier, registered next to the original (kept).
    seconds : float
    steps_per_epoch : int or None
        The batches of D each epoch took (None: a full pass).
    budget : str
        The λ grid and epochs it ran with, and why (:func:`~probe_core.defuse.correct_step.correction_plan`).
    """

    kind: ClassVar[str] = CORRECT

    distill_run: int
    source: str
    regions: list[dict]
    results: dict
    selection: dict
    sweep: list[dict]
    baseline_sweep: list[dict]
    baseline_failures: int
    lambdas_not_done: dict
    corrected_model: str
    original_model: str
    seconds: float
    steps_per_epoch: int | None = None
    budget: str = ""

    @property
    def recognisable_words(self) -> str | None:
        """How many corrected regions their judge recognised as one class, in words, with a warning when most were
        not (a fix of blurs nobody could label); None where no judge looked (each region's ``recognisable``)."""
        judged = [region for region in self.regions if region.get("recognisable") is not None]
        if not judged:
            return None
        recognised = sum(bool(region["recognisable"]) for region in judged)
        words = f"{recognised} of {len(judged)} corrected regions were recognisable to their judge"
        if recognised * 2 < len(judged):
            words = (f"warning: only {words}: most corrected regions are blurs nobody could label, so failure-region "
                     "accuracy measures a finetune on the generator's artefacts, not a fixed flaw")
        return words


@dataclass(frozen=True)
class EmbeddingResult(StoredResult):
    """A distillation run's failure map computed (the arrays are cached with the run ``distill_run``)."""

    kind: ClassVar[str] = EMBEDDING

    points: int
    distill_run: int | None = None
