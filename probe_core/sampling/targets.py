"""Bayes-TrEx targets: a typed target spec, parsed once, and the relaxed likelihood, written once as a Pyro model.

Spec language (several specs may be joined with ``;``); each kind is one :class:`SpecKind` class in
:data:`SPEC_KINDS`, which also writes the CLI's and the dashboard's help:

``high:C``                     high confidence in class C: u = p_C, observed 1
``ambiguous:A,B``              u1 = |p_A - p_B| observed 0, u2 = min(p_A, p_B) - max_{k != A,B} p_k observed 0.5
``uniform``                    u = max(p) - min(p), observed 0
``probs:8=0.7,9=0.3``          one site per class, u_k = p_k observed p*_k (unnamed classes 0; must sum to 1)
``path:A->B:N``                N vector targets from p_A = 1 to p_B = 1 (p_A = 1 - t, p_B = t)
``ambiguous-matrix``           ``ambiguous:A,B`` for every class pair

Classes may be given by index or by name (``high:Bag``); a name wins over an index, so
for a classifier whose classes are named ``0, 1, 3, 6, 9``, ``high:3`` means the class named
"3". A :class:`TargetSpec` is made once where a request is made (:meth:`TargetSpec.parse` for typed
text, the constructors for the pages); its canonical text (:attr:`TargetSpec.text`) is written in the
classifier's class names (``high:seven``). Each observation site is Normal(u, sigma) observed at u*
(sigma = 0.05 by default), as in the paper.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Callable, ClassVar, Sequence

import torch

from probe_core.data.classes import class_index
from probe_core.errors import ProbeError, check_number_ranges, excerpt

DEFAULT_SIGMA = 0.05
HIGH_HIT = 0.9
AMBIGUOUS_HIT = (0.4, 0.6)
VECTOR_HIT_TOLERANCE = 0.1


@dataclass(frozen=True)
class Target:
    """One target confidence condition over K classes; one subclass per statistic (high, ambiguous, uniform,
    vector).

    Attributes
    ----------
    classes : tuple of int
        high: (c,); ambiguous: (a, b); vector: classes with p*_k > 0; uniform: ().
    num_classes : int
    target_probs : tuple of float
        vector and uniform: the full p* (K,); otherwise empty.
    spec : str
        Canonical spec text (``ambiguous:4,9``), in the class names.
    """

    kind: ClassVar[str] = ""

    classes: tuple[int, ...]
    num_classes: int
    target_probs: tuple[float, ...] = ()
    spec: str = ""

    @property
    def num_sites(self) -> int:
        return len(self.observed())

    @property
    def reported_classes(self) -> tuple[int, ...]:
        """Classes whose achieved confidence the summary reports (the paper's Table 2)."""
        return self.classes if self.classes else tuple(range(self.num_classes))

    @property
    def needs_tempered_start(self) -> bool:
        """Whether chains should start from tempered SMC (and not anneal σ): every kind but high confidence."""
        return True

    @property
    def judged_classes(self) -> tuple[int, ...]:
        """The classes a hit should look like to a classifier that was not probed (a judge's top class among
        them counts as agreement); () where a top class cannot say whether a hit is sound (confidence vectors,
        uniform)."""
        return ()

    def observed(self) -> torch.Tensor:
        """u*, shape (S,)."""
        raise NotImplementedError

    def statistics(self, probs: torch.Tensor) -> torch.Tensor:
        """u(f(g(z))) for probabilities of shape (B, K); returns (B, S)."""
        raise NotImplementedError

    def is_hit(self, probs: torch.Tensor) -> torch.Tensor:
        """Whether each (B, K) confidence vector meets the target, shape (B,) bool."""
        raise NotImplementedError

    def soft_label(self) -> torch.Tensor:
        """A class distribution that meets the target, shape (K,); used to optimise starting points."""
        return torch.tensor(self.target_probs, dtype=torch.float32)

    def describe(self, class_names: Sequence[str] | None = None) -> str:
        """Human-readable form, with class names when given."""
        raise NotImplementedError

    @classmethod
    def batched_statistics(cls, targets: Sequence["Target"],
                           target_index: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor] | None:
        """Statistics of a batch whose targets are all of this class, in one tensor operation: a function of
        the per-chain probabilities (num_chains, K) -> (num_chains, S); None where there is no such fast path."""
        return None

    def log_likelihood(self, probs: torch.Tensor, sigma: float = DEFAULT_SIGMA) -> torch.Tensor:
        """Sum over sites of log N(u*; u, sigma^2), shape (B,)."""
        u = self.statistics(probs)
        observed = self.observed().to(probs)
        return torch.distributions.Normal(u, sigma).log_prob(observed.expand_as(u)).sum(1)

    def distance(self, probs: torch.Tensor) -> torch.Tensor:
        """Largest gap between the achieved statistics and u*, shape (B,)."""
        return (self.statistics(probs) - self.observed().to(probs)).abs().max(1).values


def _name(class_names: Sequence[str] | None) -> Callable[[int], str]:
    return (lambda c: str(class_names[c])) if class_names else str


@dataclass(frozen=True)
class HighTarget(Target):
    """High confidence in ``classes[0]``: u = p_c observed 1; a hit is p_c >= 0.9."""

    kind: ClassVar[str] = "high"

    @property
    def needs_tempered_start(self) -> bool:
        return False

    @property
    def judged_classes(self) -> tuple[int, ...]:
        return self.classes

    def observed(self) -> torch.Tensor:
        return torch.tensor([1.0])

    def statistics(self, probs: torch.Tensor) -> torch.Tensor:
        return probs[:, self.classes[0]:self.classes[0] + 1]

    def is_hit(self, probs: torch.Tensor) -> torch.Tensor:
        return probs[:, self.classes[0]] >= HIGH_HIT

    def soft_label(self) -> torch.Tensor:
        return torch.nn.functional.one_hot(torch.tensor(self.classes[0]), self.num_classes).float()

    def describe(self, class_names: Sequence[str] | None = None) -> str:
        return f"high confidence in {_name(class_names)(self.classes[0])}"

    @classmethod
    def batched_statistics(cls, targets, target_index):
        classes = torch.tensor([t.classes[0] for t in targets])[target_index].unsqueeze(1)
        return lambda probs: probs.gather(1, classes.to(probs.device))


@dataclass(frozen=True)
class AmbiguousTarget(Target):
    """Ambiguous between ``classes`` (a, b): u1 = |p_a - p_b| observed 0, u2 = min(p_a, p_b) - max of the others
    observed 0.5; a hit has both in [0.4, 0.6] and no other class above them."""

    kind: ClassVar[str] = "ambiguous"

    @property
    def judged_classes(self) -> tuple[int, ...]:
        return self.classes  # an ambiguous hit should look like one of the pair

    def observed(self) -> torch.Tensor:
        return torch.tensor([0.0, 0.5])

    def statistics(self, probs: torch.Tensor) -> torch.Tensor:
        a, b = self.classes
        pa, pb = probs[:, a], probs[:, b]
        others = probs.index_fill(1, torch.tensor([a, b], device=probs.device), -1.0).max(1).values
        return torch.stack([(pa - pb).abs(), torch.minimum(pa, pb) - others], 1)

    def is_hit(self, probs: torch.Tensor) -> torch.Tensor:
        a, b = self.classes
        low, high = AMBIGUOUS_HIT
        pair = probs[:, [a, b]]
        others = probs.index_fill(1, torch.tensor([a, b], device=probs.device), -1.0).max(1).values
        return ((pair >= low) & (pair <= high)).all(1) & (others < pair.min(1).values)

    def soft_label(self) -> torch.Tensor:
        label = torch.zeros(self.num_classes)
        label[list(self.classes)] = 0.5
        return label

    def describe(self, class_names: Sequence[str] | None = None) -> str:
        name = _name(class_names)
        return f"ambiguous between {name(self.classes[0])} and {name(self.classes[1])}"

    @classmethod
    def batched_statistics(cls, targets, target_index):
        pairs = torch.tensor([t.classes for t in targets])[target_index]

        def ambiguous(probs: torch.Tensor) -> torch.Tensor:
            pa = probs.gather(1, pairs[:, :1].to(probs.device)).squeeze(1)
            pb = probs.gather(1, pairs[:, 1:].to(probs.device)).squeeze(1)
            others = probs.scatter(1, pairs.to(probs.device), -1.0).max(1).values
            return torch.stack([(pa - pb).abs(), torch.minimum(pa, pb) - others], 1)

        return ambiguous


@dataclass(frozen=True)
class VectorTarget(Target):
    """Every class's confidence at ``target_probs``: one site per class; a hit is every class within 0.1."""

    kind: ClassVar[str] = "vector"

    def observed(self) -> torch.Tensor:
        return torch.tensor(self.target_probs, dtype=torch.float32)

    def statistics(self, probs: torch.Tensor) -> torch.Tensor:
        return probs

    def is_hit(self, probs: torch.Tensor) -> torch.Tensor:
        target = torch.tensor(self.target_probs, dtype=probs.dtype, device=probs.device)
        return ((probs - target).abs() <= VECTOR_HIT_TOLERANCE).all(1)

    def describe(self, class_names: Sequence[str] | None = None) -> str:
        name = _name(class_names)
        return "confidences " + ", ".join(f"{name(c)}={self.target_probs[c]:.2g}" for c in self.classes)

    @classmethod
    def batched_statistics(cls, targets, target_index):
        return lambda probs: probs


@dataclass(frozen=True)
class UniformTarget(VectorTarget):
    """Uniform over all classes: u = max(p) - min(p) observed 0; a hit is every class within 0.1 of 1/K."""

    kind: ClassVar[str] = "uniform"

    def observed(self) -> torch.Tensor:
        return torch.tensor([0.0])

    def statistics(self, probs: torch.Tensor) -> torch.Tensor:
        return (probs.max(1).values - probs.min(1).values).unsqueeze(1)

    def describe(self, class_names: Sequence[str] | None = None) -> str:
        return "uniform over all classes"

    @classmethod
    def batched_statistics(cls, targets, target_index):
        return None


_SPEC_SYNTAX = (":", ";", ",", "=", "->")


def spec_name(index: int, class_names: Sequence[str] | None) -> str:
    """How a class is written in a spec's canonical text: its name (``high:seven``) where the name reads back
    as this class and holds none of the spec's punctuation, else its index."""
    if not class_names:
        return str(index)
    name = str(class_names[index])
    readable = name and name == name.strip() and not any(mark in name for mark in _SPEC_SYNTAX)
    if readable:
        lowered = [n.lower() for n in class_names]
        if lowered.count(name.lower()) == 1:
            return name
    return str(index)


def _vector_target(probs: Sequence[float], class_names: Sequence[str]) -> VectorTarget:
    classes = tuple(k for k, p in enumerate(probs) if p > 0)
    spec = "probs:" + ",".join(f"{spec_name(k, class_names)}={probs[k]:g}" for k in classes)
    return VectorTarget(classes, len(class_names), tuple(float(p) for p in probs), spec)


def _ambiguous_target(a: int, b: int, class_names: Sequence[str]) -> AmbiguousTarget:
    a, b = sorted((a, b))
    return AmbiguousTarget((a, b), len(class_names), (),
                           f"ambiguous:{spec_name(a, class_names)},{spec_name(b, class_names)}")


@dataclass(frozen=True)
class SpecPart:
    """One ``;``-separated part of a spec, parsed: its kind, canonical text, typed arguments and targets.

    Attributes
    ----------
    kind : str
        The :class:`SpecKind`'s name (``path``).
    text : str
        Canonical text in the class names (``path:eight->nine:11``).
    arguments : tuple
        The kind's typed arguments, class indices for classes (``path``: ``(a, b, steps)``).
    targets : tuple of Target
    """

    kind: str
    text: str
    arguments: tuple
    targets: tuple[Target, ...]


class SpecKind:
    """One kind of target spec: its syntax, help and parser. Subclass it and decorate with :func:`spec_kind` to
    add a kind: the parser, :class:`TargetSpec`, the CLI's help and the Probe page's choices pick it up.

    Class attributes
    ----------------
    name : str
        What the spec starts with (``high``).
    syntax : str
        How it is written (``high:C``), for help texts.
    label : str
        The dashboard's name for it (``High confidence``).
    """

    name: ClassVar[str] = ""
    syntax: ClassVar[str] = ""
    label: ClassVar[str] = ""

    @classmethod
    def parse(cls, argument: str, class_names: Sequence[str]) -> SpecPart:
        """Parse the text after ``NAME:`` into a part; raise :class:`ProbeError` with what is wrong."""
        raise NotImplementedError


SPEC_KINDS: dict[str, type[SpecKind]] = {}


def spec_kind(kind: type[SpecKind]) -> type[SpecKind]:
    """Register a :class:`SpecKind` subclass under its ``name`` (a class decorator)."""
    if not kind.name or kind.name in SPEC_KINDS:
        raise ProbeError(f"a target kind needs a new name, got {kind.name!r}")
    SPEC_KINDS[kind.name] = kind
    return kind


def spec_help(separator: str = " | ") -> str:
    """Every registered kind's syntax, for help texts (``high:C | ambiguous:A,B | ...``)."""
    return separator.join(kind.syntax for kind in SPEC_KINDS.values())


def _no_argument(kind: str, argument: str) -> None:
    if argument:
        raise ProbeError(f"{kind} takes no argument")


@spec_kind
class HighKind(SpecKind):
    name, syntax, label = "high", "high:C", "High confidence"

    @classmethod
    def make(cls, c: int, class_names: Sequence[str]) -> SpecPart:
        target = HighTarget((c,), len(class_names), (), f"high:{spec_name(c, class_names)}")
        return SpecPart(cls.name, target.spec, (c,), (target,))

    @classmethod
    def parse(cls, argument, class_names):
        return cls.make(class_index(argument, class_names), class_names)


@spec_kind
class AmbiguousKind(SpecKind):
    name, syntax, label = "ambiguous", "ambiguous:A,B", "Ambiguous pair"

    @classmethod
    def make(cls, a: int, b: int, class_names: Sequence[str]) -> SpecPart:
        if a == b:
            raise ProbeError("the two classes of an ambiguous target must differ")
        target = _ambiguous_target(a, b, class_names)
        return SpecPart(cls.name, target.spec, target.classes, (target,))

    @classmethod
    def parse(cls, argument, class_names):
        parts = argument.split(",")
        if len(parts) != 2:
            raise ProbeError("write ambiguous:A,B with two classes")
        return cls.make(*(class_index(p, class_names) for p in parts), class_names)


@spec_kind
class UniformKind(SpecKind):
    name, syntax, label = "uniform", "uniform", "Uniform"

    @classmethod
    def make(cls, class_names: Sequence[str]) -> SpecPart:
        count = len(class_names)
        return SpecPart(cls.name, cls.name, (), (UniformTarget((), count, tuple([1.0 / count] * count), cls.name),))

    @classmethod
    def parse(cls, argument, class_names):
        _no_argument(cls.name, argument)
        return cls.make(class_names)


@spec_kind
class ProbsKind(SpecKind):
    name, syntax, label = "probs", "probs:C=P,...", "Target vector"

    @classmethod
    def make(cls, probs: Sequence[float], class_names: Sequence[str]) -> SpecPart:
        probs = [float(p) for p in probs]
        if len(probs) != len(class_names):
            raise ProbeError(f"a target vector needs {len(class_names)} probabilities, got {len(probs)}")
        if not all(math.isfinite(p) and p >= 0 for p in probs):
            raise ProbeError("probabilities must be finite and non-negative")
        if abs(sum(probs) - 1.0) > 1e-6:
            raise ProbeError(f"probabilities must sum to 1, they sum to {sum(probs):.6g}")
        target = _vector_target(probs, class_names)
        return SpecPart(cls.name, target.spec, tuple(probs), (target,))

    @classmethod
    def parse(cls, argument, class_names):
        probs = [0.0] * len(class_names)
        if not argument:
            raise ProbeError("write probs:8=0.7,9=0.3")
        for item in argument.split(","):
            name, eq, value = item.partition("=")
            if not eq:
                raise ProbeError(f"{excerpt(item)} is not CLASS=PROBABILITY")
            try:
                p = float(value)
            except ValueError:
                raise ProbeError(f"{excerpt(value)} is not a number") from None
            if not math.isfinite(p) or p < 0:
                raise ProbeError(f"probabilities must be finite and non-negative, got {excerpt(value)}")
            probs[class_index(name, class_names)] = p
        return cls.make(probs, class_names)


@spec_kind
class PathKind(SpecKind):
    name, syntax, label = "path", "path:A->B:N", "Interpolation path"
    steps_range = (2, 101)  # inclusive; the Interpolation page's widget takes its bounds from here

    @classmethod
    def make(cls, a: int, b: int, steps: int, class_names: Sequence[str]) -> SpecPart:
        if a == b:
            raise ProbeError("a path needs two different classes")
        check_number_ranges({"steps": steps}, {"steps": cls.steps_range}, {"steps": "the number of steps"})
        targets = []
        for i in range(steps):
            t = round(i / (steps - 1), 10)
            probs = [0.0] * len(class_names)
            probs[a], probs[b] = 1.0 - t, t
            targets.append(_vector_target(probs, class_names))
        text = f"path:{spec_name(a, class_names)}->{spec_name(b, class_names)}:{steps}"
        return SpecPart(cls.name, text, (a, b, steps), tuple(targets))

    @classmethod
    def parse(cls, argument, class_names):
        ends, colon, steps_text = argument.rpartition(":")
        source, arrow, destination = ends.partition("->")
        if not (colon and arrow):
            raise ProbeError("write path:A->B:STEPS, e.g. path:8->9:11")
        a, b = class_index(source, class_names), class_index(destination, class_names)
        steps = int(steps_text) if steps_text.strip().isdigit() else steps_text
        return cls.make(a, b, steps, class_names)


@spec_kind
class MatrixKind(SpecKind):
    name, syntax, label = "ambiguous-matrix", "ambiguous-matrix", "Ambiguity matrix"

    @classmethod
    def make(cls, class_names: Sequence[str]) -> SpecPart:
        targets = tuple(_ambiguous_target(a, b, class_names)
                        for a, b in itertools.combinations(range(len(class_names)), 2))
        return SpecPart(cls.name, cls.name, (), targets)

    @classmethod
    def parse(cls, argument, class_names):
        _no_argument(cls.name, argument)
        return cls.make(class_names)


MATRIX_SPEC = MatrixKind.name


@dataclass(frozen=True)
class TargetSpec:
    """A target spec, parsed once: its parts, their targets and its canonical text, for one classifier's classes.

    Make one with :meth:`parse` (typed text) or the constructors (:meth:`high`, :meth:`ambiguous`,
    :meth:`uniform`, :meth:`vector`, :meth:`path_between`, :meth:`matrix`, joined with :meth:`join`); everything below
    the request reads its typed fields.

    Attributes
    ----------
    parts : tuple of SpecPart
    class_names : tuple of str
        The K classes the spec is written in (the classifier's, in the data set's order).
    """

    parts: tuple[SpecPart, ...]
    class_names: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.parts:
            raise ProbeError("no targets given")

    @staticmethod
    def _checked_names(class_names: Sequence[str]) -> tuple[str, ...]:
        names = tuple(str(name) for name in class_names)
        if len(names) < 2:
            raise ProbeError("targets need a classifier with at least 2 classes")
        return names

    @classmethod
    def parse(cls, text: str, class_names: Sequence[str]) -> "TargetSpec":
        """Parse spec text (see the module docstring), classes by index or name.

        Raises
        ------
        ProbeError
            One clear message for malformed specs, unknown classes, negative or non-summing vectors.
        """
        names = cls._checked_names(class_names)
        if not isinstance(text, str):
            raise ProbeError(f"a target spec is text, e.g. high:3 or ambiguous:4,9, not {type(text).__name__}")
        parts = []
        for piece in [p.strip() for p in text.split(";") if p.strip()] or [""]:
            kind_name, _, argument = piece.partition(":")
            kind = SPEC_KINDS.get(kind_name.strip().lower())
            try:
                if kind is None:
                    raise ProbeError(f"unknown target kind {excerpt(kind_name.strip().lower())}; "
                                     f"use one of {spec_help(', ')}")
                parts.append(kind.parse(argument.strip(), names))
            except ProbeError as exc:
                raise ProbeError(f"bad target {excerpt(piece)}: {exc}") from None
        return cls(tuple(parts), names)

    @staticmethod
    def _index(c: int | str, class_names: Sequence[str]) -> int:
        """A class given to a constructor: an int is an index (never read as a name), text a name or an index."""
        if isinstance(c, int) and not isinstance(c, bool):
            if not 0 <= c < len(class_names):
                raise ProbeError(f"class index {c} is out of range for {len(class_names)} classes")
            return c
        return class_index(c, class_names)

    @classmethod
    def _of(cls, kind: type[SpecKind], class_names: Sequence[str], *arguments) -> "TargetSpec":
        names = cls._checked_names(class_names)
        return cls((kind.make(*arguments, names),), names)

    @classmethod
    def high(cls, class_names: Sequence[str], c: int | str) -> "TargetSpec":
        """High confidence in class ``c``: an int is an index, text a name (or an index)."""
        return cls._of(HighKind, class_names, cls._index(c, class_names))

    @classmethod
    def ambiguous(cls, class_names: Sequence[str], a: int | str, b: int | str) -> "TargetSpec":
        """Ambiguous between classes ``a`` and ``b``."""
        return cls._of(AmbiguousKind, class_names, cls._index(a, class_names), cls._index(b, class_names))

    @classmethod
    def uniform(cls, class_names: Sequence[str]) -> "TargetSpec":
        return cls._of(UniformKind, class_names)

    @classmethod
    def vector(cls, class_names: Sequence[str], probs: Sequence[float]) -> "TargetSpec":
        """The confidence vector ``probs`` (K values summing to 1)."""
        return cls._of(ProbsKind, class_names, probs)

    @classmethod
    def path_between(cls, class_names: Sequence[str], a: int | str, b: int | str, steps: int) -> "TargetSpec":
        """``steps`` vector targets from p_a = 1 to p_b = 1."""
        return cls._of(PathKind, class_names, cls._index(a, class_names), cls._index(b, class_names), steps)

    @classmethod
    def matrix(cls, class_names: Sequence[str]) -> "TargetSpec":
        """``ambiguous:A,B`` for every pair of classes."""
        return cls._of(MatrixKind, class_names)

    @classmethod
    def join(cls, specs: Sequence["TargetSpec"]) -> "TargetSpec":
        """Several specs on the same classes as one (``high:0;high:1``)."""
        if not specs:
            raise ProbeError("no targets given")
        names = specs[0].class_names
        if any(spec.class_names != names for spec in specs):
            raise ProbeError("specs joined into one must be written in the same classes")
        return cls(tuple(part for spec in specs for part in spec.parts), names)

    @property
    def text(self) -> str:
        """The canonical text, in the class names (``ambiguous:four,nine;high:seven``)."""
        return ";".join(part.text for part in self.parts)

    def __str__(self) -> str:
        return self.text

    @property
    def targets(self) -> tuple[Target, ...]:
        """Every target, in batch order."""
        return tuple(target for part in self.parts for target in part.targets)

    @property
    def is_matrix(self) -> bool:
        """Whether the spec is the K×K ambiguity matrix."""
        return len(self.parts) == 1 and self.parts[0].kind == MatrixKind.name

    @property
    def pairs(self) -> tuple[tuple[int, int], ...]:
        """The class pairs of its ambiguous targets, (a, b) with a < b, in batch order."""
        return tuple(target.classes for target in self.targets if isinstance(target, AmbiguousTarget))

    @property
    def path(self) -> tuple[int, int, int] | None:
        """``(from, to, steps)`` class indices of a spec that is one ``path:A->B:N``; None otherwise."""
        if len(self.parts) == 1 and self.parts[0].kind == PathKind.name:
            return self.parts[0].arguments
        return None

    def describe(self, shown: int = 4) -> str:
        """The spec in words, for a caption: its first ``shown`` targets, then how many there are."""
        targets = self.targets
        more = f"; … ({len(targets)} targets)" if len(targets) > shown else ""
        return "; ".join(t.describe(self.class_names) for t in targets[:shown]) + more


def parse_targets(spec: str, class_names: Sequence[str]) -> list[Target]:
    """The targets of spec text (:meth:`TargetSpec.parse`), for scripts and tests that need only them."""
    return list(TargetSpec.parse(spec, class_names).targets)


def report_classes(entry: dict, class_names: Sequence[str]) -> tuple[int, ...]:
    """The class indices a per-target report is about: stored with it (``classes``), or, for a report of an older
    version, read from its spec in the classifier's ``class_names``."""
    if entry.get("classes") is not None:
        return tuple(int(c) for c in entry["classes"])
    return TargetSpec.parse(entry["spec"], class_names).targets[0].classes


class TargetBatch:
    """Targets assigned to chains: chain i serves ``targets[target_index[i]]``.

    Chains of several targets (e.g. all 45 class pairs) are evaluated in one tensor
    batch; statistics are padded to the widest target and masked.

    Parameters
    ----------
    targets : sequence of Target
    chains_per_target : int
    """

    def __init__(self, targets: Sequence[Target], chains_per_target: int) -> None:
        if not targets:
            raise ProbeError("no targets given")
        if chains_per_target < 1:
            raise ProbeError("chains per target must be >= 1")
        if len({t.num_classes for t in targets}) != 1:
            raise ProbeError("all targets of a batch must have the same number of classes")
        self.targets = list(targets)
        self.chains_per_target = int(chains_per_target)
        self.num_classes = targets[0].num_classes
        self.target_index = torch.arange(len(targets)).repeat_interleave(chains_per_target)
        self.num_sites = max(t.num_sites for t in targets)
        self._groups = [(t, (self.target_index == i).nonzero().squeeze(1)) for i, t in enumerate(targets)]
        observed = torch.zeros(self.num_chains, self.num_sites)
        mask = torch.zeros(self.num_chains, self.num_sites, dtype=torch.bool)
        for target, chains in self._groups:
            observed[chains, :target.num_sites] = target.observed()
            mask[chains, :target.num_sites] = True
        self.observed, self.mask = observed, mask
        self._vectorised = self._build_vectorised()

    @property
    def num_chains(self) -> int:
        return len(self.target_index)

    def _build_vectorised(self) -> Callable[[torch.Tensor], torch.Tensor] | None:
        """Fast path when every target is of one class (the common case, e.g. the ambiguity matrix)."""
        classes = {type(t) for t in self.targets}
        if len(classes) != 1:
            return None
        return classes.pop().batched_statistics(self.targets, self.target_index)

    def statistics(self, probs: torch.Tensor) -> torch.Tensor:
        """Per-chain statistics u, shape (num_chains, num_sites), zero where masked."""
        if self._vectorised is not None:
            return self._vectorised(probs)
        u = probs.new_zeros(len(probs), self.num_sites)
        for target, chains in self._groups:
            u[chains, :target.num_sites] = target.statistics(probs[chains])
        return u

    def log_likelihood(self, probs: torch.Tensor, sigma: float | torch.Tensor = DEFAULT_SIGMA) -> torch.Tensor:
        """Relaxed log-likelihood per chain, shape (num_chains,)."""
        u = self.statistics(probs)
        terms = torch.distributions.Normal(u, sigma).log_prob(self.observed.to(probs))
        return (terms * self.mask.to(probs)).sum(1)

    def per_target(self, values: torch.Tensor) -> list[torch.Tensor]:
        """Split a per-chain tensor (num_chains, ...) into one tensor per target."""
        return [values[chains] for _, chains in self._groups]

    def _per_chain(self, method: str, probs: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """Apply a Target method to confidences (num_chains, [S,] K); returns (num_chains, [S]) of ``dtype``."""
        out = torch.zeros(probs.shape[:-1], dtype=dtype, device=probs.device)
        for target, chains in self._groups:
            chain_probs = probs[chains]
            flat = getattr(target, method)(chain_probs.reshape(-1, probs.shape[-1]))
            out[chains] = flat.reshape(chain_probs.shape[:-1]).to(dtype)
        return out

    def is_hit(self, probs: torch.Tensor) -> torch.Tensor:
        """Hit flags for confidences of shape (num_chains, K) or (num_chains, S, K)."""
        return self._per_chain("is_hit", probs, torch.bool)

    def distance(self, probs: torch.Tensor) -> torch.Tensor:
        """Distance to each chain's target for (num_chains, [S,] K) confidences."""
        return self._per_chain("distance", probs, probs.dtype)

    def soft_labels(self) -> torch.Tensor:
        """Per-chain soft labels, shape (num_chains, K)."""
        return torch.stack([t.soft_label() for t in self.targets])[self.target_index]
