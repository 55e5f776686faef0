"""Model checks: does a classifier fit a data set, and is a generator good enough to probe with?

Every path by which a user brings a model proves itself here before a result is shown:

- :func:`check_classifier` runs the classifier (its classes already matched to the data set's by
  name, :func:`probe_core.data.classes.match_classes`) on the data set's labelled test images:
  accuracy, per-class accuracy, the class map used. Near-chance accuracy where some permutation of
  the classes would score far better means the classes are matched wrongly: it is refused, naming
  that permutation.
- :func:`check_generator` measures a generator against the data: reconstruction error of held-out
  images (with an encoder), the classifier's confidence and entropy on its samples against real
  images, FD-clf against the data set's own train-vs-test FD-clf (too high: unlike the data; far below: copies),
  and its prior draws placed against the training images (:mod:`probe_core.data.provenance`): a generator whose
  draws are mostly near copies of training images is weak, since it shows only what the data set already
  holds. One failed threshold makes it ``weak``: probes still run, but every result made with it carries the
  flag.

The thresholds (:data:`GENERATOR_THRESHOLDS`) were calibrated so that the default digits and MNIST
generators pass and a 1-epoch VAE is weak (``benchmarks/generator_check.py`` prints the figures).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from probe_core.catalog import load_dataset
from probe_core.data.datasets import resize_images
from probe_core.data.provenance import (
    MEMORISATION_LIMITS,
    NEAR_COPY_RATIO,
    memorisation_reasons,
    summarise_provenance,
    training_index,
)
from probe_core.errors import ProbeError
from probe_core.models.kept_checks import keep, kept_check_path, read_kept
from probe_core.models.remedies import TrainingRemedy, longer_training
from probe_core.models.training import _features, frechet_distance
from probe_core.sampling import BayesTrExPosterior, SamplerConfig, run_hmc, run_rwm
from probe_core.sampling.protocols import is_differentiable, prior_draws
from probe_core.sampling.targets import TargetBatch, parse_targets

CHECK_IMAGES = 2000  # test images a check looks at, at most (a seeded random subset of larger sets)
# A classifier within this much of chance, whose best permutation of classes scores at least
# PERMUTATION_GAIN more, has its classes matched wrongly.
NEAR_CHANCE_MARGIN = 0.15
PERMUTATION_GAIN = 0.3

# Measured (benchmarks/generator_check.py; default model -> 1-epoch VAE): fd_ratio digits 6 -> 140 (GAN 4),
# MNIST 20 -> 121; reconstruction_ratio digits 0.24 -> 1.13, MNIST 0.41 -> 0.92. The confidence ratio did
# not separate them (a 1-epoch VAE's blobs can look confident), so its limit only catches unreadable samples.
GENERATOR_THRESHOLDS = {
    # FD-clf of generated against real test images, divided by FD-clf of train against test images.
    "fd_ratio": 50.0,
    # The classifier's mean top probability on samples, divided by that on real test images (a minimum).
    "confidence_ratio": 0.5,
    # Mean squared reconstruction error of held-out images, divided by that of the mean image.
    "reconstruction_ratio": 0.7,
    # The classifier's accuracy on the reconstructions of held-out images, divided by that on the images (a
    # minimum). Defuse's failures are decodings near an image that the classifier calls another class: a VAE that
    # loses the class makes them the generator's failures. Default VAEs: digits 0.99, colours 1.0; the 32x32
    # colour VAE whose FD-clf and sharpness passed kept the class of 0.62 (benchmarks/generator_check.py,
    # benchmarks/real_size.py).
    "reconstruction_class_ratio": 0.8,
    # Sharpness (mean absolute difference of neighbouring pixels) of samples over that of real test images: a
    # figure no classifier enters. The default digits and colours generators measure 0.78-1.0; at 32x32 colour a
    # blurry VAE measured 0.25 and a GAN drawing coloured noise 1.82, which FD-clf (ratio 29) let through.
    "sharpness_ratio": (0.5, 1.6),
    # FD-clf ratio's lower side (a minimum): samples nearer the real images, in the classifier's features, than the
    # training images themselves are is what a generator that returns (denoised) training images gives: the 64x64
    # kernel density over autoencoder codes measured 0.1 (issue 98), the default digits and MNIST generators 4-20.
    "fd_ratio_floor": 0.25,
    # With a judge (a classifier that is not the probed one): the share of a short high:C probe's hits it calls
    # class C (a minimum). Hits are meant to look like the class; noise that fools only the probed classifier
    # passes every figure above that is measured through that classifier.
    "judge_agreement": 0.5,
}
# The judged probe: high:C for this many classes spread over the data's, chains of warm-up + samples each.
JUDGE_PROBE = {"classes": 2, "chains": 8, "warmup": 20, "samples": 20}


class ModelCheckError(ProbeError):
    """A model failed its check on the data: a run with it would give a wrong answer."""


@dataclass(frozen=True)
class ClassifierCheck:
    """A classifier on a data set's labelled test images.

    Attributes
    ----------
    classifier, dataset : str
        References checked.
    accuracy : float
        Fraction of the checked test images classified as labelled (0-1).
    per_class : dict
        ``{data set's class name: accuracy}`` over the classes the classifier knows.
    class_map : dict
        ``{classifier's name: data set's name}`` used.
    images : int
        Test images checked.
    chance : float
        1 / number of classes the classifier knows.
    permutation_accuracy : float
        Accuracy under the best reassignment of the classifier's classes (Hungarian on the confusion matrix).
    best_permutation : dict
        ``{data set's name the classifier says: data set's name it would have to mean}`` for the
        classes that best reassignment moves; empty when it moves none.
    usable : bool
        False when the classes look matched wrongly or the classifier is near chance; ``message`` says why.
    message : str
    near_chance : bool
        Accuracy within :data:`NEAR_CHANCE_MARGIN` of chance: it has not learned the data. Refused before a
        run unless the user insists (``allow_weak_classifier``), and then every result carries the flag.
    remedy : TrainingRemedy or None
        For a classifier near chance that the tool trained: its recipe trained longer.
    """

    classifier: str
    dataset: str
    accuracy: float
    per_class: dict
    class_map: dict
    images: int
    chance: float
    permutation_accuracy: float
    best_permutation: dict
    usable: bool
    message: str
    near_chance: bool = False
    remedy: TrainingRemedy | None = None

    def to_dict(self) -> dict:
        return {**asdict(self), "remedy": None if self.remedy is None else self.remedy.to_dict()}


@dataclass(frozen=True)
class GeneratorCheck:
    """A generator against a data set, seen through a classifier.

    Attributes
    ----------
    generator : str
    verdict : {"ok", "weak", "unjudged"}
        ``unjudged`` when the classifier whose features would judge the samples is near chance: its
        features do not tell the data's images apart, so no verdict of 'ok' can be given (treated as weak).
    figures : dict
        ``sharpness_ratio`` (measured without any classifier), ``fd_clf``, ``fd_train_test``, ``fd_ratio``,
        ``sample_confidence``, ``real_confidence``,
        ``confidence_ratio``, ``sample_entropy``, ``real_entropy`` and, with an encoder,
        ``reconstruction_mse``, ``mean_image_mse``, ``reconstruction_ratio``, ``reconstruction_accuracy``,
        ``real_accuracy`` and ``reconstruction_class_ratio`` (the classifier on reconstructions of held-out
        images against on the images); its draws placed against the training images
        (:func:`~probe_core.data.provenance.summarise_provenance`): ``draws_placed``, ``draws_near_copy_share``,
        ``draws_median_ratio`` and ``draws_distinct_nearest``.
    failed : list of str
        The figures over their thresholds, in words.
    thresholds : dict
    samples : np.ndarray
        A grid of prior samples, shape (16, C, H, W) in [0, 1].
    remedy : TrainingRemedy or None
        For a weak generator the tool trained: its recipe trained longer (:mod:`probe_core.models.remedies`).
    """

    generator: str
    verdict: str
    figures: dict
    failed: list = field(default_factory=list)
    thresholds: dict = field(default_factory=lambda: dict(GENERATOR_THRESHOLDS))
    samples: np.ndarray | None = None
    remedy: TrainingRemedy | None = None

    @property
    def weak(self) -> bool:
        """Anything but 'ok': results built on it carry the flag."""
        return self.verdict != "ok"

    @property
    def warning(self) -> str:
        """One line for stderr and the pages; empty when the generator is fine."""
        if not self.weak:
            return ""
        if self.verdict == "unjudged":
            return (f"generator {self.generator} cannot be judged on this data: {'; '.join(self.failed)}. Train a "
                    f"classifier that has learned the data first; until then its samples are not vouched for")
        own = ("bring your own with an encoder (a model file or a plugin .py, trained where more capacity fits: "
               "docs/models.md), or pick another generator")
        if self.remedy is None:
            advice = own[0].upper() + own[1:]
        else:
            advice = (f"Fix: {self.remedy.description}, with `{self.remedy.command}` (the Models page's fix button "
                      f"trains the same; the new model gets its own check); or {own}")
        return (f"generator {self.generator} is weak on this data ({'; '.join(self.failed)}), so results built on "
                f"it may be meaningless. {advice}")

    def to_dict(self) -> dict:
        """JSON-ready, without the sample grid."""
        return {"generator": self.generator, "verdict": self.verdict, "figures": self.figures,
                "failed": list(self.failed), "thresholds": dict(self.thresholds),
                "remedy": None if self.remedy is None else self.remedy.to_dict()}


def _check_subset(count: int, seed: int = 0) -> np.ndarray:
    if count <= CHECK_IMAGES:
        return np.arange(count)
    return np.sort(np.random.default_rng(seed).choice(count, CHECK_IMAGES, replace=False))


@torch.no_grad()
def _probabilities(module: torch.nn.Module, images: torch.Tensor, batch_size: int = 512) -> torch.Tensor:
    device = next(iter(module.parameters()), torch.empty(0)).device
    return torch.cat([module(images[s:s + batch_size].to(device)).cpu() for s in range(0, len(images), batch_size)])


_CLASSIFIER_CHECKS: dict[tuple, ClassifierCheck] = {}


def _model_key(model) -> str:
    return f"{model.id}@{id(model.module)}" if model.kind.startswith("memory") else model.id


def _best_reassignment(covered: list[int], truth: np.ndarray, predicted: np.ndarray,
                       names) -> tuple[float, dict]:
    """The accuracy under the best one-to-one reassignment of predicted classes (the Hungarian method on the
    confusion matrix of ``truth`` and ``predicted``, both (N,) over ``covered``), and that reassignment by name."""
    from scipy.optimize import linear_sum_assignment

    position = {c: i for i, c in enumerate(covered)}
    confusion = np.zeros((len(covered), len(covered)))
    np.add.at(confusion, ([position[t] for t in truth], [position[p] for p in predicted]), 1)
    rows, columns = linear_sum_assignment(-confusion)
    moved = {names[covered[c]]: names[covered[r]] for r, c in zip(rows, columns) if r != c}
    return float(confusion[rows, columns].sum() / len(truth)), moved


def check_classifier(classifier, dataset) -> ClassifierCheck:
    """Check a resolved classifier (:meth:`ModelRegistry.resolve`) on the data set's labelled test images.

    Parameters
    ----------
    classifier : LoadedModel
        Outputs already matched to ``dataset``'s classes (its ``class_match``).
    dataset : ImageDataset

    Returns
    -------
    ClassifierCheck
        Cached per classifier and data set in this process (a check is a few forward passes).
    """
    # in-memory models have no stable id, so their checks are keyed by the object itself
    key = (_model_key(classifier), dataset.name, len(dataset.test_labels))
    if key in _CLASSIFIER_CHECKS:
        return _CLASSIFIER_CHECKS[key]
    match = classifier.class_match
    covered = list(match.covered) if match is not None else list(range(len(classifier.class_names)))
    labels = dataset.test_labels.numpy()
    known = np.flatnonzero(np.isin(labels, covered))
    chosen = known[_check_subset(len(known))]
    if not len(chosen):
        raise ModelCheckError(f"data set {dataset.name} has no labelled test images of the classes of "
                              f"{classifier.id}: it cannot be checked")
    images = dataset.test_images[chosen]
    kept_at = kept_check_path(classifier, "classifier", [classifier],
                              {"dataset": dataset.name, "classes": list(dataset.class_names),
                               "margins": [NEAR_CHANCE_MARGIN, PERMUTATION_GAIN]},
                              (images, dataset.test_labels[chosen]))
    kept = read_kept(kept_at)
    if kept is not None:
        fields, _ = kept
        try:
            remedy = longer_training(classifier.id, classifier.record) if fields.pop("remedy") else None
            _CLASSIFIER_CHECKS[key] = ClassifierCheck(**fields, remedy=remedy)
            return _CLASSIFIER_CHECKS[key]
        except (KeyError, TypeError):  # kept with other fields (KEPT_CHECK_VERSION not raised): measured again
            pass
    predicted = np.asarray(covered)[_probabilities(classifier.module, images).argmax(1).numpy()]
    truth = labels[chosen]
    accuracy = float((predicted == truth).mean())
    permutation_accuracy, moved = _best_reassignment(covered, truth, predicted, dataset.class_names)
    names = dataset.class_names
    per_class = {names[c]: float((predicted[truth == c] == c).mean()) for c in covered if (truth == c).any()}
    chance = 1.0 / len(covered)
    near_chance = len(covered) > 1 and accuracy <= chance + NEAR_CHANCE_MARGIN
    wrongly_matched = (len(covered) > 1 and accuracy <= chance + NEAR_CHANCE_MARGIN
                       and permutation_accuracy >= accuracy + PERMUTATION_GAIN)
    class_map = match.mapping if match is not None else {n: n for n in classifier.class_names}
    remedy = None
    if wrongly_matched:
        shown = ", ".join(f"{says}={means}" for says, means in list(moved.items())[:12])
        message = (f"classifier {classifier.id} scores {accuracy:.0%} on {dataset.name} (chance {chance:.0%}), but "
                   f"{permutation_accuracy:.0%} if its classes are reassigned: its classes are matched to the data "
                   f"set's wrongly. Reassignment found (what it says = what the data calls it): {shown}. Check the "
                   f"class names, or give the class map, e.g. --class-map \"MODEL_NAME=DATA_NAME,...\"")
    elif near_chance:
        remedy = longer_training(classifier.id, getattr(classifier, "record", None))
        fix = (f"{remedy.description}: `{remedy.command}`" if remedy is not None else
               "train it better where it was made, or bring another")
        message = (f"classifier {classifier.id} is near chance on {dataset.name}: {accuracy:.1%} on {len(chosen)} "
                   f"test images (chance {chance:.1%}): it has not learned the data, so what is sampled or found "
                   f"with it says nothing about a trained model. Fix: {fix}; or insist with "
                   f"--allow-weak-classifier (every result is then flagged)")
    else:
        message = f"classifier {classifier.id}: {accuracy:.1%} on {len(chosen)} test images of {dataset.name}"
    result = ClassifierCheck(classifier.id, dataset.name, accuracy, per_class, class_map, int(len(chosen)), chance,
                             permutation_accuracy, moved, not (wrongly_matched or near_chance), message,
                             near_chance and not wrongly_matched, remedy)
    keep(kept_at, result.to_dict())
    _CLASSIFIER_CHECKS[key] = result
    return result


def require_usable(check: ClassifierCheck, allow_weak_classifier: bool = False) -> ClassifierCheck:
    """``check``, or :class:`ModelCheckError` with its message when the classifier is not usable.

    ``allow_weak_classifier`` lets a near-chance classifier through (the user insists; results are flagged);
    classes matched wrongly are refused always.
    """
    if not check.usable and not (allow_weak_classifier and check.near_chance):
        raise ModelCheckError(check.message)
    return check


def _sharpness(images: torch.Tensor) -> float:
    """Mean absolute difference between neighbouring pixels of images (B, C, H, W): low for blur, high for noise."""
    return float(((images[..., 1:, :] - images[..., :-1, :]).abs().mean()
                  + (images[..., :, 1:] - images[..., :, :-1]).abs().mean()) / 2)


def sharpness_reference(generator: torch.nn.Module, real: torch.Tensor) -> torch.Tensor:
    """The real images (B, C, H, W) as sharp as ``generator`` can show them: resized to its own size and back
    where it is trained smaller than the data and seen through a resize (``generator_shape``,
    :class:`~probe_core.models.resized.ResizedGenerator`), else as they are. A 64x64 generator's samples resized to
    128x128 cannot be sharper than that; against the images themselves it was called blurry for the resize."""
    own = getattr(generator, "generator_shape", None)
    if own is None or tuple(own[1:]) == tuple(real.shape[2:]):
        return real
    return resize_images(resize_images(real, *own[1:]), *real.shape[2:])


def _entropy(probabilities: torch.Tensor) -> float:
    return float(-(probabilities * probabilities.clamp_min(1e-12).log()).sum(1).mean())


_GENERATOR_CHECKS: dict[tuple, GeneratorCheck] = {}


def judged_probe(generator: torch.nn.Module, classifier: torch.nn.Module, judge: torch.nn.Module, class_count: int,
                 seed: int = 0) -> dict:
    """A short ``high:C`` probe of the generator through the classifier, its hits judged by another classifier.

    :data:`JUDGE_PROBE` gives the classes (spread over ``class_count``), chains and iterations; chains start from
    the generator's prior. Gradients flow through ``generator`` (HMC) unless it declares itself not
    differentiable (random-walk Metropolis).

    Parameters
    ----------
    generator : torch.nn.Module
        ``latent_dim`` and ``decode(z)``: (B, D) -> (B, C, H, W).
    classifier, judge : torch.nn.Module
        Images (B, C, H, W) to probabilities (B, K), in the data set's class order.
    class_count : int
        K.

    Returns
    -------
    dict
        ``judge_hits`` (hits of all classes), ``judge_agreed`` (those the judge calls the target class),
        ``judge_agreement`` (their share, None without hits) and ``judge_classes`` (the class indices probed).
    """
    probe = JUDGE_PROBE
    classes = sorted({(index * class_count) // probe["classes"] + class_count // (2 * probe["classes"])
                      for index in range(probe["classes"])})
    names = tuple(str(index) for index in range(class_count))
    runner = run_hmc if is_differentiable(generator) else run_rwm
    hits = agreed = 0
    for cls in classes:
        targets = TargetBatch(parse_targets(f"high:{cls}", names), probe["chains"])
        posterior = BayesTrExPosterior(classifier, generator, targets)
        result = runner(posterior, SamplerConfig(num_warmup=probe["warmup"], num_samples=probe["samples"],
                                                 seed=seed + cls, init="prior"))
        flat = result.probs.reshape(-1, class_count)
        hit = targets.targets[0].is_hit(flat)
        if hit.any():
            with torch.no_grad():
                images = generator.decode(result.positions.reshape(len(flat), -1)[hit])
            said, judged = judge_agreement(judge, images, (cls,))
            hits, agreed = hits + judged, agreed + said
    return {"judge_hits": hits, "judge_agreed": agreed,
            "judge_agreement": round(agreed / hits, 3) if hits else None, "judge_classes": classes}


@torch.no_grad()
def check_generator(generator, classifier, dataset, samples: int = 1000, seed: int = 0,
                    judge=None) -> GeneratorCheck:
    """Measure a resolved generator against the data set's held-out images, through ``classifier``.

    Parameters
    ----------
    generator : LoadedModel
        ``latent_dim``, ``decode`` and optionally ``encode``.
    classifier : LoadedModel
        Its penultimate features give FD-clf; its probabilities give confidence and entropy.
    dataset : ImageDataset
    samples : int
        Prior draws decoded (and real images compared), at most.
    judge : LoadedModel, optional
        A classifier that is not ``classifier``, resolved for the data set: a short ``high:C`` probe
        (:func:`judged_probe`) is run and its hits judged; the verdict is 'ok' only if the judge agrees with
        :data:`GENERATOR_THRESHOLDS` ``judge_agreement`` of them.

    Returns
    -------
    GeneratorCheck
        Cached per generator, classifier, judge and data set in this process.

    Raises
    ------
    ProbeError
        If ``judge`` is the probed classifier itself.
    """
    if judge is not None and _model_key(judge) == _model_key(classifier):
        raise ProbeError(f"the judge must be another classifier than the probed one ({classifier.id}): its "
                         f"agreement is meant to say whether hits look like the class to a model never probed")
    key = (_model_key(generator), _model_key(classifier), dataset.name, samples, seed,
           None if judge is None else _model_key(judge))
    if key in _GENERATOR_CHECKS:
        return _GENERATOR_CHECKS[key]

    module = generator.module
    real_index = _check_subset(len(dataset.test_images), seed)[:samples]
    real = dataset.test_images[real_index]
    train = dataset.train_images[_check_subset(len(dataset.train_images), seed + 1)[:samples]]
    device = next(iter(module.parameters()), torch.empty(0)).device
    # the verdict also reads the classifier's own check (on the whole labelled test set) and the training mean
    kept_at = kept_check_path(generator, "generator", [generator, classifier, judge],
                              {"dataset": dataset.name, "classes": list(dataset.class_names), "samples": samples,
                               "seed": seed, "device": device.type, "thresholds": GENERATOR_THRESHOLDS,
                               "margins": [NEAR_CHANCE_MARGIN, PERMUTATION_GAIN], "judge_probe": JUDGE_PROBE,
                               "memorisation": [MEMORISATION_LIMITS, NEAR_COPY_RATIO]},
                              (real, train, dataset.test_images, dataset.test_labels, dataset.train_images.mean(0)))
    kept = _kept_generator_check(kept_at, generator)
    if kept is not None:
        _GENERATOR_CHECKS[key] = kept
        return kept
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        z = prior_draws(module, len(real), torch.Generator().manual_seed(seed))
        generated = torch.cat([module.decode(z[s:s + 256].to(device)).cpu() for s in range(0, len(z), 256)]).float()
    if generated.shape[1:] != real.shape[1:]:
        raise ModelCheckError(f"generator {generator.id} makes images of shape {tuple(generated.shape[1:])}, but "
                              f"{dataset.name}'s are {tuple(real.shape[1:])}")
    figures = _generator_figures(module, classifier, dataset, generated, real, real_index, train)
    memorised = _memorisation_failure(figures, generated, dataset)
    failed = memorised + _quality_failures(figures)
    if judge is not None:
        failed += _judge_failures(module, classifier, judge, figures, seed)
    verdict = "weak" if failed else "ok"
    judge_check = check_classifier(classifier, dataset)
    if judge_check.near_chance or not judge_check.usable:
        # FD-clf and confidence are measured in this classifier's features; one that has not learned maps every
        # image alike (FD 0 against a train-vs-test FD of 0), so they cannot vouch for the samples
        verdict = "unjudged"
        failed = [f"the classifier {classifier.id} that would judge its samples scores {judge_check.accuracy:.1%} "
                  f"(chance {judge_check.chance:.1%})", *failed]
    remedy = _generator_remedy(generator, verdict, failed, bool(memorised))
    result = GeneratorCheck(generator.id, verdict, figures, failed, samples=generated[:16].numpy(), remedy=remedy)
    keep(kept_at, result.to_dict(), result.samples)
    _GENERATOR_CHECKS[key] = result
    return result


def _kept_generator_check(kept_at, generator) -> "GeneratorCheck | None":
    """The check kept on disk for these inputs, or None (none kept, or kept with other fields: measured again)."""
    kept = read_kept(kept_at)
    if kept is None:
        return None
    fields, grid = kept
    try:
        remedy = _generator_remedy(generator, fields["verdict"], fields["failed"],
                                   fields["figures"]["copies_training_images"])
        return GeneratorCheck(generator.id, fields["verdict"], fields["figures"], fields["failed"],
                              dict(GENERATOR_THRESHOLDS), samples=grid, remedy=remedy)
    except (KeyError, TypeError):  # kept with other fields (KEPT_CHECK_VERSION not raised)
        return None


def _generator_figures(module, classifier, dataset, generated: torch.Tensor, real: torch.Tensor,
                       real_index: torch.Tensor, train: torch.Tensor) -> dict:
    """FD-clf against the data's own train-vs-test, confidence, entropy and sharpness of the prior draws
    ``generated`` (N, C, H, W) beside the held-out images ``real``; with an encoder, how its reconstructions keep
    the held-out images' pixels and classes."""
    features_real = _features(classifier.module, real)
    fd_clf = frechet_distance(features_real, _features(classifier.module, generated))
    fd_train_test = frechet_distance(features_real, _features(classifier.module, train))
    p_real, p_generated = _probabilities(classifier.module, real), _probabilities(classifier.module, generated)
    real_confidence = float(p_real.max(1).values.mean())
    sample_confidence = float(p_generated.max(1).values.mean())
    sharpness = _sharpness(generated) / max(_sharpness(sharpness_reference(module, real)), 1e-12)
    figures = {"sharpness_ratio": round(sharpness, 3), "fd_clf": round(fd_clf, 3), "fd_train_test": round(fd_train_test, 3),
               "fd_ratio": round(fd_clf / max(fd_train_test, 1e-6), 2),
               "sample_confidence": round(sample_confidence, 4), "real_confidence": round(real_confidence, 4),
               "confidence_ratio": round(sample_confidence / max(real_confidence, 1e-6), 3),
               "sample_entropy": round(_entropy(p_generated), 4), "real_entropy": round(_entropy(p_real), 4)}
    if callable(getattr(module, "encode", None)):
        device = next(iter(module.parameters()), torch.empty(0)).device
        mean, _ = module.encode(real.to(device))
        reconstruction = torch.cat([module.decode(mean[s:s + 256]) for s in range(0, len(mean), 256)]).cpu()
        error = float(((reconstruction - real) ** 2).mean())
        baseline = float(((real - dataset.train_images.mean(0, keepdim=True)) ** 2).mean())
        figures.update(reconstruction_mse=round(error, 5), mean_image_mse=round(baseline, 5),
                       reconstruction_ratio=round(error / max(baseline, 1e-12), 3))
        figures.update(_class_kept(classifier, p_real, _probabilities(classifier.module, reconstruction),
                                   dataset.test_labels[real_index].numpy()))
    return figures


def _memorisation_failure(figures: dict, generated: torch.Tensor, dataset) -> list[str]:
    """The prior draws placed against the training images, as every hit is (adds the ``draws_*`` figures and
    ``copies_training_images``): one failure line when they copy their training images, else none."""
    placed = summarise_provenance(training_index(dataset).provenance(generated))
    figures.update(draws_placed=placed["measured"], draws_near_copy_share=placed["near_copy_share"],
                   draws_median_ratio=placed["median_ratio"], draws_distinct_nearest=placed["distinct_nearest"])
    memorised = memorisation_reasons(placed)
    figures["copies_training_images"] = bool(memorised)
    if not memorised:
        return []
    # FD-clf far below the data's own is reported with the copies it comes from; alone it is also what a generator
    # that returns held-out images gives (they are the real images FD-clf is measured against)
    if figures["fd_ratio"] < GENERATOR_THRESHOLDS["fd_ratio_floor"]:
        memorised.append(f"FD-clf {figures['fd_clf']:.3g} is only {figures['fd_ratio']:.2g}x the data's own "
                         f"train-vs-test {figures['fd_train_test']:.3g} (a floor of "
                         f"{GENERATOR_THRESHOLDS['fd_ratio_floor']:g}x): samples nearer the real images than the "
                         f"training images are is what a generator that returns its training images gives")
    return [f"it copies its training images rather than making new ones: of {placed['measured']:,} prior draws, "
            f"{'; '.join(memorised)}"]


def _quality_failures(figures: dict) -> list[str]:
    """The figures of :func:`_generator_figures` beyond :data:`GENERATOR_THRESHOLDS`, in words."""
    failed = []
    if figures["fd_ratio"] > GENERATOR_THRESHOLDS["fd_ratio"]:
        failed.append(f"FD-clf {figures['fd_clf']:.3g} is {figures['fd_ratio']:.0f}x the data's own train-vs-test "
                      f"{figures['fd_train_test']:.3g} (limit {GENERATOR_THRESHOLDS['fd_ratio']:g}x)")
    if figures["confidence_ratio"] < GENERATOR_THRESHOLDS["confidence_ratio"]:
        failed.append(f"the classifier's confidence on its samples is {figures['sample_confidence']:.2f} against "
                      f"{figures['real_confidence']:.2f} on real images")
    low, high = GENERATOR_THRESHOLDS["sharpness_ratio"]
    sharpness = figures["sharpness_ratio"]
    if not low <= sharpness <= high:
        failed.append(f"its samples are {'blurrier' if sharpness < low else 'noisier'} than the data (sharpness "
                      f"{sharpness:.2f}x the real images', limits {low:g}-{high:g}x)")
    ratio = figures.get("reconstruction_ratio")
    if ratio is not None and ratio > GENERATOR_THRESHOLDS["reconstruction_ratio"]:
        failed.append(f"it reconstructs held-out images with {ratio:.0%} of the error of the mean image")
    kept = figures.get("reconstruction_class_ratio")
    if kept is not None and kept < GENERATOR_THRESHOLDS["reconstruction_class_ratio"]:
        failed.append(f"its reconstructions lose the class: the classifier gets "
                      f"{figures['reconstruction_accuracy']:.0%} of held-out images' reconstructions right against "
                      f"{figures['real_accuracy']:.0%} of the "
                      f"images ({kept:.2f}x, limit {GENERATOR_THRESHOLDS['reconstruction_class_ratio']:g}x), so "
                      f"Defuse's failures near an image would be the generator's")
    return failed


def _judge_failures(module, classifier, judge, figures: dict, seed: int) -> list[str]:
    """A short high:C probe's hits judged by ``judge`` (:func:`judged_probe`, its figures added): a failure line
    when no chain hit or the judge calls too few of the hits their class."""
    with torch.enable_grad():  # the probe's HMC differentiates through the generator
        probe = judged_probe(module, classifier.module, judge.module, len(classifier.class_names), seed)
    figures.update(probe, judge=judge.id)
    agreement = figures["judge_agreement"]
    if agreement is None:
        probed = ", ".join(classifier.class_names[index] for index in figures["judge_classes"])
        return [f"no chain of a short high:C probe (classes {probed}) reached its class"]
    if agreement < GENERATOR_THRESHOLDS["judge_agreement"]:
        return [f"an independent classifier ({judge.id}) calls only {agreement:.0%} of a short high:C probe's "
                f"{figures['judge_hits']} hits their class (limit {GENERATOR_THRESHOLDS['judge_agreement']:.0%}): "
                f"they fool the probed classifier without looking like the class"]
    return []


def _generator_remedy(generator, verdict: str, failed: list[str], copies: bool) -> str | None:
    """Training longer, for a weak generator, unless copying its training images is its only failure (training
    longer does not make a generator that copies generate)."""
    if verdict != "weak" or len(failed) <= copies:
        return None
    return longer_training(generator.id, getattr(generator, "record", None))


def _class_kept(classifier, probabilities_real: torch.Tensor, probabilities_reconstructed: torch.Tensor,
                labels: np.ndarray) -> dict:
    """The classifier's accuracy on held-out images and on their reconstructions, over the classes it knows.

    Parameters
    ----------
    probabilities_real, probabilities_reconstructed : torch.Tensor
        Shape (N, K'), K' the classes the classifier knows, in the order of its class match.
    labels : np.ndarray
        Shape (N,), the data set's class indices.
    """
    match = classifier.class_match
    covered = np.asarray(match.covered if match is not None else range(probabilities_real.shape[1]))
    known = np.isin(labels, covered)
    if not known.any():
        return {}
    real = float((covered[probabilities_real.argmax(1).numpy()][known] == labels[known]).mean())
    kept = float((covered[probabilities_reconstructed.argmax(1).numpy()][known] == labels[known]).mean())
    return {"reconstruction_accuracy": round(kept, 4), "real_accuracy": round(real, 4),
            "reconstruction_class_ratio": round(kept / max(real, 1e-6), 3)}


@torch.no_grad()
def judge_agreement(judge: torch.nn.Module, images, classes: tuple[int, ...], batch_size: int = 512) -> tuple[int, int]:
    """How many of ``images`` an independent classifier (one that was not probed) puts in ``classes``.

    Bayes-TrEx's hits are meant to be in-distribution examples of the target class; noise that fools only the
    probed classifier is not. A second classifier trained on the real images is the judge: the share of hits it
    agrees with says how many hits look like the class to a model that never saw the sampler.

    Parameters
    ----------
    judge : torch.nn.Module
        Images (B, C, H, W) to class scores (B, K), in the data set's class order.
    images : array or tensor
        Hit images, shape (N, C, H, W) in [0, 1].
    classes : tuple of int
        The target's class (``high``) or pair (``ambiguous``).

    Returns
    -------
    (int, int)
        Hits the judge puts in ``classes``, and hits judged.
    """
    if images is None or not len(images):
        return 0, 0
    images = torch.as_tensor(images, dtype=torch.float32)
    device = next(iter(judge.parameters()), torch.empty(0)).device
    predicted = torch.cat([judge(images[s:s + batch_size].to(device)).argmax(1).cpu()
                           for s in range(0, len(images), batch_size)])
    return int(torch.isin(predicted, torch.tensor(classes)).sum()), len(images)


@dataclass(frozen=True)
class ModelVerdict:
    """A stored model's check in a few words, and its fix where longer training is one.

    Attributes
    ----------
    words : str
        Classifiers: their accuracy, or why they are refused. Generators: 'ok' or 'weak: reasons'.
    remedy : TrainingRemedy or None
        A weak generator's or a near-chance classifier's recipe trained longer (:mod:`probe_core.models.remedies`).
    """

    words: str
    remedy: TrainingRemedy | None = None


def model_verdicts(registry, dataset: str, model_ids: list[str]) -> dict[str, ModelVerdict]:
    """Each stored model's check on a data set, for model tables (never trains).

    Generators are judged through the data set's default classifier; 'not checked' while that classifier is not
    trained.

    Parameters
    ----------
    registry : ModelRegistry
    dataset : str
        The data set the models are listed for.
    model_ids : list of str
        Stored models of that data set.
    """
    data = load_dataset(dataset, registry.data_dir)
    try:
        reference = registry.resolve("default", "classifier", dataset)
    except ProbeError:
        reference = None
    verdicts = {}
    for model_id in model_ids:
        try:
            record = registry.store.get_model(model_id) or {}
            if record.get("kind") == "classifier":
                check = check_classifier(registry.resolve(model_id, "classifier", dataset), data)
                verdicts[model_id] = ModelVerdict(f"{check.accuracy:.1%} (chance {check.chance:.0%})" if check.usable
                                                  else f"refused: {check.message}", check.remedy)
            elif reference is None:
                verdicts[model_id] = ModelVerdict("not checked: the default classifier is not trained")
            else:
                check = check_generator(registry.resolve(model_id, "generator", dataset), reference, data)
                verdicts[model_id] = ModelVerdict(check.verdict + (f": {'; '.join(check.failed)}" if check.failed
                                                                   else ""), check.remedy)
        except ProbeError as exc:
            verdicts[model_id] = ModelVerdict(f"cannot be checked: {exc}")
    return verdicts


def check_references(registry, classifier: str, dataset: str, generator: str | None = None,
                     device: str = "cpu", judge: str | None = None) -> dict:
    """``probe models check``: resolve (never train) and check a classifier, and a generator, on a data set.

    ``judge`` (a classifier reference other than ``classifier``) adds the judged ``high:C`` probe to the generator's
    check (:func:`judged_probe`).

    Returns
    -------
    dict
        ``{"dataset", "classifier": ClassifierCheck.to_dict(), "generator": GeneratorCheck.to_dict() or None,
        "usable": bool}``.

    Raises
    ------
    ClassMismatchError, ModelNotFoundError, PluginError
        Before any check runs, when the classes do not match or a model cannot be loaded.
    """
    data = load_dataset(dataset, registry.data_dir)
    loaded = registry.resolve(classifier, "classifier", dataset, device=device)
    classifier_check = check_classifier(loaded, data)
    report = {"dataset": data.name, "classifier": classifier_check.to_dict(), "generator": None,
              "usable": classifier_check.usable}
    if generator is not None:
        resolved = registry.resolve(generator, "generator", dataset, device=device)
        judging = None if judge is None else registry.resolve(judge, "classifier", dataset, device=device)
        generator_check = check_generator(resolved, loaded, data, judge=judging)
        report["generator"] = generator_check.to_dict()
        report["generator_warning"] = generator_check.warning
    return report
