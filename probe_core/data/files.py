"""Data a user brings: a folder of class sub-folders of images, or a ``.npz`` of arrays.

Both are named by a reference that resolves again in any process (as plugin references do):

- ``images:/abs/folder`` with options after ``?``: ``size=32`` (resize every image to 32×32;
  default: the most common size in the folder) and ``skip_bad=1`` (skip unreadable files and
  say how many in the data set's description instead of stopping at the first);
- ``arrays:/abs/data.npz``.

:func:`reference_for` turns what a user types (``./my_images``, ``data.npz``) into that form.
Folders are decoded with Pillow in a few threads and the arrays are cached in
``$PROBE_WORKSPACE/cache/data`` (``PROBE_DATA_CACHE`` overrides it), keyed by a fingerprint of
every file's path, size and modification time and of the options, so a second open reads one file.
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from probe_core.errors import DataError, check_number_ranges

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".webp")
FOLDER_SCHEME, ARRAYS_SCHEME = "images", "arrays"
CACHE_ENV = "PROBE_DATA_CACHE"
CACHE_VERSION = 1


def is_file_reference(name: str) -> bool:
    """Whether a data set name is a folder or array reference (``images:…``, ``arrays:…``)."""
    return name.startswith((FOLDER_SCHEME + ":", ARRAYS_SCHEME + ":"))


# The side a folder's images may be resized to, inclusive (the sidebar's widget takes its bound from here; 0
# there means the folder's most common size). 512x512 colour is 3 MB an image in memory.
IMAGE_SIZE_RANGE = (4, 512)


def check_image_size(size: object) -> None:
    """Refuse an image size outside :data:`IMAGE_SIZE_RANGE`, or not a whole number, with a DataError."""
    check_number_ranges({"image_size": size}, {"image_size": IMAGE_SIZE_RANGE}, {"image_size": "image size"}, DataError)


def looks_like_path(name: str) -> bool:
    """Whether what a user typed is meant as a path (it exists, or has a slash or ``.npz``)."""
    base = name.partition("[")[0]
    return "/" in base or base.endswith(".npz") or base.startswith(("~", ".")) or Path(base).exists()


def reference_for(path: str, image_size: int | None = None, skip_bad: bool = False) -> str:
    """The stored reference for a folder or ``.npz`` a user names (absolute; options after ``?``).

    A class view typed after the path (``./imgs[keep=0,1]``) is kept after the reference.

    Raises
    ------
    DataError
        If the path does not exist or is neither a folder nor a ``.npz`` file.
    """
    base, bracket, view = path.partition("[")
    target = Path(base).expanduser().resolve()
    if image_size:
        check_image_size(image_size)
    if target.is_dir():
        options = [f"size={int(image_size)}"] if image_size else []
        options += ["skip_bad=1"] if skip_bad else []
        reference = f"{FOLDER_SCHEME}:{target}" + ("?" + "&".join(options) if options else "")
    elif target.is_file() and target.suffix.lower() == ".npz":
        if image_size or skip_bad:
            raise DataError("image size and skipping bad files apply to image folders, not to .npz arrays")
        reference = f"{ARRAYS_SCHEME}:{target}"
    elif target.exists():
        raise DataError(f"{target} is neither a folder of class sub-folders nor a .npz file")
    else:
        raise DataError(f"{target} does not exist (a data set path is a folder of class sub-folders or a .npz)")
    return reference + bracket + view


def parse_reference(reference: str) -> tuple[str, Path, dict]:
    """``(scheme, path, options)`` of a file reference."""
    scheme, _, rest = reference.partition(":")
    path_text, _, query = rest.partition("?")
    options = dict(part.partition("=")[::2] for part in query.split("&") if part)
    unknown = set(options) - {"size", "skip_bad"}
    if unknown:
        raise DataError(f"unknown data option(s) {', '.join(sorted(unknown))} in {reference!r}: use size= and skip_bad=")
    return scheme, Path(path_text), options


def reference_pin(reference: str) -> tuple[str, str]:
    """What a file reference resolves to now: ``(real path, fingerprint)``.

    The real path follows symlinks; the fingerprint is a folder's manifest (every image's split, class, name,
    size and modification time: cheap, and any edit changes it) or an ``.npz`` file's sha256. An admin's use of
    a reference pins it (:meth:`~probe_core.store.Store.pin_reference`); an annotator's resolution compares
    the pin with this, so a folder or file re-pointed or changed after it was recorded is refused.

    Raises
    ------
    DataError
        For a reference that is no file reference, or whose folder or file is gone.
    """
    if not is_file_reference(reference):
        raise DataError(f"{reference!r} is not a folder or .npz reference")
    scheme, path, _ = parse_reference(reference)
    real = path.expanduser().resolve()
    if scheme == FOLDER_SCHEME:
        return str(real), _fingerprint(folder_layout(real), {})
    if not real.is_file():
        raise DataError(f"array file {real} does not exist")
    stat = real.stat()
    return str(real), _file_sha256(str(real), stat.st_size, stat.st_mtime_ns, stat.st_ino)


@functools.lru_cache(maxsize=64)
def _file_sha256(path: str, size: int, mtime_ns: int, inode: int) -> str:
    """A file's sha256, read once per (path, size, modification time, inode): pages resolve data on every rerun."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def short_name(reference: str) -> str:
    """A readable name for ids and titles: the folder or file name."""
    return parse_reference(reference)[1].stem


