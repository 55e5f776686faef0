"""The catalogue: every data set Model Probe knows, with its capabilities, and the generator sources.

Composed here, one way, from the packages that declare them: the built-in data sets of
:mod:`probe_core.data` and the scene world's data sets and ``scene:`` renderer
(:mod:`probe_core.scenes.catalog`). Neither package knows the other. Everything that asks
"what does this data set use?" reads its :class:`~probe_core.data.DatasetEntry`:

- which data set's classifier probes it (``classifier_dataset``),
- its default generator reference and the generator choices it offers,
- which zoo generators are trained for it, and its classifier's architecture and epochs.
"""

from __future__ import annotations

import functools
from pathlib import Path

from probe_core.data.datasets import (
    BUILTIN_DATASETS,
    DEFAULT_DATASET,
    DatasetEntry,
    ImageDataset,
    apply_view,
    clean_dataset_name,
    file_dataset,
    split_view,
)
from probe_core.data.files import is_file_reference, looks_like_path, reference_for
from probe_core.errors import DataError
from probe_core.sampling.protocols import GeneratorSource
from probe_core.scenes.catalog import SCENE_DATASETS, SCENE_SOURCE

DATASETS: dict[str, DatasetEntry] = {entry.name: entry for entry in (*BUILTIN_DATASETS, *SCENE_DATASETS)}
GENERATOR_SOURCES: tuple[GeneratorSource, ...] = (SCENE_SOURCE,)

__all__ = ["DATASETS", "DEFAULT_DATASET", "GENERATOR_SOURCES", "canonical_dataset_name", "classifier_dataset",
           "dataset_entry",
           "generator_dataset", "generator_source", "list_datasets", "load_dataset"]


def list_datasets() -> list[DatasetEntry]:
    """Every catalogued data set."""
    return list(DATASETS.values())


def dataset_entry(name: str) -> DatasetEntry:
    """The entry of a data set, given by name or by a view of it (``digits[drop=5]``).

    Raises
    ------
    DataError
        For an unknown name; the message lists the known ones.
    """
    base, _ = split_view(name)
    entry = DATASETS.get(base)
    if entry is None and is_file_reference(base):
        return _file_entry(base)
    if entry is None:
        hint = " (a folder or .npz you name is written images:/abs/path or arrays:/abs/path.npz; " \
               "the CLI and the sidebar accept a plain path)" if looks_like_path(base) else ""
        raise DataError(f"unknown data set {base!r}; known: {', '.join(DATASETS)}{hint}")
    return entry


@functools.lru_cache(maxsize=32)
def _file_entry(reference: str) -> DatasetEntry:
    return DatasetEntry(reference, f"your data: {reference}", lambda _dir: file_dataset(reference), sized_defaults=True)


def canonical_dataset_name(name: str, image_size: int | None = None, skip_bad: bool = False) -> str:
    """What a run stores for a data set a user typed: catalogue names as they are, paths as references.

    ``./my_images`` becomes ``images:/abs/my_images`` (with ``?size=``/``skip_bad=`` options), and
    ``data.npz`` becomes ``arrays:/abs/data.npz``, so the name resolves again in any process.
    """
    base, _ = split_view(name)
    if base in DATASETS or is_file_reference(base):
        if image_size or skip_bad:
            raise DataError("image size and skipping bad files apply to a folder you name, not to " + base)
        return name
    if looks_like_path(base):
        return reference_for(name, image_size, skip_bad)
    dataset_entry(name)  # raises the unknown-name error
    return name


def classifier_dataset(name: str) -> str:
    """The data set (with its view) whose default classifier probes ``name``."""
    return dataset_entry(name).classifier_dataset or name


def generator_dataset(name: str) -> str:
    """The data set whose zoo generators serve ``name`` (a generator ignores labels, so a mislabel view shares them)."""
    return clean_dataset_name(name)


def generator_source(reference: str | None) -> GeneratorSource | None:
    """The source that builds a generator reference like ``scene:novel`` (None for ids and plugins)."""
    return next((source for source in GENERATOR_SOURCES if source.owns(reference)), None)


def load_dataset(name: str, data_dir: str | Path | None = None) -> ImageDataset:
    """Load a data set by catalogue name.

    Parameters
    ----------
    name : str
        A catalogue name (``digits``, ``mnist``, ``fashion-mnist``, ``idx``, ``scenes``, ...); a
        class-subset view is written ``NAME[keep=0,1,3]`` or ``NAME[drop=5]``, a view with
        systematic training-label errors ``NAME[mislabel=9->8:0.4]``
        (see :meth:`ImageDataset.mislabel`).
    data_dir : str or Path, optional
        Folder with the files of folder-based data sets (default ``$PROBE_DATA_DIR``).

    Raises
    ------
    DataError
        For an unknown name, a bad view, a missing folder or malformed files.
    """
    _, view = split_view(name)
    dataset = dataset_entry(name).loader(Path(data_dir) if data_dir is not None else None)
    return apply_view(dataset, view)
