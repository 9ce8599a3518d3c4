"""Simulated annotators: a noisy-observer model of odd-one-out and 2AFC judgements (NOT human judgements).

Model (our choice; the pruning and normalisation are the published ones). For one (item, aspect) each of the
`n_annotators` observers perceives every option's distance with Gaussian noise (sd `noise_sd`):

- odd-one-out: the three pair distances d̄_k (the pair that excludes image k); the observer answers
  "cannot tell" when the two smallest perceived distances are within `cannot_tell_margin`, else picks k with
  probability softmax(-d̄_k / temperature);
- 2AFC: the distances of x0 and x1 to the reference; "cannot tell" when they are within the margin, else it
  picks the closer one with probability softmax(-d / temperature).

An (item, aspect) with >= `prune_cannot_tell` "cannot tell" is removed (published); the remaining votes are
normalised to y (published: y ∈ Δ³ for odd-one-out; 2AFC items with a tie are removed too).
Every call is seeded per item, so the votes do not depend on the order of the items.
"""

from __future__ import annotations

import zlib

import numpy as np
import pandas as pd

from .config import ObserverConfig

JUDGEMENTS = "simulated"  # the value of every table's `judgements` column


def _item_rng(seed: int, item_id: str, aspect: str) -> np.random.Generator:
    return np.random.default_rng([int(seed), zlib.crc32(item_id.encode()), zlib.crc32(aspect.encode())])


def observe(distances: np.ndarray, ids: list[str], aspect: str, obs: ObserverConfig, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Votes (N, K) and cannot-tell counts (N,) of `n_annotators` simulated observers.

    `distances` (N, K): for odd-one-out the pair distances excluding option k (K = 3); for 2AFC the option's
    distance to the reference (K = 2). In both the chosen option is the one with the smallest perceived value.
    """
    n, k = distances.shape
    votes = np.zeros((n, k), np.int64)
    cannot = np.zeros(n, np.int64)
    for i, item in enumerate(ids):
        rng = _item_rng(seed, item, aspect)
        noisy = distances[i][None, :] + rng.normal(0, obs.noise_sd, (obs.n_annotators, k))
        srt = np.sort(noisy, axis=1)
        unsure = (srt[:, 1] - srt[:, 0]) < obs.cannot_tell_margin
        logits = -noisy / obs.temperature
        p = np.exp(logits - logits.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        u = rng.random(obs.n_annotators)[:, None]
        pick = (u > np.cumsum(p, 1)).sum(1).clip(0, k - 1)
        votes[i] = np.bincount(pick[~unsure], minlength=k)
        cannot[i] = int(unsure.sum())
    return votes, cannot


def normalise(votes: np.ndarray, cannot_tell: np.ndarray, prune_cannot_tell: int = 3,
              drop_ties: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(keep mask (N,), y (N, K)): rows with >= prune_cannot_tell "cannot tell" (or no vote) removed, votes / sum.

    drop_ties also removes rows whose top vote count is shared (the 2AFC rule).
    """
    votes = np.asarray(votes, float)
    total = votes.sum(1)
    keep = (np.asarray(cannot_tell) < prune_cannot_tell) & (total > 0)
    if drop_ties:
        top = votes.max(1, keepdims=True)
        keep &= (votes == top).sum(1) == 1
    y = np.divide(votes, total[:, None], out=np.zeros_like(votes), where=total[:, None] > 0)
    return keep, y


def consensus(y: np.ndarray) -> np.ndarray:
    """Human (here: simulated) consensus per row: Σ_k y_k², the agreement of a random rater with another."""
    return (np.asarray(y, float) ** 2).sum(1)


def vote_table(ids: list[str], aspect: str, votes: np.ndarray, cannot: np.ndarray) -> pd.DataFrame:
    """Long-form votes of one aspect (one row per item) with the `judgements` marker."""
    return pd.DataFrame({"item_id": ids, "aspect": aspect, "votes": list(votes.tolist()),
                         "cannot_tell": cannot.astype(np.int64), "judgements": JUDGEMENTS})
