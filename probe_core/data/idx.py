"""Reader and writer for the IDX format of MNIST-family data sets.

IDX: two zero bytes, a type code, the number of dimensions, then one
big-endian uint32 per dimension and the data, row-major. Files may be gzip
compressed; the reader looks at the magic bytes, not the file name.
"""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np

from probe_core.errors import DataError

_DTYPES = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
_CODES = {dtype: code for code, dtype in _DTYPES.items()}


def read_idx(path: str | Path, expected_ndim: int | None = None) -> np.ndarray:
    """Read one IDX file (raw or gzip-compressed).

    Parameters
    ----------
    path : str or Path
        The file.
    expected_ndim : int, optional
        If given, the number of dimensions the file must have (3 for images,
        1 for labels).

    Returns
    -------
    numpy.ndarray
        The array with the shape stored in the file.

    Raises
    ------
    DataError
        If the file is missing, truncated, or not IDX; the message names the file.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise DataError(f"{path}: corrupt gzip data ({exc})") from exc
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _DTYPES:
        raise DataError(
            f"{path}: not an IDX file (expected magic bytes 00 00 <type> <ndim>, "
            f"got {raw[:4].hex(' ') or 'an empty file'})"
        )
    dtype = _DTYPES[raw[2]]
    ndim = raw[3]
    if expected_ndim is not None and ndim != expected_ndim:
        kind = {1: "labels (1 dimension)", 3: "images (3 dimensions: N, rows, cols)"}
        raise DataError(
            f"{path}: expected {kind.get(expected_ndim, f'{expected_ndim} dimensions')}, "
            f"file has {ndim} dimension(s)"
        )
    header_end = 4 + 4 * ndim
    if len(raw) < header_end:
        raise DataError(f"{path}: truncated header")
    shape = struct.unpack(f">{ndim}I", raw[4:header_end])
    count = int(np.prod(shape, dtype=np.int64))
    expected_bytes = count * dtype.itemsize
    actual_bytes = len(raw) - header_end
    if actual_bytes != expected_bytes:
        raise DataError(
            f"{path}: header says shape {tuple(shape)} ({expected_bytes} data bytes) "
            f"but the file has {actual_bytes} data bytes"
        )
    data = np.frombuffer(raw, dtype=dtype, count=count, offset=header_end)
    return data.reshape(shape).astype(dtype.newbyteorder("="), copy=True)


def write_idx(path: str | Path, array: np.ndarray, compress: bool | None = None) -> Path:
    """Write an array as an IDX file.

    Parameters
    ----------
    path : str or Path
        Destination; gzip-compressed when ``compress`` is true or, by default,
        when the name ends in ``.gz``.
    array : numpy.ndarray
        uint8, int8, int16, int32, float32 or float64 data.
    compress : bool, optional
        Force compression on or off.

    Returns
    -------
    Path
        The written path.
    """
    path = Path(path)
    array = np.asarray(array)
    big_endian = array.dtype.newbyteorder(">") if array.dtype.itemsize > 1 else array.dtype
    if big_endian not in _CODES:
        raise ValueError(f"IDX cannot store dtype {array.dtype}")
    header = bytes([0, 0, _CODES[big_endian], array.ndim]) + struct.pack(
        f">{array.ndim}I", *array.shape
    )
    payload = header + array.astype(big_endian).tobytes()
    if compress if compress is not None else path.suffix == ".gz":
        payload = gzip.compress(payload)
    path.write_bytes(payload)
    return path
