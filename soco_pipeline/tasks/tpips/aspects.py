"""The aspect vocabulary, the per-image aspect values a render records, and per-aspect perceptual distances
in [0, 1] (our scales: docs/tpips.md, "Data")."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .config import TpipsConfig

OBJECT_ASPECTS = ("colour", "pose", "background", "lighting", "size", "shape", "count", "texture")
N_PHOTOS = 7  # scikit-image colour photographs in soco_pipeline.synth.backgrounds.PHOTOS

# Per-image value columns (one row per image); degradations are 0 on clean renders.
VALUE_COLUMNS = {
    "hue": float,
    "azimuth_deg": float,
    "background_id": int,
    "light_dir_deg": float,
    "warmth": float,
    "area": float,
    "shape": str,
    "count": int,
    "texture": str,
    "blur_sigma": float,
    "jpeg_quality": int,
    "transfer": float,
}


def _circ(a: np.ndarray, b: np.ndarray, period: float) -> np.ndarray:
    d = np.abs(np.asarray(a, float) - np.asarray(b, float)) % period
    return np.minimum(d, period - d)


def check_aspect(aspect: str, cfg: TpipsConfig) -> str:
    """The aspect itself when it is in the vocabulary; a clear error otherwise (empty or unknown)."""
    if not isinstance(aspect, str) or not aspect.strip():
        raise ValueError(
            "empty aspect: every (triplet, aspect) needs an aspect text such as 'colour' or 'overall'"
        )
    if aspect not in cfg.aspects:
        raise ValueError(
            f"aspect {aspect!r} is not in the vocabulary {cfg.aspects} (assets/tpips.yaml 'aspects')"
        )
    return aspect


def aspect_distance(aspect: str, a: pd.DataFrame, b: pd.DataFrame, cfg: TpipsConfig) -> np.ndarray:
    """Perceptual distance in [0, 1] of the aspect between aligned rows of two value tables."""
    check_aspect(aspect, cfg)
    if aspect == "overall":
        w = cfg.overall_weights
        total = sum(w.values())
        d = (
            sum(w[k] * (_pattern(a, b) if k == "texture" else aspect_distance(k, a, b, cfg)) for k in w)
            / total
        )
        return np.clip(d + _degradation(a, b, cfg), 0.0, 1.0)
    if aspect == "colour":
        hue = 2.0 * _circ(a.hue.to_numpy(), b.hue.to_numpy(), 1.0)
        tr = np.abs(a.transfer.to_numpy(float) - b.transfer.to_numpy(float))
        return np.clip(hue + 0.8 * tr, 0.0, 1.0)
    if aspect == "pose":
        return _circ(a.azimuth_deg.to_numpy(), b.azimuth_deg.to_numpy(), 360.0) / 180.0
    if aspect == "background":
        ia, ib = a.background_id.to_numpy(), b.background_id.to_numpy()
        return np.where(ia == ib, 0.0, np.where(ia % N_PHOTOS == ib % N_PHOTOS, 0.5, 1.0))
    if aspect == "lighting":
        direction = _circ(a.light_dir_deg.to_numpy(), b.light_dir_deg.to_numpy(), 360.0) / 180.0
        warmth = np.abs(a.warmth.to_numpy(float) - b.warmth.to_numpy(float)) / 2.0
        return 0.5 * direction + 0.5 * warmth
    if aspect == "size":
        lo, hi = cfg.scene.size_range
        return np.clip(
            np.abs(np.log(a.area.to_numpy(float) / b.area.to_numpy(float))) / np.log(hi / lo), 0, 1
        )
    if aspect == "shape":
        return (a["shape"].to_numpy() != b["shape"].to_numpy()).astype(float)
    if aspect == "texture":
        return np.clip(_pattern(a, b) + _degradation(a, b, cfg), 0.0, 1.0)
    if aspect == "count":
        return np.abs(a["count"].to_numpy(float) - b["count"].to_numpy(float)) / 2.0
    raise ValueError(f"aspect {aspect!r} has no distance")  # unreachable: check_aspect guards


def _pattern(a: pd.DataFrame, b: pd.DataFrame) -> np.ndarray:
    return (a.texture.to_numpy() != b.texture.to_numpy()).astype(float)


def _degradation(a: pd.DataFrame, b: pd.DataFrame, cfg: TpipsConfig) -> np.ndarray:
    """How much more one image is blurred or JPEG-compressed than the other (0 for clean renders)."""
    blur = np.abs(a.blur_sigma.to_numpy(float) - b.blur_sigma.to_numpy(float)) * cfg.afc.blur_per_sigma
    qa = np.where(a.jpeg_quality.to_numpy() > 0, a.jpeg_quality.to_numpy(), 100)
    qb = np.where(b.jpeg_quality.to_numpy() > 0, b.jpeg_quality.to_numpy(), 100)
    return blur + np.abs(qa - qb) / 100.0 * cfg.afc.jpeg_per_unit


PAIRS = ((1, 2), (0, 2), (0, 1))  # pair k excludes image k: s̄_k = s(pair k)


def triplet_distances(aspect: str, values: pd.DataFrame, images: np.ndarray, cfg: TpipsConfig) -> np.ndarray:
    """(N, 3) distances of the pairs excluding image k (column k), for triplets of image ids (N, 3)."""
    v = values.set_index("image_id")
    out = np.empty((len(images), 3))
    for k, (i, j) in enumerate(PAIRS):
        out[:, k] = aspect_distance(aspect, v.loc[images[:, i]], v.loc[images[:, j]], cfg)
    return out
