"""Stand-ins for the Defuse paper's real-size data sets, built offline (nothing can be downloaded here).

- :func:`svhn_like`: colour 32x32 crops of house-number-like digits. Each image is one handwritten MNIST
  digit (the label) in a colour, centred with jitter, with parts of neighbouring digits at its sides, on a
  cluttered colour background (a gradient, rectangles, lines, noise) under uneven lighting and sometimes
  blurred, as SVHN's cropped digits are. They differ from SVHN: the digits are handwritten, not printed
  house numbers, and the backgrounds are drawn, not photographed.
- :func:`signs_like`: colour 64x64 (or 128x128) images of 43 sign classes in the manner of the German
  traffic signs: a red-rimmed circle, a red-rimmed triangle, a blue disc or square, a yellow diamond or an
  octagon, with a symbol (bars, arrows, dots, a cross, a number written with MNIST digits) that
  distinguishes classes of the same shape. Signs are scaled, shifted, slightly rotated, sometimes dark,
  blurred or partly occluded, on cluttered backgrounds. They differ from the German signs: the symbols are
  simpler and drawn, and the scenes are not photographs.

Both return uint8 arrays ``(N, H, W, 3)`` and labels ``(N,)`` ready for a ``.npz`` the tool reads
(``x``, ``y``, ``class_names``, ``x_test``, ``y_test``); see :func:`write_npz`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

SVHN_CLASSES = tuple(str(d) for d in range(10))


def _background(rng: np.random.Generator, size: int) -> Image.Image:
    """A cluttered colour background: a gradient between two colours, rectangles and lines, noise."""
    start, end = rng.integers(0, 256, 3), rng.integers(0, 256, 3)
    angle = rng.uniform(0, 2 * np.pi)
    ys, xs = np.mgrid[0:size, 0:size] / max(size - 1, 1)
    t = np.clip((np.cos(angle) * xs + np.sin(angle) * ys + 1) / 2, 0, 1)[..., None]
    pixels = (start * (1 - t) + end * t).astype(np.uint8)
    image = Image.fromarray(pixels, "RGB")
    draw = ImageDraw.Draw(image)
    for _ in range(int(rng.integers(2, 7))):
        x0, y0 = rng.integers(-size // 4, size, 2)
        w, h = rng.integers(size // 8, size // 2, 2)
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        if rng.random() < 0.6:
            draw.rectangle([int(x0), int(y0), int(x0 + w), int(y0 + h)], fill=colour)
        else:
            draw.line([int(x0), int(y0), int(x0 + w), int(y0 + h)], fill=colour, width=int(rng.integers(1, 4)))
    return image


def _lighting(pixels: np.ndarray, rng: np.random.Generator, dark: bool = False) -> np.ndarray:
    """Uneven illumination (a gradient of gain), overall brightness and sensor noise, on (H, W, 3) floats 0-255."""
    size = pixels.shape[0]
    ys, xs = np.mgrid[0:size, 0:size] / max(size - 1, 1)
    angle = rng.uniform(0, 2 * np.pi)
    gain = 1.0 + rng.uniform(0, 0.5) * (np.cos(angle) * (xs - 0.5) + np.sin(angle) * (ys - 0.5))
    brightness = rng.uniform(0.25, 0.5) if dark else rng.uniform(0.7, 1.2)
    noisy = pixels * gain[..., None] * brightness + rng.normal(0, rng.uniform(2, 10), pixels.shape)
    return np.clip(noisy, 0, 255)


def _contrasting_colour(rng: np.random.Generator, background: np.ndarray) -> np.ndarray:
    """A colour whose luminance differs from the background's mean by at least 90 (of 255)."""
    weights = np.array([0.299, 0.587, 0.114])
    mean = float(background.reshape(-1, 3).mean(0) @ weights)
    for _ in range(50):
        colour = rng.integers(0, 256, 3)
        if abs(float(colour @ weights) - mean) >= 90:
            return colour
    return np.array([255, 255, 255]) if mean < 128 else np.array([0, 0, 0])


def _paste_digit(canvas: np.ndarray, digit: np.ndarray, colour: np.ndarray, box: tuple[int, int, int, int]) -> None:
    """Blend a 28x28 grey digit (0-255) into ``canvas`` (H, W, 3 floats) at ``box`` = (x, y, w, h), in ``colour``."""
    x, y, w, h = box
    mask = np.asarray(Image.fromarray(digit).resize((max(w, 1), max(h, 1)), Image.BILINEAR), np.float64) / 255.0
    size = canvas.shape[0]
    x0, y0, x1, y1 = max(x, 0), max(y, 0), min(x + w, size), min(y + h, size)
    if x1 <= x0 or y1 <= y0:
        return
    part = mask[y0 - y:y1 - y, x0 - x:x1 - x, None]
    canvas[y0:y1, x0:x1] = canvas[y0:y1, x0:x1] * (1 - part) + colour * part


