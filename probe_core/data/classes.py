"""Classes named by the user: one rule everywhere (data-set views, target specs, labels, CLI options).

A class is given by its name in any case (``bag``, ``Bag``) or by its index (``3``); a name wins
over an index, so a data set whose class names are digits reads the same either way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from probe_core.errors import DataError, excerpt, listing


def class_index(text: str | int, class_names: Sequence[str], where: str = "") -> int:
    """The index of a class given by name (any case) or by index.

    Parameters
    ----------
    text : str or int
    class_names : sequence of str
        K names, index i naming class i.
    where : str, optional
        What the classes belong to, for the message (``for digits``).

    Raises
    ------
    DataError
        If no such class exists; the message lists the valid ones.
    """
    given = str(text).strip()
    lowered = [name.lower() for name in class_names]
    if given.lower() in lowered:
        return lowered.index(given.lower())
    if given.isdigit() and int(given) < len(class_names):
        return int(given)
    suffix = f" {where}" if where else ""
    raise DataError(f"unknown class {excerpt(given)}{suffix}; valid: 0..{len(class_names) - 1} or "
                    f"{listing(list(class_names))}")


CLASS_MAP_MARK = "#class_map="


class ClassMismatchError(DataError):
    """A classifier's class names do not match a data set's, and no class map says how they relate."""


def parse_class_map(text: str | dict | None) -> dict[str, str] | None:
    """A class map ``{model's name: data set's name}`` from ``"zero=0,one=1"`` or a dict; None for none.

    Raises
    ------
    DataError
        If an entry is not ``MODEL_NAME=DATA_NAME`` or a model name is mapped twice.
    """
    if text is None or text == "" or text == {}:
        return None
    if isinstance(text, dict):
        return {str(key).strip(): str(value).strip() for key, value in text.items()}
    mapping: dict[str, str] = {}
    for entry in str(text).split(","):
        model_name, separator, data_name = entry.partition("=")
        if not separator or not model_name.strip() or not data_name.strip():
            raise DataError(f"class map entry {entry.strip()!r} is not MODEL_CLASS=DATA_CLASS "
                            f"(e.g. --class-map \"zero=0,one=1\")")
        if model_name.strip() in mapping:
            raise DataError(f"class map names the model's class {model_name.strip()!r} twice")
        mapping[model_name.strip()] = data_name.strip()
    return mapping


def format_class_map(mapping: dict[str, str]) -> str:
    """The ``--class-map`` text of a mapping (inverse of :func:`parse_class_map`)."""
    return ",".join(f"{model_name}={data_name}" for model_name, data_name in mapping.items())


def split_class_map(reference: str) -> tuple[str, dict[str, str] | None]:
    """``(reference, class map or None)`` of a model reference that may end in ``#class_map=a=b,...``."""
    base, mark, text = reference.partition(CLASS_MAP_MARK)
    return (base, parse_class_map(text)) if mark else (reference, None)


def with_class_map(reference: str, mapping: dict[str, str] | str | None) -> str:
    """``reference`` carrying a class map, so that it resolves the same way in any process."""
    base, _ = split_class_map(reference)
    parsed = parse_class_map(mapping)
    return base if not parsed else f"{base}{CLASS_MAP_MARK}{format_class_map(parsed)}"


def _key(name: str) -> str:
    return " ".join(str(name).split()).casefold()


