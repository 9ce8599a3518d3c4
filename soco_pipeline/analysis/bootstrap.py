"""Vectorized, seeded percentile bootstrap of Pearson r and Spearman rho over models: the resamples as one
count matrix, so every statistic is a few matrix products."""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np
from scipy.stats import rankdata


@dataclass(frozen=True)
class Interval:
    """A point estimate with its percentile bootstrap interval; `degenerate` resamples had no variance."""

    estimate: float
    low: float
    high: float
    degenerate: int = 0


def pair_seed(seed: int, *key: str) -> np.random.Generator:
    """A generator seeded by the config seed and a key (task, metric ...), independent of row order."""
    return np.random.default_rng([int(seed), *(zlib.crc32(str(k).encode()) for k in key)])


def resample_indices(n: int, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(n_resamples x n) model indices drawn with replacement."""
    return rng.integers(0, n, size=(n_resamples, n), dtype=np.int64)


def resample_counts(idx: np.ndarray, n: int | None = None) -> np.ndarray:
    """(n_resamples x n) float32 counts: how often each model appears in each resample row of `idx`."""
    b, m = idx.shape
    n = m if n is None else n
    flat = (np.arange(b)[:, None] * n + idx).reshape(-1)
    # float32 holds the small integer counts (and the ranks built from them) exactly
    return np.bincount(flat, minlength=b * n).reshape(b, n).astype(np.float32)


def _standardise(v: np.ndarray) -> np.ndarray:
    v = np.asarray(v, dtype=np.float64)
    sd = v.std()
    return (v - v.mean()) / (sd if sd > 0 else 1.0)


def weighted_pearson(counts: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Pearson r per resample (count rows, B x n) over x, y; NaN without variance."""
    m = counts.sum(axis=1, dtype=np.float64)

    def wsum(v):
        if v.ndim == 1:
            return counts.astype(np.float64) @ v if v.dtype == np.float64 else (counts @ v).astype(np.float64)
        return np.einsum("bi,bi->b", counts, v).astype(np.float64)

    if x.ndim == 1 and y.ndim == 1:  # model values: float64 matrix-vector products
        c64 = counts.astype(np.float64)
        sx, sy, sxx, syy, sxy = (c64 @ v for v in (x, y, x * x, y * y, x * y))
    else:
        sx, sy, sxx, syy, sxy = (wsum(v) for v in (x, y, x * x, y * y, x * y))
    vx = sxx - sx * sx / m
    vy = syy - sy * sy / m
    cov = sxy - sx * sy / m
    # Values are standardised or ranks scaled to (0, 1], so a tiny variance means a constant resample.
    bad = (vx <= 1e-9 * m) | (vy <= 1e-9 * m)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.where(bad, np.nan, cov / np.sqrt(np.where(bad, 1.0, vx * vy)))
    return np.clip(r, -1.0, 1.0)


def weighted_ranks(counts: np.ndarray, values: np.ndarray) -> np.ndarray:
    """(B x n) average ranks (ties averaged) within each resample; exact in float32."""
    order = np.argsort(values, kind="stable")
    sorted_values = np.asarray(values)[order]
    starts = np.flatnonzero(np.r_[True, sorted_values[1:] != sorted_values[:-1]])
    per_value = counts[:, order]  # (B x k) draws of each distinct value, k = n without ties
    if len(starts) < len(order):  # tied values: one column per distinct value
        per_value = np.add.reduceat(per_value, starts, axis=1)
    below = np.cumsum(per_value, axis=1)
    below -= per_value
    avg = below + (per_value + 1) * 0.5
    code = np.empty(len(order), dtype=np.int64)
    code[order] = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(order)]))
    return avg[:, code]


def resampled_statistic(statistic: str, counts: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The statistic ('pearson' | 'spearman') of every resample row of `counts`."""
    if statistic == "pearson":
        return weighted_pearson(counts, _standardise(x), _standardise(y))
    if statistic == "spearman":
        # integer-valued float32 ranks: the weighted sums below are exact
        return weighted_pearson(counts, weighted_ranks(counts, x), weighted_ranks(counts, y))
    raise ValueError(f"statistic must be 'pearson' or 'spearman', got {statistic!r}")


def point_statistic(statistic: str, x: np.ndarray, y: np.ndarray) -> float:
    """The statistic on the data themselves (every model once)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if statistic == "spearman":
        x, y = rankdata(x), rankdata(y)
    ones = np.ones((1, len(x)))
    return float(weighted_pearson(ones, _standardise(x), _standardise(y))[0])


def _interval(point: float, samples: np.ndarray, confidence: float) -> Interval:
    ok = samples[np.isfinite(samples)]
    if not np.isfinite(point) or len(ok) == 0:
        return Interval(float(point), float("nan"), float("nan"), int(len(samples) - len(ok)))
    tail = 100.0 * (1.0 - confidence) / 2.0
    lo, hi = np.percentile(ok, [tail, 100.0 - tail])
    return Interval(float(point), float(lo), float(hi), int(len(samples) - len(ok)))


def bootstrap_correlation(
    x: np.ndarray, y: np.ndarray, idx: np.ndarray, statistic: str = "pearson", confidence: float = 0.95
) -> Interval:
    """The statistic of (x, y) and its percentile CI over the resamples `idx` (B x n index matrix)."""
    return bootstrap_correlations(x, y, idx, (statistic,), confidence)[statistic]


def bootstrap_correlations(
    x: np.ndarray,
    y: np.ndarray,
    idx: np.ndarray,
    statistics=("pearson", "spearman"),
    confidence: float = 0.95,
) -> dict[str, Interval]:
    """Several statistics of (x, y), each with its percentile CI, over one set of resamples."""
    counts = resample_counts(idx, len(x))
    return {
        s: _interval(point_statistic(s, x, y), resampled_statistic(s, counts, x, y), confidence)
        for s in statistics
    }


def bootstrap_delta(
    x1: np.ndarray,
    x2: np.ndarray,
    y: np.ndarray,
    idx: np.ndarray,
    statistic: str = "pearson",
    confidence: float = 0.95,
) -> Interval:
    """r(x1, y) - r(x2, y) over the same models and its paired-bootstrap CI (one index matrix for both)."""
    counts = resample_counts(idx, len(y))
    point = point_statistic(statistic, x1, y) - point_statistic(statistic, x2, y)
    samples = resampled_statistic(statistic, counts, x1, y) - resampled_statistic(statistic, counts, x2, y)
    return _interval(point, samples, confidence)
