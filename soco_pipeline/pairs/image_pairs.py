"""Image pairs (intra, and cross between categories sharing keypoints) and the seeded evaluation sample."""

from __future__ import annotations

import numpy as np
import pandas as pd

from soco_pipeline.pairs.common import (
    PAIR_COLUMNS,
    STREAM_CROSS_SOURCES,
    STREAM_EVALUATION,
    PairConfig,
    check_images,
    quota_value,
    related_category_pairs,
    stream_rng,
)
from soco_pipeline.pairs.encoding import encode_pairs, soc_mask
from soco_pipeline.taxonomy import Taxonomy


def _sample_without_replacement(n: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """Per row, min(k, n) distinct offsets in [0, n) drawn uniformly (-1 pads rows with n < k); vectorized
    over rows: draw r in [0, n - i), then shift it past the offsets already taken."""
    out = np.full((len(n), k), -1, dtype=np.int64)
    for i in range(k):
        live = n > i
        r = np.zeros(len(n), dtype=np.int64)
        r[live] = rng.integers(0, n[live] - i)
        taken = np.sort(out[:, :i], axis=1)
        for j in range(i):
            r += r >= taken[:, j]
        out[live, i] = r[live]
    return out


def _intra_pairs(imgs: pd.DataFrame) -> pd.DataFrame:
    pairs = imgs.merge(imgs, on="category", suffixes=("_src", "_trg"))
    pairs = pairs[pairs.image_id_src != pairs.image_id_trg]
    return pd.DataFrame(
        {
            "level": "intra",
            "pair_group": pairs.category.to_numpy(),
            "src_image": pairs.image_id_src.to_numpy(),
            "trg_image": pairs.image_id_trg.to_numpy(),
            "src_category": pairs.category.to_numpy(),
            "trg_category": pairs.category.to_numpy(),
            "ancestor": pairs.category.to_numpy(),
        }
    )


def _cross_pairs(imgs: pd.DataFrame, taxonomy: Taxonomy, cfg: PairConfig) -> pd.DataFrame:
    cats = list(pd.unique(imgs.category))
    related = related_category_pairs(taxonomy, cats)
    count = imgs.groupby("category", sort=False).size()
    start = count.cumsum() - count  # imgs is sorted by (category, image_id)
    targets = imgs.rename(columns={"image_id": "trg_image", "category": "trg_category"}).merge(
        related, on="trg_category"
    )
    targets = targets.sort_values(["trg_category", "trg_image", "src_category"], ignore_index=True)
    n_src = count.reindex(targets.src_category).to_numpy()
    k = int(count.max()) if cfg.cross_sources_per_category == "all" else int(cfg.cross_sources_per_category)
    if k == 0 or targets.empty:
        return pd.DataFrame(columns=PAIR_COLUMNS[1:-1])  # no pair_id, no evaluated yet
    offsets = _sample_without_replacement(n_src, k, stream_rng(cfg.seed, STREAM_CROSS_SOURCES))
    row, j = np.nonzero(offsets >= 0)
    src_pos = start.reindex(targets.src_category).to_numpy()[row] + offsets[row, j]
    chosen = targets.iloc[row]
    return pd.DataFrame(
        {
            "level": "cross",
            "pair_group": chosen.trg_category.to_numpy(),
            "src_image": imgs.image_id.to_numpy()[src_pos],
            "trg_image": chosen.trg_image.to_numpy(),
            "src_category": chosen.src_category.to_numpy(),
            "trg_category": chosen.trg_category.to_numpy(),
            "ancestor": chosen.ancestor.to_numpy(),
        }
    )


def soc_counts(image_pairs: pd.DataFrame, keypoints: pd.DataFrame, taxonomy: Taxonomy) -> np.ndarray:
    """Number of SOC correspondences (keypoints visible in both images, shared) of each pair, in order."""
    pairs = image_pairs.reset_index(drop=True)
    enc = encode_pairs(pairs, keypoints, taxonomy)
    soc = soc_mask(enc.src, enc.trg, len(enc.kp_names))
    return np.bincount(enc.src.pair[soc], minlength=len(pairs)).astype(np.int64)


def evaluation_sample(image_pairs: pd.DataFrame, eligible: np.ndarray, cfg: PairConfig) -> np.ndarray:
    """The evaluated flag: per (level, pair_group) the eligible pairs with the smallest seeded random keys, up
    to the level's quota, so ids play no part."""
    keys = stream_rng(cfg.seed, STREAM_EVALUATION).random(len(image_pairs))
    group = image_pairs.groupby(["level", "pair_group"], sort=True).ngroup().to_numpy()
    idx = np.flatnonzero(eligible)
    order = idx[np.lexsort((keys[idx], group[idx]))]
    g = group[order]
    first = np.r_[0, np.flatnonzero(np.diff(g)) + 1] if len(g) else np.array([], dtype=np.int64)
    rank = np.arange(len(order)) - np.repeat(first, np.diff(np.r_[first, len(order)]))
    quota = np.where(
        image_pairs.level.to_numpy()[order] == "intra",
        quota_value(cfg.intra_per_category),
        quota_value(cfg.cross_per_category),
    )
    out = np.zeros(len(image_pairs), dtype=bool)
    out[order[rank < quota]] = True
    return out


def build_image_pairs(
    images: pd.DataFrame, keypoints: pd.DataFrame, taxonomy: Taxonomy, cfg: PairConfig
) -> pd.DataFrame:
    """Intra (every ordered pair in a category) and cross (seeded sources per target and related category)
    pairs, sorted, with the seeded evaluation sample among the pairs with a SOC correspondence."""
    imgs = check_images(images, taxonomy)
    pairs = pd.concat([_intra_pairs(imgs), _cross_pairs(imgs, taxonomy, cfg)], ignore_index=True)
    pairs["_lvl"] = (pairs.level == "cross").astype(np.int8)
    pairs = pairs.sort_values(["_lvl", "pair_group", "src_image", "trg_image"], ignore_index=True)
    pairs = pairs.drop(columns="_lvl")
    pairs.insert(0, "pair_id", pairs.level + ":" + pairs.src_image + ":" + pairs.trg_image)
    eligible = soc_counts(pairs, keypoints, taxonomy) > 0
    pairs["evaluated"] = evaluation_sample(pairs, eligible, cfg)
    return pairs[PAIR_COLUMNS]
