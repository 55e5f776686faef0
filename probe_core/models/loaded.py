"""A model ready to use (:class:`LoadedModel`), an in-memory classifier, and a classifier's outputs matched to a
data set's classes (:func:`align_classifier`)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from torch import nn

from probe_core.data import ImageDataset
from probe_core.data.classes import ClassMatch, match_classes
from probe_core.errors import ProbeError
from probe_core.models.aligned import AlignedClassifier
from probe_core.models.architectures import ProbabilityModel
from probe_core.models.plugins import validate_classifier
from probe_core.models.spec import GENERATOR_KINDS
from probe_core.sampling.protocols import GeneratorCapabilities, generator_capabilities


@dataclass
class LoadedModel:
    """A model ready to use.

    ``module`` is a :class:`ProbabilityModel` (probabilities out) for classifiers
    and the generator (``latent_dim``, ``decode``) for VAEs and GANs.
    """

    id: str
    kind: str
    module: nn.Module
    class_names: tuple[str, ...]
    record: dict = field(default_factory=dict)
    capabilities: GeneratorCapabilities | None = None  # generators only, checked when loaded
    class_match: ClassMatch | None = None  # classifiers resolved for a data set: how outputs meet its classes

    def __post_init__(self) -> None:
        if self.is_generator and self.capabilities is None:
            self.capabilities = generator_capabilities(self.module, source=self.id)

    @property
    def metrics(self) -> dict:
        return self.record.get("metrics", {})

    @property
    def feature_network(self) -> str | None:
        """The id of the classifier this generator's perceptual term was trained with, where it stored one
        (:meth:`ModelSpec.feature_network_spec`); None otherwise."""
        return (self.record.get("spec") or {}).get("feature_network")

    @property
    def is_generator(self) -> bool:
        return self.kind in GENERATOR_KINDS or self.kind in ("plugin-generator", "file-generator", "built-generator")

    @property
    def native_class_names(self) -> tuple[str, ...]:
        """The classifier's own class names in its own output order (before matching to a data set)."""
        return self.class_match.model_names if self.class_match is not None else self.class_names


def in_memory_classifier(module: nn.Module, class_names, input_shape: tuple[int, int, int],
                         outputs: str = "logits", name: str = "in-memory") -> LoadedModel:
    """An in-memory ``torch.nn.Module`` as a classifier, checked like a plugin's (API use).

    Parameters
    ----------
    module : nn.Module
        Images (B, C, H, W) in [0, 1] to (B, K) logits or probabilities.
    class_names : sequence of str
        K names in output order; matched to a data set's by name (:func:`align_classifier`).
    input_shape : tuple of int
        (C, H, W) to check it with.
    outputs : {"logits", "probabilities"}
    name : str
        Shown in messages; the model is ``memory:NAME`` (it is not stored, so no run can refer to it later).
    """
    names = tuple(str(n) for n in class_names)
    wrapped = validate_classifier(module.eval(), outputs, tuple(input_shape), len(names), source=f"classifier {name}")
    return LoadedModel(f"memory:{name}", "memory-classifier", wrapped, names, {"metrics": {}})


def align_classifier(loaded: LoadedModel, dataset: ImageDataset, class_map: dict | None = None) -> LoadedModel:
    """The classifier with its outputs matched to the data set's classes by name (:func:`match_classes`).

    Outputs are reordered to follow the data set's label order, so output i means the data set's
    (i-th covered) class everywhere downstream: targets, Defuse, suites, reports.

    Raises
    ------
    ClassMismatchError
        If the names do not match (the message lists both sides and how to map them).
    """
    given = class_map or loaded.record.get("class_map") or (loaded.record.get("spec") or {}).get("class_map")
    match = match_classes(loaded.class_names, dataset.class_names, given,
                          model=f"classifier {loaded.id.split('#')[0]}", data=f"data set {dataset.name}")
    module = loaded.module
    if not match.is_identity:
        if not isinstance(module, ProbabilityModel):
            raise ProbeError(f"classifier {loaded.id}: its outputs cannot be reordered to the data set's classes")
        module = AlignedClassifier(module.net, module.output_kind, match.output_order).eval()
    return replace(loaded, module=module, class_names=match.aligned_names, class_match=match)
