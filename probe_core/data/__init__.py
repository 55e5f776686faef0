"""Image data: the :class:`ImageDataset` type, the built-in data sets, IDX files, class-subset views.

The data sets a user can name are listed by :mod:`probe_core.catalog`, which adds the
scene world's entries to the built-in ones declared here; load them with
:func:`probe_core.catalog.load_dataset`.
"""

from probe_core.data.datasets import (
    BUILTIN_DATASETS,
    DATA_DIR_ENV,
    DEFAULT_DATASET,
    OPEN_DATASET_ENV,
    FASHION_MNIST_CLASSES,
    REAL_SIZE,
    REAL_SIZE_LABEL,
    DatasetEntry,
    ImageDataset,
    apply_view,
    clean_dataset_name,
    is_real_size,
    resolve_data_folder,
    split_view,
)
from probe_core.data.idx import read_idx, write_idx

__all__ = [
    "BUILTIN_DATASETS", "DATA_DIR_ENV", "DEFAULT_DATASET", "OPEN_DATASET_ENV", "FASHION_MNIST_CLASSES", "REAL_SIZE", "REAL_SIZE_LABEL",
    "DatasetEntry", "ImageDataset", "apply_view", "clean_dataset_name", "is_real_size", "resolve_data_folder",
    "split_view", "read_idx", "write_idx",
]
