"""Simulated annotators: three noisy clicks per keypoint, with outliers and visibility disagreements."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class ClickNoise:
    """The injected click noise (recorded in manifest.json)."""

    n_annotators: int = 3
    sigma_frac: float = 0.01  # Gaussian sigma per axis, as a fraction of the longer image side
    outlier_rate: float = 0.03  # fraction of visible clicks displaced grossly
    outlier_min_frac: float = 0.05
    outlier_max_frac: float = 0.20
    visibility_flip_rate: float = 0.03  # per keypoint: one annotator disagrees on visibility

    def to_dict(self) -> dict:
        """Plain dict for the manifest."""
        return asdict(self)


def simulate_clicks(
    image_id: str,
    keypoints: list[str],
    uv: np.ndarray,
    visible: np.ndarray,
    width: int,
    height: int,
    rng: np.random.Generator,
    noise: ClickNoise = ClickNoise(),
) -> pd.DataFrame:
    """RawClickSchema rows for one image, one per (keypoint, annotator), with noise and outliers."""
    k, a = len(keypoints), noise.n_annotators
    long_side = max(width, height)
    vis = np.repeat(np.asarray(visible, bool)[:, None], a, axis=1)
    flip_kp = rng.random(k) < noise.visibility_flip_rate
    flip_who = rng.integers(0, a, k)
    vis[np.flatnonzero(flip_kp), flip_who[flip_kp]] ^= True
    xy = np.repeat(np.asarray(uv, float)[:, None, :], a, axis=1)
    xy = xy + rng.normal(0.0, noise.sigma_frac * long_side, (k, a, 2))
    out = rng.random((k, a)) < noise.outlier_rate
    ang = rng.uniform(0, 2 * np.pi, (k, a))
    dist = rng.uniform(noise.outlier_min_frac, noise.outlier_max_frac, (k, a)) * long_side
    xy += (out * dist)[..., None] * np.stack([np.cos(ang), np.sin(ang)], -1)
    xy[..., 0] = xy[..., 0].clip(0, width - 1e-3)
    xy[..., 1] = xy[..., 1].clip(0, height - 1e-3)
    xy[~vis] = np.nan
    return pd.DataFrame(
        {
            "image_id": image_id,
            "keypoint": np.repeat(np.asarray(keypoints, dtype=object), a),
            "annotator": np.tile(np.arange(a), k),
            "x": xy[..., 0].ravel(),
            "y": xy[..., 1].ravel(),
            "visible": vis.ravel(),
        }
    )
