"""Keypoint geometry of the official input protocol (white padding to a max(W, H) square at the top-left, then
S x S); a foundation module that imports no stage."""

from __future__ import annotations

import numpy as np


def scale_keypoints(xy: np.ndarray, sizes: np.ndarray, input_size: int) -> np.ndarray:
    """Map keypoints in original pixels (`xy` N x 2; `sizes` N x 2 or (2,) [W, H]) to [0, 1) coordinates of
    the padded, resized square, as the official script does on purpose: int, scale by S / max(W, H), int, / S."""
    xy = np.asarray(xy, dtype=np.float64)
    sizes = np.broadcast_to(np.asarray(sizes, dtype=np.float64), xy.shape)
    side = sizes.max(axis=1, keepdims=True)
    # np.trunc is Python's int() for the non-negative coordinates the protocol sees.
    scaled = np.trunc(np.trunc(xy) * (input_size / side))
    return scaled / input_size


def unit_to_pixels(uv: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Map [0, 1) padded-square coordinates back to original-image pixels ([x, y])."""
    uv = np.asarray(uv, dtype=np.float64)
    sizes = np.broadcast_to(np.asarray(sizes, dtype=np.float64), uv.shape)
    return uv * sizes.max(axis=1, keepdims=True)
