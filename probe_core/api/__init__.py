"""The Python API: what the CLI and the dashboard do, as functions that return result objects.

``import probe_core as mp`` and then ``mp.sample("ambiguous:4,9")``. Runs are stored in the workspace
(``$PROBE_WORKSPACE`` or ``./workspace`` unless ``workspace=`` is given), so the dashboard shows them.
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from probe_core import suites
from probe_core.bayestrex import best_hit_per_target, table2
from probe_core.bayestrex.recipes import prepare_sample
from probe_core.bayestrex.request import SAMPLE_SETTINGS, SampleRequest
from probe_core.catalog import load_dataset
from probe_core.data import DEFAULT_DATASET
from probe_core.data.classes import parse_class_map, with_class_map
from probe_core.data.provenance import ProvenanceMeter, training_index
from probe_core.defuse.labels import HUMAN
from probe_core.errors import ProbeError
from probe_core.models import ModelSpec
from probe_core.models.checks import check_classifier, check_generator
from probe_core.models.devices import resolve_device
from probe_core.models.kept import dataset_reference, model_reference, references
from probe_core.models.loaded import align_classifier, in_memory_classifier
from probe_core.reporting.export import sample_arrays
from probe_core.reporting.figures import accuracy_bars, achieved_violin, matrix_figure
from probe_core.runs.lifecycle import run_now
from probe_core.runs.progress import progress_bar
from probe_core.runs.runconfig import config_of, result_of
from probe_core.runs.workspace import Workspace, open_workspace
from probe_core.sampling.targets import MATRIX_SPEC, TargetSpec, report_classes


@dataclass
class SampleResult:
    """A finished (or stopped) Bayes-TrEx run: its request, its per-target summaries and its stored samples.

    Attributes
    ----------
    run_id : int
        The run in the workspace (``probe runs show RUN``, the Probe page).
    request : SampleRequest
        What was run, as stored.
    status : str
        ``done``, ``cancelled`` or ``failed``.
    targets : list of dict
        Per target, in request order: ``spec``, ``description``, ``hit_rate``, ``failed`` and ``summary``
        (achieved confidences, ESS, R-hat, acceptance; see :func:`~probe_core.bayestrex.summary.summarise_target`).
    z : ndarray, shape (N, D)
        The stored latents (every ``keep_every``-th sample of every chain).
    images : ndarray, shape (N, C, H, W)
        Their decoded images, in [0, 1].
    confidences : ndarray, shape (N, K)
        The classifier's probabilities, in the data set's class order.
    target_index : ndarray of int, shape (N,)
        Which target each sample belongs to.
    chain : ndarray of int, shape (N,)
    hit : ndarray of bool, shape (N,)
        Whether the sample meets its target.
    generator_weak : bool
        The generator failed its check on the data: results about its samples are not to be trusted.
    judge_warnings : list of str
        With a judge: the targets whose hits it mostly puts outside their classes, and a judge trained on the
        probed classifier's data (each target's ``judge_agreement`` holds the counts).
    provenance_warnings : list of str
        The targets whose hits look copied from the training set (each target's ``provenance`` holds the figures).
    dataset : ImageDataset or None
        The data set sampled for, where it was loaded: :meth:`to_pandas` then places every sample against its
        training images and :meth:`nearest_training_images` shows them.
    """

    run_id: int
    request: SampleRequest
    status: str
    targets: list = field(default_factory=list)
    z: np.ndarray | None = None
    images: np.ndarray | None = None
    confidences: np.ndarray | None = None
    target_index: np.ndarray | None = None
    chain: np.ndarray | None = None
    hit: np.ndarray | None = None
    generator_weak: bool = False
    wall_seconds: float = 0.0
    judge_warnings: list = field(default_factory=list)
    provenance_warnings: list = field(default_factory=list)
    dataset: object = field(default=None, repr=False)

    @classmethod
    def from_run(cls, store, run_id: int, dataset=None) -> "SampleResult":
        """Read a stored sampling run back (in any process, on any day); ``dataset``: its data set, loaded
        (``registry.dataset(request.dataset)``), for the samples' provenance."""
        run = store.get_run(run_id)
        request = None if run is None else config_of(run)
        if not isinstance(request, SampleRequest):
            raise ProbeError(f"run {run_id} is not a sampling run of this version")
        stored = store.get_samples(run_id)
        arrays = sample_arrays(stored) if stored else {}
        outcome = result_of(run)  # None when the run ended without a result (failed)
        if outcome is None:
            return cls(run_id, request, run.status, [], **arrays, dataset=dataset)
        return cls(run_id, request, run.status, outcome.targets, **arrays, generator_weak=outcome.generator_weak,
                   wall_seconds=outcome.wall_seconds, judge_warnings=outcome.judge_warnings,
                   provenance_warnings=outcome.provenance_warnings, dataset=dataset)

    def summary(self) -> str:
        """The per-target table (paper Table 2 plus diagnostics, with the share of hits that are near copies of a
        training image), as the CLI prints it, and a line per target whose hits look copied."""
        return "\n".join([table2(self.targets), *(f"warning: {line}" for line in self.provenance_warnings)])

    def provenance(self):
        """Every stored sample placed against the data set's training images
        (:class:`~probe_core.data.provenance.Provenance`: nearest training image, distance, percentile among the
        test images', near copy), each compared as the class the classifier gives it; None without samples or
        without the data set."""
        if self.images is None or self.dataset is None:
            return None
        meter = ProvenanceMeter.for_classes(training_index(self.dataset), self.request.class_names)
        return meter.place(self.images, self.confidences)

    def nearest_training_images(self) -> np.ndarray | None:
        """Shape (N, C, H, W): each stored sample's nearest training image, to show beside it."""
        placed = self.provenance()
        return None if placed is None else self.dataset.train_images[placed.nearest].numpy()

    def to_pandas(self):
        """One row per stored sample: ``target``, ``chain``, ``hit``, one confidence column per class and, where
        the data set is loaded, ``nearest_train`` (its nearest training image's index), ``train_distance``,
        ``train_percentile`` (among the test images' nearest-training distances) and ``near_copy``."""
        import pandas as pd

        if self.confidences is None:
            return pd.DataFrame(columns=["target", "chain", "hit", *self.request.class_names])
        frame = pd.DataFrame(self.confidences, columns=list(self.request.class_names))
        descriptions = [t["description"] for t in self.targets]
        frame.insert(0, "target", [descriptions[i] if i < len(descriptions) else str(i) for i in self.target_index])
        frame.insert(1, "chain", self.chain)
        frame.insert(2, "hit", self.hit)
        placed = self.provenance()
        if placed is not None:
            frame["nearest_train"], frame["train_distance"] = placed.nearest, placed.distance
            frame["train_percentile"], frame["near_copy"] = placed.percentile, placed.near_copy
        return frame

    def plot(self, target: int = 0):
        """The Probe page's violin of achieved confidences for one target (``go.Figure``)."""
        if self.confidences is None or not self.targets:
            raise ProbeError(f"run {self.run_id} stored no samples to plot")
        if not 0 <= target < len(self.targets):
            raise ProbeError(f"target must be 0 to {len(self.targets) - 1}, got {target}")
        chosen = self.confidences[self.target_index == self.targets[target].get("target_index", target)]
        return achieved_violin(chosen, list(self.request.class_names), list(self.targets[target]["summary"]["achieved"]),
                               title=self.targets[target]["description"])

    def __repr__(self) -> str:
        reached = sum(not t.get("failed", True) for t in self.targets)
        weak = ", generator weak" if self.generator_weak else ""
        return (f"SampleResult(run {self.run_id}, {self.status}, {reached}/{len(self.targets)} targets reached, "
                f"{0 if self.z is None else len(self.z)} samples{weak})")


def sample(target, classifier="default", generator="default", *, dataset=DEFAULT_DATASET,
           class_names=None, input_shape=None, class_map: str | None = None, workspace=None, device: str = "auto",
           progress: bool = True, **settings) -> SampleResult:
    """Bayes-TrEx: sample in-distribution images at a target confidence; the run is stored in the workspace.

    Parameters
    ----------
    target : str or TargetSpec
        ``high:3``, ``ambiguous:4,9``, ``uniform``, ``probs:8=0.7,9=0.3``, ``path:8->9:11`` or
        ``ambiguous-matrix``, in the classifier's class names (or indices); or a
        :class:`~probe_core.sampling.targets.TargetSpec` made with its constructors (``TargetSpec.high(names, 7)``).
    classifier, generator : str or torch.nn.Module
        ``default`` (the data set's; trained first if missing, with a progress bar), a model id, a plugin
        ``.py`` or a model file (``.pt``/``.pt2`` with its ``.json`` sidecar); or an in-memory module (a
        classifier maps images (B, C, H, W) to logits (B, K); a generator has ``latent_dim`` and
        ``decode``), kept in the workspace as a model file (:mod:`probe_core.models.kept`).
    dataset : str or (x, y)
        ``digits``, ``mnist``, ``folder:PATH``, ``arrays:PATH.npz`` ..., or arrays: images x (N, C, H, W)
        and labels y (N,), kept as an ``.npz``.
    class_names : sequence of str, optional
        An in-memory classifier's K class names in output order; also the names of the labels of ``(x, y)``.
    input_shape : tuple of int, optional
        An in-memory classifier's (C, H, W) (default: the data set's image shape).
    class_map : str, optional
        ``MODEL=DATA,...`` where the classifier's class names differ from the data set's.
    workspace : str, Path or Workspace, optional
    judge : str, optional (in ``settings``)
        A trained classifier other than the probed one, on its classes: each high or ambiguous target's hits
        are judged (``targets[i]["judge_agreement"]``), and a target whose hits it mostly puts elsewhere is
        flagged (``judge_warnings``, also warned).
    **settings
        The request's settings, with these defaults (:class:`~probe_core.bayestrex.request.SampleRequest`; the
        ambiguity matrix has its own): {settings}.

    Returns
    -------
    SampleResult

    Raises
    ------
    ProbeError
        For any setting, model or target the run cannot use, before anything is trained or stored.
    """
    space = open_workspace(workspace)

    device = str(resolve_device(device))  # "auto": CUDA when present
    dataset, classifier, generator = references(space, dataset, classifier, generator, class_names, input_shape)
    registry = space.registry.remembering()  # validation, preparation and the run load each model once
    request = SampleRequest.build(registry, dataset=dataset, target=target, classifier=classifier, generator=generator,
                                  class_map=class_map, **settings)
    prepared = prepare_sample(registry, request, device)
    if prepared.warning:
        warnings.warn(prepared.warning, stacklevel=2)
    run_id, _ = run_now(registry, prepared.request, device=device, progress_bar="sampling" if progress else None)
    result = SampleResult.from_run(space.store, run_id, registry.dataset(request.dataset))
    for line in result.judge_warnings + result.provenance_warnings:
        warnings.warn(line, stacklevel=2)
    return result


@dataclass
class MatrixResult:
    """An ambiguity matrix (Bayes-TrEx Fig. 5): a sampling run with one ``ambiguous:i,j`` target per class pair.

    Attributes
    ----------
    sampled : SampleResult
        The run, its per-pair targets and its stored samples.
    reached : ndarray of bool, shape (K, K)
        Symmetric: whether a chain reached the pair's target (the diagonal is False).
    hit_rate : ndarray of float, shape (K, K)
        Symmetric: the share of the pair's stored samples that are hits.
    images : ndarray, shape (K, K, C, H, W)
        Each pair's closest hit, zeros where none was found.
    class_names : list of str
    """

    sampled: SampleResult
    reached: np.ndarray
    hit_rate: np.ndarray
    images: np.ndarray
    class_names: list

    @classmethod
    def from_sample(cls, sampled: SampleResult) -> "MatrixResult":
        names = list(sampled.request.class_names)
        count = len(names)
        shape = sampled.images.shape[1:] if sampled.images is not None else (1, 1, 1)
        reached, rates = np.zeros((count, count), bool), np.zeros((count, count))
        images = np.zeros((count, count, *shape), np.float32)
        samples = [] if sampled.images is None else [
            {"target_index": int(t), "hit": bool(h), "target_distance": float(d), "image": image}
            for t, h, d, image in zip(sampled.target_index, sampled.hit, _target_distances(sampled), sampled.images)]
        best = best_hit_per_target(samples)
        for index, entry in enumerate(sampled.targets):
            first, second = report_classes(entry, names)
            stored = entry.get("target_index", index)
            for row, column in ((first, second), (second, first)):
                reached[row, column] = not entry["failed"]
                rates[row, column] = entry["hit_rate"]
                if stored in best:
                    images[row, column] = best[stored]["image"]
        return cls(sampled, reached, rates, images, names)

    def summary(self) -> str:
        count = len(self.class_names)
        pairs = count * (count - 1) // 2
        return f"ambiguity matrix of run {self.sampled.run_id}: {int(self.reached.sum()) // 2} of {pairs} pairs reached"

    def to_pandas(self):
        """One row per class pair: ``first``, ``second``, ``reached``, ``hit_rate``."""
        import pandas as pd

        rows = [{"first": self.class_names[i], "second": self.class_names[j], "reached": bool(self.reached[i, j]),
                 "hit_rate": float(self.hit_rate[i, j])}
                for i in range(len(self.class_names)) for j in range(i + 1, len(self.class_names))]
        return pd.DataFrame(rows)

    def plot(self):
        """The Ambiguity matrix page's picture (``go.Figure``); the edges show each pair's own classes' hits."""
        count = len(self.class_names)
        cells = [(i, j, self.images[i, j] if self.reached[i, j] else None,
                  f"{self.class_names[i]} vs {self.class_names[j]}: hit rate {self.hit_rate[i, j]:.0%}"
                  if self.reached[i, j] else f"{self.class_names[i]} vs {self.class_names[j]}: not reached")
                 for i in range(count) for j in range(i + 1, count)]
        return matrix_figure([None] * count, cells, tuple(self.images.shape[2:]))

    def __repr__(self) -> str:
        return f"MatrixResult({self.summary()!r})"


def _target_distances(sampled: SampleResult) -> np.ndarray:
    """Each stored sample's distance to an equal split of its pair (the matrix's targets are ambiguous:i,j)."""
    distances = np.zeros(len(sampled.target_index))
    for index, entry in enumerate(sampled.targets):
        first, second = report_classes(entry, sampled.request.class_names)
        mine = sampled.target_index == entry.get("target_index", index)
        pair = sampled.confidences[mine][:, [first, second]]
        distances[mine] = np.abs(pair - 0.5).sum(axis=1)
    return distances


def matrix(classifier="default", generator="default", *, dataset=DEFAULT_DATASET, class_names=None,
           input_shape=None, class_map: str | None = None, workspace=None, device: str = "auto",
           progress: bool = True, **settings) -> MatrixResult:
    """The ambiguity matrix: ``ambiguous:i,j`` for every class pair in one batched run (as the Ambiguity page).

    Takes :func:`sample`'s arguments without the target; the settings default to the matrix's own, which
    depend on the image size (:func:`~probe_core.bayestrex.request.matrix_sampler_defaults`).

    Returns
    -------
    MatrixResult
    """
    return MatrixResult.from_sample(sample(MATRIX_SPEC, classifier, generator, dataset=dataset,
                                           class_names=class_names, input_shape=input_shape, class_map=class_map,
                                           workspace=workspace, device=device, progress=progress, **settings))


@dataclass
class ModelCheck:
    """Whether a classifier (and a generator) can be trusted on a data set; see :mod:`probe_core.models.checks`.

    Attributes
    ----------
    classifier : ClassifierCheck
        Accuracy, per-class accuracy and the class map used, on up to 2,000 labelled test images;
        ``usable`` is False when the classes look matched wrongly (``message`` says why).
    generator : GeneratorCheck or None
        FD-clf, confidence and reconstruction ratios against real images; ``weak`` flags a generator whose
        samples are not to be trusted. ``grid`` holds 16 of its samples, shape (16, C, H, W).
    """

    classifier: object
    generator: object = None

    @property
    def usable(self) -> bool:
        """The classifier's classes match the data's and the generator (if any) is not weak."""
        return self.classifier.usable and (self.generator is None or not self.generator.weak)

    def plot(self):
        """Per-class accuracy on the test images (``go.Figure``)."""
        per_class = self.classifier.per_class
        return accuracy_bars(list(per_class), list(per_class.values()),
                             f"{self.classifier.classifier}: accuracy per class")

    def summary(self) -> str:
        clf = self.classifier
        lines = [f"classifier {clf.classifier} on {clf.dataset}: accuracy {clf.accuracy:.1%} on {clf.images} "
                 f"test images (chance {clf.chance:.0%})" + ("" if clf.usable else f"; REFUSED: {clf.message}")]
        if self.generator is not None:
            figures = ", ".join(f"{k} {v}" for k, v in self.generator.figures.items())
            lines.append(f"generator {self.generator.generator}: {self.generator.verdict} ({figures})")
        return "\n".join(lines)

    def to_pandas(self):
        """Per-class accuracy: one row per data set class the classifier knows."""
        import pandas as pd

        return pd.DataFrame({"class": list(self.classifier.per_class),
                             "accuracy": list(self.classifier.per_class.values())})

    def __repr__(self) -> str:
        return f"ModelCheck({self.summary()!r})"


def check(classifier="default", dataset=DEFAULT_DATASET, generator=None, *, class_names=None,
          input_shape=None, class_map: str | None = None, judge: str | None = None, workspace=None,
          device: str = "auto") -> ModelCheck:
    """Check a classifier (and a generator) on a data set; trains nothing (as ``probe models check``).

    Parameters
    ----------
    classifier : str or torch.nn.Module
        A reference (model id, ``default``, plugin, model file), or an in-memory module mapping images
        (B, C, H, W) in [0, 1] to logits (B, K), with ``class_names`` (K names, matched to the data set's
        by name) and ``input_shape`` (C, H, W).
    dataset : str or (x, y)
        A data set name, or images x (N, C, H, W) and labels y (N,) named by ``class_names``.
    generator : str or torch.nn.Module, optional
        A generator to check too (a module is kept in the workspace as a model file).
    class_map : str, optional
        ``MODEL=DATA,...`` where a reference's class names differ from the data set's.
    judge : str, optional
        With ``generator``: a classifier reference other than ``classifier`` that judges a short ``high:C`` probe's
        hits (as ``probe models check --judge``); the generator is 'ok' only if it agrees with half of them.

    Returns
    -------
    ModelCheck

    Raises
    ------
    ClassMismatchError
        When the classifier's class names do not match the data set's (with how to map them).
    """
    import torch

    space = open_workspace(workspace)

    device = str(resolve_device(device))  # "auto": CUDA when present
    dataset = dataset_reference(space.root, dataset, class_names)
    data = load_dataset(dataset, space.registry.data_dir)
    if isinstance(classifier, torch.nn.Module):
        if class_names is None:
            raise ProbeError("an in-memory classifier needs its class_names (in output order)")
        memory = in_memory_classifier(classifier, class_names, tuple(input_shape or data.image_shape))
        loaded = align_classifier(memory, data, parse_class_map(class_map))
    else:
        reference = with_class_map(classifier, class_map) if class_map else classifier
        loaded = space.registry.resolve(reference, "classifier", dataset, device=device)
    result = ModelCheck(check_classifier(loaded, data))
    if generator is not None:
        generator = model_reference(space.root, generator, "generator")
        resolved = space.registry.resolve(generator, "generator", dataset, device=device)
        judging = None if judge is None else space.registry.resolve(judge, "classifier", dataset, device=device)
        result.generator = check_generator(resolved, loaded, data, judge=judging)
    elif judge is not None:
        raise ProbeError("a judge judges a generator's hits: give a generator too")
    return result


def train(kind: str, dataset: str = DEFAULT_DATASET, *, workspace=None, device: str = "auto", **spec) -> str:
    """Train a zoo model (or find it trained) with a progress bar; returns its model id.

    Parameters
    ----------
    kind : {"classifier", "vae", "gan"}
    dataset : str
        Any data set or view, e.g. ``digits[drop=5]`` or ``digits[mislabel=9->8:0.4]`` (a planted flaw).
    **spec
        :class:`~probe_core.models.ModelSpec` fields: ``classes``, ``ambiguous``, ``epochs``, ``seed``, ``beta``...
    """
    space = open_workspace(workspace)

    device = str(resolve_device(device))  # "auto": CUDA when present
    model_spec = ModelSpec(dataset=dataset, kind=kind, **spec)
    return space.registry.get_or_train(model_spec, progress_bar(f"{kind} on {dataset}"), device=device).id


@dataclass
class SuiteScore:
    """A classifier scored on a regression suite.

    Attributes
    ----------
    score : ScoreResult
        :func:`probe_core.suites.score_suite`: per check ``id``, ``name``, ``count``, ``accuracy``,
        ``found_on_accuracy`` (the classifier it was found on), and the checks ``skipped``.
    regressions : list of dict
        The checks below ``min_accuracy`` (empty: the suite holds).
    """

    score: object
    regressions: list

    def to_pandas(self):
        import pandas as pd

        return pd.DataFrame(self.score.checks)

    def plot(self):
        """Accuracy per check, beside the accuracy of the classifier it was found on (``go.Figure``)."""
        checks = self.score.checks
        return accuracy_bars([check["name"] for check in checks], [check["accuracy"] for check in checks],
                             f"suite {self.score.suite} on {self.score.classifier}",
                             [check["found_on_accuracy"] for check in checks], "found on")

    def summary(self) -> str:
        verdict = "holds" if not self.regressions else f"{len(self.regressions)} check(s) regress"
        return f"suite {self.score.suite} on {self.score.classifier}: {len(self.score.checks)} checks, {verdict}"

    def __repr__(self) -> str:
        return f"SuiteScore({self.summary()!r})"


def suite(name: str, classifier, *, regions_of=None, source: str | None = None, min_accuracy: float = 0.8,
          class_names=None, input_shape=None, workspace=None, device: str = "auto") -> SuiteScore:
    """Keep failures as a regression suite and score a classifier on it (``probe suite add`` then ``score``).

    Parameters
    ----------
    name : str
        The suite (created on first use, for the data set of the regions added).
    classifier : str or torch.nn.Module
        The classifier to score, e.g. a Defuse report's ``corrected_model``; or an in-memory module with its
        ``class_names`` (and ``input_shape``, default the suite's data set's), kept as a model file.
    regions_of : DefuseReport or int, optional
        A distillation whose labelled failure regions are added as checks (each once).
    source : str, optional
        Whose labels define those regions (default: the report's, else ``human``).
    """
    space = open_workspace(workspace)

    device = str(resolve_device(device))  # "auto": CUDA when present
    if regions_of is not None:
        distill_run = int(getattr(regions_of, "run_id", regions_of))
        source = source or getattr(regions_of, "source", HUMAN)
        known = {(check["evidence"].get("distill_run"), check["evidence"].get("cluster_id"))
                 for check in (space.store.get_suite_checks(name) if space.store.get_suite(name) else [])}
        regions = [cluster_id for cluster_id in suites.labelled_region_ids(space.registry, space.store, distill_run,
                                                                           source, device=device)
                   if (distill_run, cluster_id) not in known]
        if regions:
            suites.add_region_checks(space.registry, space.store, name, distill_run, regions, source=source,
                                     device=device)
    if not isinstance(classifier, str):
        stored = suites.require_suite(space.store, name)
        shape = input_shape or load_dataset(stored["dataset"], space.registry.data_dir).image_shape
        classifier = model_reference(space.root, classifier, "classifier", class_names, shape)
    score = suites.score_now(space.registry, name, classifier, device)
    return SuiteScore(score, suites.regressions(score, min_accuracy))


def _defaults_of(request_type, names) -> str:
    """``name=default, ...`` of a request type's fields, read from the type (never written twice)."""
    defaults = {f.name: f.default for f in dataclasses.fields(request_type)}
    return ", ".join(f"{name}={defaults[name]!r}" for name in names)


sample.__doc__ = sample.__doc__.replace("{settings}", _defaults_of(SampleRequest, SAMPLE_SETTINGS))