# --- image folders -----------------------------------------------------------------------

def _class_folders(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))


def _images_of(class_folder: Path) -> list[Path]:
    return sorted(p for p in class_folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)


def folder_layout(folder: Path) -> dict[str, dict[str, list[Path]]]:
    """``{split: {class name: [image paths]}}``; the split is ``all`` when the folder has no train/test.

    Raises
    ------
    DataError
        For a missing folder, fewer than two classes, or a class folder without images.
    """
    if not folder.is_dir():
        raise DataError(f"image folder {folder} does not exist")
    names = {p.name.lower(): p for p in _class_folders(folder)}
    if "train" in names and "test" in names:
        splits = {"train": names["train"], "test": names["test"]}
    else:
        splits = {"all": folder}
    layout = {}
    for split, root in splits.items():
        classes = {c.name: _images_of(c) for c in _class_folders(root)}
        if len(classes) < 2:
            found = ", ".join(classes) or "none"
            raise DataError(f"{root} needs one sub-folder per class and at least two classes (found: {found})")
        empty = [name for name, files in classes.items() if not files]
        if empty:
            raise DataError(f"class folder(s) without images in {root}: {', '.join(empty)} "
                            f"(images are {', '.join(IMAGE_SUFFIXES)})")
        layout[split] = classes
    if len(layout) == 2 and set(layout["train"]) != set(layout["test"]):
        raise DataError(f"{folder}: train/ and test/ must have the same class folders "
                        f"({sorted(layout['train'])} vs {sorted(layout['test'])})")
    return layout


