"""Data sets: registry, IDX reader, class-subset views."""

from probe_core.data.datasets import (
    DATA_DIR_ENV,
    DATASETS,
    DEFAULT_DATASET,
    FASHION_MNIST_CLASSES,
    DatasetInfo,
    ImageDataset,
    clean_dataset_name,
    list_datasets,
    load_dataset,
    resolve_data_folder,
)
from probe_core.data.idx import read_idx, write_idx

__all__ = [
    "DATA_DIR_ENV", "DATASETS", "DEFAULT_DATASET", "FASHION_MNIST_CLASSES", "DatasetInfo", "ImageDataset", "clean_dataset_name",
    "list_datasets", "load_dataset", "resolve_data_folder", "read_idx", "write_idx",
]
