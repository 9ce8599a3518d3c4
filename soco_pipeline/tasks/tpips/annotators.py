"""Simulated annotators (NOT human judgements): a Luce choice softmax(-d_k / temperature) with a "cannot tell"
chance exp(-gap / cannot_tell_margin), seeded per item (docs/tpips.md, "Data")."""

from __future__ import annotations

import zlib

import numpy as np

from .config import ObserverConfig

JUDGEMENTS = "simulated"  # the value of every table's `judgements` column


def _item_rng(seed: int, item_id: str, aspect: str) -> np.random.Generator:
    return np.random.default_rng([int(seed), zlib.crc32(item_id.encode()), zlib.crc32(aspect.encode())])


def _softmax(logits: np.ndarray) -> np.ndarray:
    p = np.exp(logits - logits.max(-1, keepdims=True))
    return p / p.sum(-1, keepdims=True)


def expected_votes(distances: np.ndarray, obs: ObserverConfig) -> tuple[np.ndarray, np.ndarray]:
    """Votes (N, K) and cannot-tell counts (N,): the expected choices of the panel, rounded by largest remainder."""
    d = np.asarray(distances, float)
    n_ann = obs.n_annotators
    srt = np.sort(d, axis=1)
    p_ct = np.exp(-(srt[:, 1] - srt[:, 0]) / obs.cannot_tell_margin)
    cannot = np.rint(n_ann * p_ct).astype(np.int64)
    m = n_ann - cannot
    share = m[:, None] * _softmax(-d / obs.temperature)
    votes = np.floor(share + 1e-9).astype(np.int64)
    left = m - votes.sum(1)
    # remaining seats by largest remainder; ties go to the more probable (then the first) option
    order = np.lexsort((np.arange(d.shape[1])[None, :].repeat(len(d), 0), -share, -(share - votes)), axis=1)
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(d.shape[1])[None, :].repeat(len(d), 0), axis=1)
    votes += (rank < left[:, None]).astype(np.int64)
    return votes, cannot


def observe(
    distances: np.ndarray, ids: list[str], aspect: str, obs: ObserverConfig, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Votes (N, K) and cannot-tell counts (N,) of simulated observers given `distances` (N, K)."""
    if obs.vote_mode == "expected":
        return expected_votes(distances, obs)
    n, k = distances.shape
    votes = np.zeros((n, k), np.int64)
    cannot = np.zeros(n, np.int64)
    for i, item in enumerate(ids):
        rng = _item_rng(seed, item, aspect)
        noisy = distances[i][None, :] + rng.normal(0, obs.noise_sd, (obs.n_annotators, k))
        srt = np.sort(noisy, axis=1)
        unsure = (srt[:, 1] - srt[:, 0]) < obs.cannot_tell_margin
        p = _softmax(-noisy / obs.temperature)
        u = rng.random(obs.n_annotators)[:, None]
        pick = (u > np.cumsum(p, 1)).sum(1).clip(0, k - 1)
        votes[i] = np.bincount(pick[~unsure], minlength=k)
        cannot[i] = int(unsure.sum())
    return votes, cannot


def normalise(
    votes: np.ndarray, cannot_tell: np.ndarray, prune_cannot_tell: int = 3, drop_ties: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """(keep mask, y = votes / sum): >= prune_cannot_tell "cannot tell" or no vote dropped (2AFC: ties)."""
    votes = np.asarray(votes, float)
    total = votes.sum(1)
    keep = (np.asarray(cannot_tell) < prune_cannot_tell) & (total > 0)
    if drop_ties:
        top = votes.max(1, keepdims=True)
        keep &= (votes == top).sum(1) == 1
    y = np.divide(votes, total[:, None], out=np.zeros_like(votes), where=total[:, None] > 0)
    return keep, y
