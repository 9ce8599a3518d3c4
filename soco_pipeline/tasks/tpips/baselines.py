"""Aspect-agnostic baselines and an aspect-distance oracle as pair similarities `sim(a, b, aspects) -> (M,)`,
higher = more similar (docs/tpips.md, "Models")."""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
import pandas as pd

from .aspects import PAIRS, aspect_distance
from .config import TpipsConfig
from .features import TpipsFeatures

SimFn = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


def _positions(frame: pd.DataFrame, columns: list[str], ids: list[str], what: str) -> np.ndarray:
    pos = {k: i for i, k in enumerate(ids)}
    try:
        rows = [[pos[r] for r in row] for row in frame[columns].to_numpy()]
    except KeyError as e:
        raise KeyError(f"{what} image {e.args[0]!r} is missing from the image table") from None
    return np.array(rows, np.int64).reshape(-1, len(columns))


def ooo_positions(ooo: pd.DataFrame, ids: list[str]) -> np.ndarray:
    """(N, 3) row positions of each OOO row's three images in `ids`."""
    return _positions(ooo, ["image_0", "image_1", "image_2"], ids, "OOO")


def afc_positions(afc: pd.DataFrame, ids: list[str]) -> np.ndarray:
    """(N, 3) row positions of each 2AFC row's ref, x0, x1 in `ids`."""
    return _positions(afc, ["ref", "x0", "x1"], ids, "2AFC")


def ooo_scores(sim: SimFn, pos: np.ndarray, aspects: np.ndarray) -> np.ndarray:
    """(N, 3): column k = similarity of the pair excluding image k."""
    return np.column_stack([sim(pos[:, i], pos[:, j], aspects) for i, j in PAIRS])


def afc_scores(sim: SimFn, pos: np.ndarray, aspects: np.ndarray) -> np.ndarray:
    """(N, 2): similarity of x0 and of x1 to the reference."""
    return np.column_stack([sim(pos[:, 0], pos[:, 1], aspects), sim(pos[:, 0], pos[:, 2], aspects)])


def random_sim(seed: int) -> SimFn:
    """Seeded uniform scores: chance agreement."""
    rng = np.random.default_rng([int(seed), 0xDA7])
    return lambda a, b, c: rng.random(len(a))


def constant_choice(n: int, n_options: int, position: int = 0) -> np.ndarray:
    """(n, n_options) scores of a chooser that always picks the option at `position` (one-hot)."""
    if not 0 <= position < n_options:
        raise ValueError(f"position {position} is not one of the {n_options} options")
    out = np.zeros((n, n_options))
    out[:, position] = 1.0
    return out


def l2_sim(pixels: np.ndarray) -> SimFn:
    """Minus the mean squared difference of pixels (N, H, W, 3) in [0, 1]."""
    flat = pixels.reshape(len(pixels), -1).astype(np.float32) / 255.0
    return lambda a, b, c: -((flat[a] - flat[b]) ** 2).mean(1)


def ssim_sim(pixels: np.ndarray) -> SimFn:
    """scikit-image SSIM of each pair (colour, data range 255)."""
    from skimage.metrics import structural_similarity

    ssim = functools.partial(structural_similarity, channel_axis=-1, data_range=255)
    return lambda a, b, c: np.array([ssim(pixels[i], pixels[j]) for i, j in zip(a, b, strict=True)])


def lpips_style_sim(feats: TpipsFeatures) -> SimFn:
    """Minus Σ_ℓ mean_t ‖φ_ℓ(x)_t − φ_ℓ(y)_t‖² over unit-normalised tokens (uncalibrated LPIPS)."""
    layers = [f / (np.linalg.norm(f, axis=2, keepdims=True) + 1e-8) for f in feats.layers]
    return lambda a, b, c: -sum(((f[a] - f[b]) ** 2).sum(2).mean(1) for f in layers)


def cosine_sim(feats: TpipsFeatures) -> SimFn:
    """Cosine of the global embeddings."""
    g = feats.globals_
    return lambda a, b, c: (g[a] * g[b]).sum(1)


def oracle_sim(values: pd.DataFrame, ids: list[str], cfg: TpipsConfig) -> SimFn:
    """Minus the true aspect distance (knows every recorded aspect value)."""
    v = values.set_index("image_id").loc[ids].reset_index()

    def sim(a, b, c):
        out = np.empty(len(a))
        for aspect in np.unique(c):
            m = c == aspect
            out[m] = -aspect_distance(str(aspect), v.iloc[a[m]], v.iloc[b[m]], cfg)
        return out

    return sim