@dataclass(frozen=True)
class ClassMatch:
    """How a classifier's outputs meet a data set's classes, matched by name.

    Attributes
    ----------
    model_names : tuple of str
        The classifier's K' class names, in its output order.
    data_names : tuple of str
        The data set's K class names, in label order.
    data_index : tuple of int
        For each of the classifier's K' outputs, the data set's class index it names.
    given_map : dict
        The explicit class map used (model's name -> data set's name), empty when names matched as they are.
    """

    model_names: tuple[str, ...]
    data_names: tuple[str, ...]
    data_index: tuple[int, ...]
    given_map: dict = field(default_factory=dict)

    @property
    def output_order(self) -> tuple[int, ...]:
        """The classifier column for each aligned output: aligned outputs follow the data set's label order."""
        return tuple(sorted(range(len(self.data_index)), key=lambda column: self.data_index[column]))

    @property
    def aligned_names(self) -> tuple[str, ...]:
        """Class names of the aligned outputs (the data set's names, in its order)."""
        return tuple(self.data_names[i] for i in sorted(self.data_index))

    @property
    def covered(self) -> tuple[int, ...]:
        """Data set class indices of the aligned outputs, in order (all K unless the classifier knows a subset)."""
        return tuple(sorted(self.data_index))

    @property
    def is_identity(self) -> bool:
        """Whether output i already names data set class i for every class (no reordering needed)."""
        return self.data_index == tuple(range(len(self.data_names)))

    @property
    def mapping(self) -> dict[str, str]:
        """``{model's name: data set's name}`` for every output."""
        return {name: self.data_names[i] for name, i in zip(self.model_names, self.data_index)}


def match_classes(model_names: Sequence[str], data_names: Sequence[str], class_map: dict[str, str] | None = None,
                  model: str = "the classifier", data: str = "the data set") -> ClassMatch:
    """Match a classifier's class names to a data set's by name (any case), never by position.

    Parameters
    ----------
    model_names : sequence of str
        K' names, in the classifier's output order.
    data_names : sequence of str
        K names, in the data set's label order.
    class_map : dict, optional
        ``{model's name: data set's name or index}`` for classes whose names differ.
    model, data : str
        What the two sides are, for the message.

    Returns
    -------
    ClassMatch
        Every output of the classifier names one distinct class of the data set
        (a classifier of a subset of the classes is allowed).

    Raises
    ------
    ClassMismatchError
        If some of the classifier's classes name no class of the data set, or two name the same
        one; the message lists both sides and how to map them.
    """
    model_names, data_names = tuple(str(n) for n in model_names), tuple(str(n) for n in data_names)
    given = dict(class_map or {})
    unknown_keys = [key for key in given if _key(key) not in {_key(n) for n in model_names}]
    if unknown_keys:
        raise ClassMismatchError(f"class map names {', '.join(map(repr, unknown_keys))}, which {model} does not have "
                                 f"(its classes: {', '.join(model_names)})")
    by_key = {_key(name): index for index, name in enumerate(data_names)}
    given_by_key = {_key(key): value for key, value in given.items()}
    data_index, unmatched = [], []
    for name in model_names:
        if _key(name) in given_by_key:
            data_index.append(class_index(given_by_key[_key(name)], data_names, f"in {data}"))
        elif _key(name) in by_key:
            data_index.append(by_key[_key(name)])
        else:
            unmatched.append(name)
    if unmatched:
        example = ",".join(f"{name}={data_names[i % len(data_names)]}" for i, name in enumerate(unmatched[:3]))
        raise ClassMismatchError(
            f"{model}'s classes do not match {data}'s by name: {model} has [{', '.join(model_names)}], {data} has "
            f"[{', '.join(data_names)}]; no match for {', '.join(map(repr, unmatched))}. Classes are matched by "
            f"name, never by position: map them with class_map = {{\"{unmatched[0]}\": \"...\"}} in the plugin or "
            f"the model's sidecar .json, or --class-map \"{example},...\" (model's name=data set's name)")
    duplicates = sorted({data_names[i] for i in data_index if data_index.count(i) > 1})
    if duplicates:
        raise ClassMismatchError(f"{model}'s classes [{', '.join(model_names)}] name {data}'s class(es) "
                                 f"{', '.join(duplicates)} more than once; each must name a different class of "
                                 f"[{', '.join(data_names)}]")
    return ClassMatch(model_names, data_names, tuple(data_index), given)
