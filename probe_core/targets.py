"""Bayes-TrEx targets: a small spec language and the relaxed likelihood, written once as a Pyro model.

Spec language (several specs may be joined with ``;``):

``high:C``                     high confidence in class C: u = p_C, observed 1
``ambiguous:A,B``              u1 = |p_A - p_B| observed 0, u2 = min(p_A, p_B) - max_{k != A,B} p_k observed 0.5
``uniform``                    u = max(p) - min(p), observed 0
``probs:8=0.7,9=0.3``          one site per class, u_k = p_k observed p*_k (unnamed classes 0; must sum to 1)
``path:A->B:N``                N vector targets from p_A = 1 to p_B = 1 (p_A = 1 - t, p_B = t)
``ambiguous-matrix``           ``ambiguous:A,B`` for every class pair

Classes may be given by index or by name (``high:Bag``); a name wins over an index, so
for a classifier whose classes are named ``0, 1, 3, 6, 9``, ``high:3`` means the class named
"3". Canonical specs (``Target.spec``) use indices. Each observation site is
Normal(u, sigma) observed at u* (sigma = 0.05 by default), as in the paper.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from probe_core.classes import class_index
from probe_core.errors import ProbeError, excerpt

DEFAULT_SIGMA = 0.05
HIGH_HIT = 0.9
AMBIGUOUS_HIT = (0.4, 0.6)
VECTOR_HIT_TOLERANCE = 0.1
KINDS = ("high", "ambiguous", "uniform", "vector")


@dataclass(frozen=True)
class Target:
    """One target confidence condition over K classes.

    Attributes
    ----------
    kind : {"high", "ambiguous", "uniform", "vector"}
    classes : tuple of int
        high: (c,); ambiguous: (a, b); vector: classes with p*_k > 0; uniform: ().
    target_probs : tuple of float
        vector and uniform: the full p* (K,); otherwise empty.
    num_classes : int
    spec : str
        Canonical spec text (``ambiguous:4,9``).
    """

    kind: str
    classes: tuple[int, ...]
    num_classes: int
    target_probs: tuple[float, ...] = ()
    spec: str = ""

    @property
    def num_sites(self) -> int:
        return {"high": 1, "ambiguous": 2, "uniform": 1, "vector": self.num_classes}[self.kind]

    @property
    def reported_classes(self) -> tuple[int, ...]:
        """Classes whose achieved confidence the summary reports (the paper's Table 2)."""
        return self.classes if self.classes else tuple(range(self.num_classes))

    def observed(self) -> torch.Tensor:
        """u*, shape (S,)."""
        if self.kind == "high":
            return torch.tensor([1.0])
        if self.kind == "ambiguous":
            return torch.tensor([0.0, 0.5])
        if self.kind == "uniform":
            return torch.tensor([0.0])
        return torch.tensor(self.target_probs, dtype=torch.float32)

    def statistics(self, probs: torch.Tensor) -> torch.Tensor:
        """u(f(g(z))) for probabilities of shape (B, K); returns (B, S)."""
        if self.kind == "high":
            return probs[:, self.classes[0]:self.classes[0] + 1]
        if self.kind == "ambiguous":
            a, b = self.classes
            pa, pb = probs[:, a], probs[:, b]
            others = probs.index_fill(1, torch.tensor([a, b], device=probs.device), -1.0).max(1).values
            return torch.stack([(pa - pb).abs(), torch.minimum(pa, pb) - others], 1)
        if self.kind == "uniform":
            return (probs.max(1).values - probs.min(1).values).unsqueeze(1)
        return probs

    def log_likelihood(self, probs: torch.Tensor, sigma: float = DEFAULT_SIGMA) -> torch.Tensor:
        """Sum over sites of log N(u*; u, sigma^2), shape (B,)."""
        u = self.statistics(probs)
        observed = self.observed().to(probs)
        return torch.distributions.Normal(u, sigma).log_prob(observed.expand_as(u)).sum(1)

    def is_hit(self, probs: torch.Tensor) -> torch.Tensor:
        """Whether each (B, K) confidence vector meets the target, shape (B,) bool.

        high: p_c >= 0.9; ambiguous: both in [0.4, 0.6] and no other class above them;
        vector and uniform: every class within 0.1 of p*.
        """
        if self.kind == "high":
            return probs[:, self.classes[0]] >= HIGH_HIT
        if self.kind == "ambiguous":
            a, b = self.classes
            low, high = AMBIGUOUS_HIT
            pair = probs[:, [a, b]]
            others = probs.index_fill(1, torch.tensor([a, b], device=probs.device), -1.0).max(1).values
            return ((pair >= low) & (pair <= high)).all(1) & (others < pair.min(1).values)
        target = torch.tensor(self.target_probs, dtype=probs.dtype, device=probs.device)
        return ((probs - target).abs() <= VECTOR_HIT_TOLERANCE).all(1)

    def distance(self, probs: torch.Tensor) -> torch.Tensor:
        """Largest gap between the achieved statistics and u*, shape (B,)."""
        return (self.statistics(probs) - self.observed().to(probs)).abs().max(1).values

    def soft_label(self) -> torch.Tensor:
        """A class distribution that meets the target, shape (K,); used to optimise starting points."""
        if self.kind == "high":
            return torch.nn.functional.one_hot(torch.tensor(self.classes[0]), self.num_classes).float()
        if self.kind == "ambiguous":
            label = torch.zeros(self.num_classes)
            label[list(self.classes)] = 0.5
            return label
        return torch.tensor(self.target_probs, dtype=torch.float32)

    def describe(self, class_names: Sequence[str] | None = None) -> str:
        """Human-readable form, with class names when given."""
        name = (lambda c: class_names[c]) if class_names else str  # noqa: E731
        if self.kind == "high":
            return f"high confidence in {name(self.classes[0])}"
        if self.kind == "ambiguous":
            return f"ambiguous between {name(self.classes[0])} and {name(self.classes[1])}"
        if self.kind == "uniform":
            return "uniform over all classes"
        return "confidences " + ", ".join(f"{name(c)}={self.target_probs[c]:.2g}" for c in self.classes)


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


def _vector_target(probs: list[float], num_classes: int, class_names: Sequence[str] | None = None) -> Target:
    classes = tuple(k for k, p in enumerate(probs) if p > 0)
    spec = "probs:" + ",".join(f"{spec_name(k, class_names)}={probs[k]:g}" for k in classes)
    return Target("vector", classes, num_classes, tuple(float(p) for p in probs), spec)


MATRIX_SPEC = "ambiguous-matrix"


def is_matrix_spec(spec: str | None) -> bool:
    """Whether a target spec is the K×K ambiguity matrix."""
    return spec is not None and spec.strip() == MATRIX_SPEC


def parse_targets(spec: str, class_names: Sequence[str]) -> list[Target]:
    """Parse a target spec (see the module docstring) into targets.

    Parameters
    ----------
    spec : str
        One or more specs separated by ``;``.
    class_names : sequence of str
        The classifier's K class names (indices and names are both accepted).

    Raises
    ------
    ProbeError
        One clear message for malformed specs, unknown classes, negative or
        non-summing vectors.
    """
    num_classes = len(class_names)
    if num_classes < 2:
        raise ProbeError("targets need a classifier with at least 2 classes")
    targets: list[Target] = []
    for part in [p.strip() for p in (spec or "").split(";") if p.strip()] or [""]:
        kind, _, argument = part.partition(":")
        kind = kind.strip().lower()
        try:
            targets.extend(_parse_one(kind, argument.strip(), class_names))
        except ProbeError as exc:
            raise ProbeError(f"bad target {excerpt(part)}: {exc}") from None
    return targets


def describe_spec(spec: str, class_names: Sequence[str], shown: int = 4) -> str:
    """A target spec in words, for a caption: its first ``shown`` targets, then how many there are.

    Raises
    ------
    ProbeError
        As :func:`parse_targets`.
    """
    targets = parse_targets(spec, class_names)
    more = f"; … ({len(targets)} targets)" if len(targets) > shown else ""
    return "; ".join(t.describe(class_names) for t in targets[:shown]) + more


def report_classes(entry: dict, class_names: Sequence[str]) -> tuple[int, ...]:
    """The class indices a per-target report is about: stored with it (``classes``), or, for a report of an older
    version, read from its spec in the classifier's ``class_names``."""
    if entry.get("classes") is not None:
        return tuple(int(c) for c in entry["classes"])
    return parse_targets(entry["spec"], class_names)[0].classes


def first_target_classes(spec: str, class_names: Sequence[str]) -> tuple[str, ...]:
    """The class names the spec's first target is about (``high:7`` -> ``("7",)``)."""
    return tuple(class_names[c] for c in parse_targets(spec, class_names)[0].reported_classes)


def _parse_one(kind: str, argument: str, class_names: Sequence[str]) -> list[Target]:
    num_classes = len(class_names)
    if kind == "high":
        c = class_index(argument, class_names)
        return [Target("high", (c,), num_classes, (), f"high:{spec_name(c, class_names)}")]
    if kind == "ambiguous":
        parts = argument.split(",")
        if len(parts) != 2:
            raise ProbeError("write ambiguous:A,B with two classes")
        a, b = (class_index(p, class_names) for p in parts)
        if a == b:
            raise ProbeError("the two classes of an ambiguous target must differ")
        a, b = sorted((a, b))
        return [Target("ambiguous", (a, b), num_classes, (),
                       f"ambiguous:{spec_name(a, class_names)},{spec_name(b, class_names)}")]
    if kind == MATRIX_SPEC:
        if argument:
            raise ProbeError(f"{MATRIX_SPEC} takes no argument")
        return [Target("ambiguous", (a, b), num_classes, (),
                       f"ambiguous:{spec_name(a, class_names)},{spec_name(b, class_names)}")
                for a, b in itertools.combinations(range(num_classes), 2)]
    if kind == "uniform":
        if argument:
            raise ProbeError("uniform takes no argument")
        return [Target("uniform", (), num_classes, tuple([1.0 / num_classes] * num_classes), "uniform")]
    if kind == "probs":
        probs = [0.0] * num_classes
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
        if abs(sum(probs) - 1.0) > 1e-6:
            raise ProbeError(f"probabilities must sum to 1, they sum to {sum(probs):.6g}")
        return [_vector_target(probs, num_classes, class_names)]
    if kind == "path":
        ends, colon, steps_text = argument.rpartition(":")
        source, arrow, destination = ends.partition("->")
        if not (colon and arrow):
            raise ProbeError("write path:A->B:STEPS, e.g. path:8->9:11")
        a, b = class_index(source, class_names), class_index(destination, class_names)
        if a == b:
            raise ProbeError("a path needs two different classes")
        if not steps_text.strip().isdigit() or int(steps_text) < 2:
            raise ProbeError("the number of steps must be an integer >= 2")
        steps = int(steps_text)
        targets = []
        for i in range(steps):
            t = round(i / (steps - 1), 10)
            probs = [0.0] * num_classes
            probs[a], probs[b] = 1.0 - t, t
            targets.append(_vector_target(probs, num_classes, class_names))
        return targets
    known = "high:C, ambiguous:A,B, uniform, probs:C=P,..., path:A->B:N, ambiguous-matrix"
    raise ProbeError(f"unknown target kind {excerpt(kind)}; use one of {known}")


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
        """Fast path when every target is of one kind (the common case, e.g. the ambiguity matrix)."""
        kinds = {t.kind for t in self.targets}
        if kinds == {"ambiguous"}:
            pairs = torch.tensor([t.classes for t in self.targets])[self.target_index]

            def ambiguous(probs: torch.Tensor) -> torch.Tensor:
                pa = probs.gather(1, pairs[:, :1].to(probs.device)).squeeze(1)
                pb = probs.gather(1, pairs[:, 1:].to(probs.device)).squeeze(1)
                others = probs.scatter(1, pairs.to(probs.device), -1.0).max(1).values
                return torch.stack([(pa - pb).abs(), torch.minimum(pa, pb) - others], 1)

            return ambiguous
        if kinds == {"high"}:
            classes = torch.tensor([t.classes[0] for t in self.targets])[self.target_index].unsqueeze(1)
            return lambda probs: probs.gather(1, classes.to(probs.device))
        if kinds <= {"vector"}:
            return lambda probs: probs
        return None

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