def _fingerprint(layout: dict, options: dict) -> str:
    digest = hashlib.sha256(f"v{CACHE_VERSION}:{sorted(options.items())}".encode())
    for split in sorted(layout):
        for name in sorted(layout[split]):
            for path in layout[split][name]:
                stat = path.stat()
                digest.update(f"{split}/{name}/{path.name}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:20]


def _decode(path: Path):
    """One image as an RGB uint8 array (H, W, 3), or the exception that stopped it."""
    from PIL import Image

    try:
        with Image.open(path) as image:
            return np.asarray(image.convert("RGB"))
    except Exception as exc:  # Pillow raises many types for broken files; the caller names the file
        return exc


def _resize(array: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.fromarray(array).resize((size[1], size[0]), Image.Resampling.BICUBIC))


def decode_folder(folder: Path, image_size: int | None = None, skip_bad: bool = False,
                  threads: int = 2) -> dict[str, np.ndarray]:
    """Decode an image folder into arrays (no caching; see :func:`load_image_folder`).

    Returns
    -------
    dict
        ``x`` (N, H, W, C) uint8 with C = 1 when every image is grey, ``y`` (N,), ``split`` (N,)
        0 train / 1 test / 2 unsplit, ``class_names`` (K,), ``skipped`` (number of unreadable files)
        and ``resized`` (how many images had another size).
    """
    layout = folder_layout(folder)
    class_names = sorted(next(iter(layout.values())))
    split_code = {"train": 0, "test": 1, "all": 2}
    paths, labels, splits = [], [], []
    for split, classes in layout.items():
        for index, name in enumerate(class_names):
            paths += classes[name]
            labels += [index] * len(classes[name])
            splits += [split_code[split]] * len(classes[name])
    # Pillow releases the GIL while it decodes; one large chunk per thread keeps the pool's overhead
    # (a future per tiny image) from eating the gain
    size = max(1, -(-len(paths) // threads))
    chunks = [paths[start:start + size] for start in range(0, len(paths), size)]
    with ThreadPoolExecutor(max_workers=threads) as pool:
        decoded = [result for chunk in pool.map(lambda part: [_decode(p) for p in part], chunks) for result in chunk]
    bad = [(path, result) for path, result in zip(paths, decoded) if isinstance(result, Exception)]
    if bad and not skip_bad:
        path, error = bad[0]
        raise DataError(f"cannot read image {path}: {error} ({len(bad)} unreadable file(s) in {folder}; "
                        "skip them with the skip-bad option)")
    keep = [i for i, result in enumerate(decoded) if not isinstance(result, Exception)]
    if not keep:
        raise DataError(f"no readable images in {folder}")
    sizes = Counter(decoded[i].shape[:2] for i in keep)
    target = (int(image_size), int(image_size)) if image_size else sizes.most_common(1)[0][0]
    resized = sum(count for size, count in sizes.items() if size != target)
    x = np.stack([decoded[i] if decoded[i].shape[:2] == target else _resize(decoded[i], target) for i in keep])
    grey = bool((x[..., 0] == x[..., 1]).all() and (x[..., 1] == x[..., 2]).all())
    return {"x": x[..., :1] if grey else x, "y": np.asarray(labels, np.int64)[keep],
            "split": np.asarray(splits, np.int8)[keep], "class_names": np.asarray(class_names),
            "skipped": np.asarray(len(bad)), "resized": np.asarray(resized)}


def _cache_dir() -> Path:
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit).expanduser()
    return Path(os.environ.get("PROBE_WORKSPACE") or "workspace").expanduser() / "cache" / "data"


def load_image_folder(folder: Path, image_size: int | None = None, skip_bad: bool = False) -> dict[str, np.ndarray]:
    """:func:`decode_folder` through the on-disk cache (keyed by the folder's fingerprint and the options)."""
    options = {"size": image_size or 0, "skip_bad": bool(skip_bad)}
    key = _fingerprint(folder_layout(folder), options)
    path = _cache_dir() / f"{folder.name}-{key}.npz"
    if path.is_file():
        with np.load(path) as cached:
            return {name: cached[name] for name in cached.files}
    arrays = decode_folder(folder, image_size, skip_bad)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(".tmp.npz")
        np.savez(temporary, **arrays)
        os.replace(temporary, path)
    except OSError:
        pass  # a read-only workspace only loses the cache
    return arrays


# --- arrays --------------------------------------------------------------------------------

def _as_images(array: np.ndarray, what: str, path: Path) -> np.ndarray:
    """(N, H, W) or (N, H, W, C) uint8 or float in [0, 1] -> (N, H, W, C) uint8."""
    if array.ndim == 3:
        array = array[..., None]
    if array.ndim != 4 or array.shape[-1] not in (1, 3):
        raise DataError(f"{path}: {what} must have shape (N, H, W) or (N, H, W, C) with C = 1 or 3, "
                        f"got {array.shape}")
    if array.dtype == np.uint8:
        return array
    if np.issubdtype(array.dtype, np.floating):
        if not np.isfinite(array).all() or array.min() < 0 or array.max() > 1:
            raise DataError(f"{path}: float {what} must be finite and in [0, 1]")
        return np.round(array * 255).astype(np.uint8)
    raise DataError(f"{path}: {what} must be uint8 or float in [0, 1], got {array.dtype}")


def _as_labels(array: np.ndarray, count: int, what: str, path: Path) -> np.ndarray:
    if array.ndim != 1 or not np.issubdtype(array.dtype, np.integer):
        raise DataError(f"{path}: {what} must be a 1-d integer array of class indices")
    if len(array) != count:
        raise DataError(f"{path}: {what} has {len(array)} labels but there are {count} images")
    if len(array) and array.min() < 0:
        raise DataError(f"{path}: {what} has negative class indices")
    return array.astype(np.int64)


def _read_array(archive, key: str, path: Path) -> np.ndarray:
    """One array of an ``.npz``; an array of Python objects (which only unpickling could read) is refused."""
    try:
        return archive[key]
    except ValueError as exc:  # numpy's refusal of object arrays under allow_pickle=False
        raise DataError(f"{path.name}: array {key!r} holds Python objects, which are never unpickled; save it as "
                        f"numbers (x, y) or strings (class_names)") from exc


def load_arrays(path: Path) -> dict[str, np.ndarray]:
    """Read and check a ``.npz``: ``x``, ``y``, optionally ``class_names``, ``x_test`` and ``y_test``.

    Returns the same keys as :func:`decode_folder` (``split`` 0/1 when a test split is given, else 2).
    """
    if not path.is_file():
        raise DataError(f"array file {path} does not exist")
    try:
        archive = np.load(path, allow_pickle=False)
    except Exception as exc:
        raise DataError(f"cannot read {path} as .npz: {exc}") from exc
    with archive:
        missing = [key for key in ("x", "y") if key not in archive.files]
        if missing:
            raise DataError(f"{path} needs arrays x and y (missing: {', '.join(missing)}; has: "
                            f"{', '.join(archive.files)})")
        x = _as_images(_read_array(archive, "x", path), "x", path)
        y = _as_labels(_read_array(archive, "y", path), len(x), "y", path)
        parts_x, parts_y, split = [x], [y], [np.full(len(x), 2, np.int8)]
        if ("x_test" in archive.files) != ("y_test" in archive.files):
            raise DataError(f"{path}: give x_test and y_test together")
        if "x_test" in archive.files:
            x_test = _as_images(_read_array(archive, "x_test", path), "x_test", path)
            if x_test.shape[1:] != x.shape[1:]:
                raise DataError(f"{path}: x_test images {x_test.shape[1:]} differ from x images {x.shape[1:]}")
            parts_x.append(x_test)
            parts_y.append(_as_labels(_read_array(archive, "y_test", path), len(x_test), "y_test", path))
            split = [np.zeros(len(x), np.int8), np.ones(len(x_test), np.int8)]
        labels = np.concatenate(parts_y)
        count = int(labels.max()) + 1 if len(labels) else 0
        if "class_names" in archive.files:
            names = [str(n) for n in _read_array(archive, "class_names", path)]
            if len(names) < count:
                raise DataError(f"{path}: labels go up to {count - 1} but class_names has {len(names)} names")
        else:
            names = [str(i) for i in range(count)]
    if len(np.unique(labels)) < 2:
        raise DataError(f"{path}: a data set needs at least two classes; all labels are {labels[0] if len(labels) else 'absent'}")
    return {"x": np.concatenate(parts_x), "y": labels, "split": np.concatenate(split),
            "class_names": np.asarray(names), "skipped": np.asarray(0), "resized": np.asarray(0)}


@functools.lru_cache(maxsize=4)
def load_file_arrays(reference: str) -> dict[str, np.ndarray]:
    """The arrays behind a file reference, kept for the process."""
    scheme, path, options = parse_reference(reference)
    if scheme == ARRAYS_SCHEME:
        return load_arrays(path)
    size_text = options.get("size")
    size = int(size_text) if size_text is not None and size_text.isdigit() else size_text
    if size is not None:
        check_image_size(size)
    return load_image_folder(path, size, options.get("skip_bad") == "1")
