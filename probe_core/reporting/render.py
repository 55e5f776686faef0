"""Turn image tensors into pictures: grids as uint8 arrays and PNG bytes."""

from __future__ import annotations

import io

import numpy as np
import torch


def image_grid(images: torch.Tensor | np.ndarray, columns: int = 8, scale: int = 1, padding: int = 1,
               background: float = 1.0) -> np.ndarray:
    """Tile images into one RGB picture.

    Parameters
    ----------
    images : tensor or array
        Shape (N, C, H, W) with C = 1 or 3, values in [0, 1].
    columns : int
        Images per row.
    scale : int
        Nearest-neighbour upscaling factor (8x8 digits need about 8).
    padding : int
        Pixels between tiles, before scaling.

    Returns
    -------
    numpy.ndarray
        uint8 array of shape (rows * (H + padding) * scale, columns * (W + padding) * scale, 3).
    """
    array = images.detach().cpu().numpy() if isinstance(images, torch.Tensor) else np.asarray(images)
    if array.ndim != 4 or array.shape[1] not in (1, 3):
        raise ValueError(f"image_grid wants (N, C, H, W) with C in (1, 3), got shape {array.shape}")
    count, channels, height, width = array.shape
    columns = max(1, min(columns, count))
    rows = max(1, -(-count // columns))
    grid = np.full((rows * (height + padding), columns * (width + padding), 3), background, dtype=np.float32)
    for index in range(count):
        row, column = divmod(index, columns)
        tile = np.transpose(array[index], (1, 2, 0))
        y, x = row * (height + padding), column * (width + padding)
        grid[y:y + height, x:x + width] = np.repeat(tile, 3, axis=2) if channels == 1 else tile
    grid = np.clip(grid, 0.0, 1.0)
    if scale > 1:
        grid = grid.repeat(scale, axis=0).repeat(scale, axis=1)
    return (grid * 255).round().astype(np.uint8)


def png_bytes(picture: np.ndarray) -> bytes:
    """Encode an (H, W, 3) uint8 array as PNG."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(picture).save(buffer, format="PNG")
    return buffer.getvalue()


def upscale_for_display(height: int, target: int = 64) -> int:
    """A nearest-neighbour factor that makes an image of ``height`` pixels about ``target`` pixels tall (never
    smaller)."""
    return max(1, target // max(height, 1))
