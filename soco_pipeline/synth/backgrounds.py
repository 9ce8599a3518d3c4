"""Backgrounds: random crops of the colour photographs bundled with scikit-image (no download)."""

from __future__ import annotations

import functools

import numpy as np
from PIL import Image

# Colour photographs shipped inside the scikit-image wheel (none needs the pooch download cache).
PHOTOS = (
    "astronaut",
    "coffee",
    "chelsea",
    "rocket",
    "hubble_deep_field",
    "motorcycle_left",
    "motorcycle_right",
)


@functools.lru_cache(maxsize=1)
def photos() -> tuple[np.ndarray, ...]:
    """The bundled photographs as H x W x 3 uint8 arrays (loaded once per process)."""
    from skimage import data

    out = []
    for name in PHOTOS:
        if name.startswith("motorcycle"):
            left, right, _ = data.stereo_motorcycle()
            img = left if name.endswith("left") else right
        else:
            img = getattr(data, name)()
        out.append(np.ascontiguousarray(img[..., :3]).astype(np.uint8))
    return tuple(out)


def background(width: int, height: int, rng: np.random.Generator) -> np.ndarray:
    """A random crop (random photo, scale, position, mirror) resized to width x height."""
    imgs = photos()
    img = imgs[int(rng.integers(len(imgs)))]
    ph, pw = img.shape[:2]
    aspect = width / height
    max_w = min(pw, ph * aspect)
    cw = max_w * rng.uniform(0.45, 1.0)
    ch = cw / aspect
    x0 = rng.uniform(0, pw - cw)
    y0 = rng.uniform(0, ph - ch)
    crop = Image.fromarray(img).resize((width, height), Image.BILINEAR, box=(x0, y0, x0 + cw, y0 + ch))
    out = np.asarray(crop)
    if rng.random() < 0.5:
        out = out[:, ::-1]
    return np.ascontiguousarray(out)
