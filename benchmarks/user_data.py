"""Opening a folder of images: the first decode with Pillow against the second open from the workspace cache.

Writes N random 32x32 RGB PNGs in ten class folders (N = 60,000 as in issue 14's goal, 2,000 with
``--quick``), then opens the folder as a data set twice in fresh caches and prints both times.
Run: ``.venv/bin/python benchmarks/user_data.py [--quick]``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image


def write_folder(root: Path, count: int, size: int = 32) -> None:
    rng = np.random.default_rng(0)
    for index in range(count):
        folder = root / f"class{index % 10}"
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)).save(folder / f"{index}.png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2,000 images instead of 60,000")
    parser.add_argument("--workspace", help="accepted for make bench; the cache goes to a temporary folder")
    args = parser.parse_args()
    count = 2_000 if args.quick else 60_000
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch) / "images"
        started = time.perf_counter()
        write_folder(root, count)
        print(f"wrote {count:,} 32x32 RGB PNGs in {time.perf_counter() - started:.1f} s (not part of the figures)")
        os.environ["PROBE_DATA_CACHE"] = str(Path(scratch) / "cache")
        from probe_core.data import files
        from probe_core.catalog import canonical_dataset_name, load_dataset

        warm = Path(scratch) / "warm"  # imports and first-call costs are not part of the figures
        write_folder(warm, 20)
        load_dataset(canonical_dataset_name(str(warm)))
        reference = canonical_dataset_name(str(root))
        started = time.perf_counter()
        dataset = load_dataset(reference)
        first = time.perf_counter() - started
        files.load_file_arrays.cache_clear()  # a new process: only the on-disk cache is left
        started = time.perf_counter()
        load_dataset(reference)
        second = time.perf_counter() - started
    total = len(dataset.train_labels) + len(dataset.test_labels)
    print(f"first open (decode {total:,} images, cache them): {first:6.2f} s  ({total / first:,.0f} images/s)")
    print(f"second open (from the workspace cache):           {second:6.2f} s  ({first / second:.0f}x faster)")


if __name__ == "__main__":
    main()