def svhn_like(digit_images: np.ndarray, digit_labels: np.ndarray, count: int, size: int = 32,
              seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """SVHN-like colour crops of one digit each (see the module docstring).

    Parameters
    ----------
    digit_images : np.ndarray
        Handwritten digits (M, 28, 28) uint8 (white on black, as MNIST).
    digit_labels : np.ndarray
        Their classes (M,).
    count : int
        Images to make.
    size : int
        Side of the square images (SVHN's is 32).
    seed : int

    Returns
    -------
    images : np.ndarray
        Shape (count, size, size, 3), uint8.
    labels : np.ndarray
        Shape (count,), the centre digit's class.
    """
    rng = np.random.default_rng(seed)
    images = np.empty((count, size, size, 3), np.uint8)
    labels = np.empty(count, np.int64)
    for i in range(count):
        background = np.asarray(_background(rng, size), np.float64)
        canvas = background.copy()
        colour = _contrasting_colour(rng, background)
        height = int(size * rng.uniform(0.65, 0.95))
        width = int(height * rng.uniform(0.7, 1.0))
        x = (size - width) // 2 + int(rng.integers(-size // 10, size // 10 + 1))
        y = (size - height) // 2 + int(rng.integers(-size // 12, size // 12 + 1))
        for side in (-1, 1):  # neighbours of a house number, cut by the crop
            if rng.random() < 0.6:
                neighbour = digit_images[rng.integers(len(digit_images))]
                gap = int(width * rng.uniform(0.75, 1.0))
                _paste_digit(canvas, neighbour, colour, (x + side * gap, y, width, height))
        chosen = int(rng.integers(len(digit_images)))
        _paste_digit(canvas, digit_images[chosen], colour, (x, y, width, height))
        pixels = _lighting(canvas, rng, dark=rng.random() < 0.1)
        image = Image.fromarray(pixels.astype(np.uint8), "RGB")
        if rng.random() < 0.4:
            image = image.filter(ImageFilter.GaussianBlur(rng.uniform(0.3, 1.0)))
        images[i], labels[i] = np.asarray(image), digit_labels[chosen]
    return images, labels


# --- signs ------------------------------------------------------------------------------------------------

RED, BLUE, YELLOW, WHITE, BLACK = (200, 20, 30), (20, 60, 190), (240, 200, 20), (245, 245, 245), (20, 20, 20)
GLYPHS = ("number", "bar", "bars", "cross", "dot", "dots", "arrow-up", "arrow-left", "arrow-right", "ring", "x",
          "chevron", "wave")
# (shape, rim colour, fill colour, symbol colour, glyphs): 9 + 10 + 8 + 5 + 4 + 4 + 3 = 43 classes
SIGN_FAMILIES = (
    ("circle", RED, WHITE, BLACK, tuple(f"number-{n}" for n in (10, 20, 30, 40, 50, 60, 70, 80, 90))),
    ("triangle", RED, WHITE, BLACK, ("bar", "bars", "cross", "dot", "dots", "arrow-left", "arrow-right", "ring",
                                     "chevron", "wave")),
    ("circle", BLUE, BLUE, WHITE, ("arrow-up", "arrow-left", "arrow-right", "dot", "dots", "ring", "bar", "chevron")),
    ("square", BLUE, BLUE, WHITE, ("arrow-up", "bar", "dot", "x", "ring")),
    ("diamond", YELLOW, YELLOW, BLACK, ("bar", "dot", "x", "ring")),
    ("octagon", RED, RED, WHITE, ("bar", "x", "dots", "wave")),
    ("triangle-down", RED, WHITE, BLACK, ("dot", "bar", "ring")),
)
SIGN_CLASSES = tuple(f"{shape}-{'red' if rim == RED else 'blue' if rim == BLUE else 'yellow'}-{glyph}"
                     for shape, rim, _fill, _ink, glyphs in SIGN_FAMILIES for glyph in glyphs)


def _shape_points(shape: str, box: float, centre: float) -> list[tuple[float, float]]:
    r = box / 2
    if shape == "triangle":
        return [(centre, centre - r), (centre + r, centre + r * 0.75), (centre - r, centre + r * 0.75)]
    if shape == "triangle-down":
        return [(centre - r, centre - r * 0.75), (centre + r, centre - r * 0.75), (centre, centre + r)]
    if shape == "diamond":
        return [(centre, centre - r), (centre + r, centre), (centre, centre + r), (centre - r, centre)]
    if shape == "octagon":
        return [(centre + r * np.cos(a), centre + r * np.sin(a)) for a in np.pi / 8 + np.arange(8) * np.pi / 4]
    return [(centre - r, centre - r), (centre + r, centre - r), (centre + r, centre + r), (centre - r, centre + r)]


def _draw_glyph(draw: ImageDraw.ImageDraw, image: Image.Image, glyph: str, centre: float, r: float, ink,
                digits_by_class: dict, rng: np.random.Generator) -> None:
    w = max(2, int(r * 0.18))
    c = centre
    if glyph.startswith("number-"):
        number = glyph.split("-")[1]
        digit_w, digit_h = int(r * 0.55), int(r * 0.95)
        layer = np.zeros((image.height, image.width), np.uint8)
        for k, character in enumerate(number):
            pool = digits_by_class[int(character)]
            digit = Image.fromarray(pool[rng.integers(len(pool))]).resize((digit_w, digit_h), Image.BILINEAR)
            left = int(c - digit_w + k * digit_w * 0.95)
            region = np.asarray(digit)
            top = int(c - digit_h / 2)
            layer[top:top + digit_h, left:left + digit_w] = np.maximum(layer[top:top + digit_h, left:left + digit_w],
                                                                      region[:layer.shape[0] - top, :layer.shape[1] - left])
        image.paste(Image.new("RGB", image.size, ink), mask=Image.fromarray(layer))
    elif glyph == "bar":
        draw.rectangle([c - r * 0.55, c - w, c + r * 0.55, c + w], fill=ink)
    elif glyph == "bars":
        for dy in (-r * 0.3, r * 0.3):
            draw.rectangle([c - r * 0.5, c + dy - w * 0.7, c + r * 0.5, c + dy + w * 0.7], fill=ink)
    elif glyph == "cross":
        draw.rectangle([c - r * 0.5, c - w, c + r * 0.5, c + w], fill=ink)
        draw.rectangle([c - w, c - r * 0.5, c + w, c + r * 0.5], fill=ink)
    elif glyph == "x":
        draw.line([c - r * 0.45, c - r * 0.45, c + r * 0.45, c + r * 0.45], fill=ink, width=2 * w)
        draw.line([c - r * 0.45, c + r * 0.45, c + r * 0.45, c - r * 0.45], fill=ink, width=2 * w)
    elif glyph == "dot":
        draw.ellipse([c - r * 0.22, c - r * 0.22, c + r * 0.22, c + r * 0.22], fill=ink)
    elif glyph == "dots":
        for dx in (-r * 0.35, 0, r * 0.35):
            draw.ellipse([c + dx - r * 0.12, c - r * 0.12, c + dx + r * 0.12, c + r * 0.12], fill=ink)
    elif glyph == "ring":
        draw.ellipse([c - r * 0.4, c - r * 0.4, c + r * 0.4, c + r * 0.4], outline=ink, width=w)
    elif glyph == "chevron":
        draw.line([c - r * 0.4, c + r * 0.2, c, c - r * 0.25, c + r * 0.4, c + r * 0.2], fill=ink, width=w)
    elif glyph == "wave":
        points = [(c - r * 0.5 + t * r, c + np.sin(t * 2 * np.pi) * r * 0.2) for t in np.linspace(0, 1, 12)]
        draw.line(points, fill=ink, width=w)
    else:  # arrows
        direction = {"arrow-up": (0, -1), "arrow-left": (-1, 0), "arrow-right": (1, 0)}[glyph]
        dx, dy = direction
        tail = (c - dx * r * 0.5, c - dy * r * 0.5)
        head = (c + dx * r * 0.5, c + dy * r * 0.5)
        draw.line([tail, head], fill=ink, width=w)
        side = (-dy, dx)
        draw.polygon([(head[0] + dx * r * 0.15, head[1] + dy * r * 0.15),
                      (head[0] - dx * r * 0.2 + side[0] * r * 0.25, head[1] - dy * r * 0.2 + side[1] * r * 0.25),
                      (head[0] - dx * r * 0.2 - side[0] * r * 0.25, head[1] - dy * r * 0.2 - side[1] * r * 0.25)],
                     fill=ink)


def _sign(family: tuple, glyph: str, digits_by_class: dict, rng: np.random.Generator, canvas: int) -> Image.Image:
    """One sign on a transparent square of side ``canvas`` (RGBA)."""
    shape, rim, fill, ink = family[:4]
    image = Image.new("RGBA", (canvas, canvas), (0, 0, 0, 0))
    draw = ImageDraw.Draw(image)
    centre, box = canvas / 2, canvas * 0.96
    if shape == "circle":
        draw.ellipse([centre - box / 2, centre - box / 2, centre + box / 2, centre + box / 2], fill=rim)
        inner = box * (0.78 if fill != rim else 0.92)
        draw.ellipse([centre - inner / 2, centre - inner / 2, centre + inner / 2, centre + inner / 2], fill=fill)
    else:
        draw.polygon(_shape_points(shape, box, centre), fill=rim)
        inner = box * (0.7 if fill != rim else 0.9)
        draw.polygon(_shape_points(shape, inner, centre if "triangle" not in shape else
                                   centre + (box - inner) * (0.08 if shape == "triangle" else -0.08)), fill=fill)
    glyph_layer = Image.new("RGB", (canvas, canvas), (0, 0, 0))
    _draw_glyph(ImageDraw.Draw(glyph_layer), glyph_layer, glyph, centre + (canvas * 0.06 if shape == "triangle"
                                                                            else 0), canvas * 0.3,
                (255, 255, 255), digits_by_class, rng)
    mask = glyph_layer.convert("L")
    image.paste(Image.new("RGBA", (canvas, canvas), (*ink, 255)), mask=mask)
    return image


def signs_like(digit_images: np.ndarray, digit_labels: np.ndarray, per_class: int, size: int = 64,
               seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """German-signs-like colour images of the 43 :data:`SIGN_CLASSES` (see the module docstring).

    Parameters
    ----------
    digit_images, digit_labels : np.ndarray
        MNIST-style digits (M, 28, 28) uint8 and their classes, for the numbers on the speed-limit-like signs.
    per_class : int
        Images per class.
    size : int
        Side of the square images (64, or 128 as the paper resized the German signs).
    seed : int

    Returns
    -------
    images : np.ndarray
        Shape (43 * per_class, size, size, 3), uint8, classes interleaved.
    labels : np.ndarray
        Shape (43 * per_class,).
    """
    rng = np.random.default_rng(seed)
    digits_by_class = {d: digit_images[digit_labels == d] for d in range(10)}
    classes = [(family, glyph) for family in SIGN_FAMILIES for glyph in family[4]]
    count = len(classes) * per_class
    images = np.empty((count, size, size, 3), np.uint8)
    labels = np.tile(np.arange(len(classes)), per_class)
    for i, label in enumerate(labels):
        family, glyph = classes[label]
        canvas = 2 * size
        background = _background(rng, canvas)
        sign_side = int(canvas * rng.uniform(0.5, 0.85))
        sign = _sign(family, glyph, digits_by_class, rng, 2 * size).resize((sign_side, sign_side), Image.LANCZOS)
        sign = sign.rotate(float(rng.uniform(-10, 10)), resample=Image.BILINEAR)
        x = int((canvas - sign_side) / 2 + rng.integers(-canvas // 10, canvas // 10 + 1))
        y = int((canvas - sign_side) / 2 + rng.integers(-canvas // 10, canvas // 10 + 1))
        background.paste(sign, (x, y), sign)
        if rng.random() < 0.15:  # a branch or a pole in front of the sign
            left = x + int(rng.integers(0, sign_side))
            ImageDraw.Draw(background).rectangle([left, 0, left + canvas // 12, canvas],
                                                 fill=tuple(int(c) for c in rng.integers(0, 120, 3)))
        small = background.resize((size, size), Image.LANCZOS)
        pixels = _lighting(np.asarray(small, np.float64), rng, dark=rng.random() < 0.2)
        image = Image.fromarray(pixels.astype(np.uint8), "RGB")
        if rng.random() < 0.3:
            image = image.filter(ImageFilter.GaussianBlur(rng.uniform(0.3, 1.2)))
        images[i] = np.asarray(image)
    return images, labels


def write_npz(path: str | Path, train: tuple[np.ndarray, np.ndarray], test: tuple[np.ndarray, np.ndarray],
              class_names: tuple[str, ...]) -> Path:
    """A ``.npz`` the tool reads as a data set: ``x``, ``y``, ``x_test``, ``y_test`` and ``class_names``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, x=train[0], y=train[1], x_test=test[0], y_test=test[1],
                        class_names=np.array(class_names))
    return path
