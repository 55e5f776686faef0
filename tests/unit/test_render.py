"""Pictures for the pages and reports: tiling and the nearest-neighbour scale that makes images readable."""

import numpy as np
import pytest

from probe_core.reporting.render import image_grid, upscale_for_display


@pytest.mark.parametrize(("height", "target", "factor"), [(8, 64, 8), (28, 64, 2), (32, 64, 2), (64, 64, 1),
                                                          (128, 64, 1), (8, 128, 16), (32, 128, 4), (64, 128, 2)])
def test_images_are_scaled_up_to_about_the_target_height_and_never_down(height, target, factor):
    assert upscale_for_display(height, target) == factor
    assert height * factor <= max(target, height) < height * (factor + 1)


def test_a_grid_tiles_grey_and_colour_images_with_padding_then_scales_each_pixel_to_a_block():
    grey = np.zeros((3, 1, 2, 2), dtype=np.float32)
    grey[1, 0, 0, 1] = 1.0
    grid = image_grid(grey, columns=2, scale=3, padding=1)
    assert grid.shape == (2 * 3 * 3, 2 * 3 * 3, 3) and grid.dtype == np.uint8
    assert (grid[0:3, 3 * 3 + 3:3 * 3 + 6] == 255).all() and (grid[0:3, 9:12] == 0).all()  # image 2's lit pixel
    colour = np.stack([np.full((3, 2, 2), value, dtype=np.float32) for value in (0.0, 0.5)])
    colour[1, 0] = 1.0
    tiles = image_grid(colour, columns=1, padding=0)
    assert tiles.shape == (4, 2, 3) and tuple(tiles[2, 0]) == (255, 128, 128)
    with pytest.raises(ValueError, match="C in"):
        image_grid(np.zeros((1, 2, 4, 4)))
