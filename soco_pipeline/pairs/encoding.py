"""Pairs and keypoints as integer codes, and the vectorized sorted-merge joins that match them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa

from soco_pipeline.pairs.common import (
    KIND_NAMES,
    LEVEL_NAMES,
    allowed_keypoints,
    require_columns,
    show_rows,
    visible_keypoints,
)
from soco_pipeline.taxonomy import Taxonomy


@dataclass
class PairSide:
    """Per pair, the visible keypoints of one image that the pair's two categories share: parallel integer
    arrays sorted by (pair, kp) of the pair's row, the keypoint code and the concept code."""

    pair: np.ndarray
    kp: np.ndarray
    concept: np.ndarray

    def slice(self, lo: int, hi: int) -> PairSide:
        """The rows of pairs lo <= pair < hi."""
        a, b = np.searchsorted(self.pair, [lo, hi])
        return PairSide(self.pair[a:b], self.kp[a:b], self.concept[a:b])


@dataclass
class EncodedPairs:
    """Integer-coded pairs and keypoints plus the dictionaries to decode them."""

    level: np.ndarray  # per pair: 0 intra, 1 cross
    src: PairSide
    trg: PairSide
    pair_ids: pa.Array
    kp_names: pa.Array
    concept_names: pa.Array
    kp_concept: np.ndarray  # concept code of each keypoint code
    src_img: np.ndarray  # per pair: image code (-1: no visible keypoint)
    trg_img: np.ndarray
    combo: np.ndarray  # per pair: row of `allowed`
    allowed: np.ndarray  # (combo, kp) -> the pair's categories share the keypoint
    visible: np.ndarray  # (image code, kp) -> visible


def _side(
    img_of_pair: np.ndarray,
    combo: np.ndarray,
    vis_start: np.ndarray,
    vis_count: np.ndarray,
    vis_kp: np.ndarray,
    allowed: np.ndarray,
    kp_concept: np.ndarray,
) -> PairSide:
    """Expand each pair to its image's visible keypoints (CSR gather), keep the allowed ones."""
    cnt = np.zeros(len(img_of_pair), dtype=np.int64)
    known = img_of_pair >= 0  # -1: an image without visible keypoints
    cnt[known] = vis_count[img_of_pair[known]]
    pair = np.repeat(np.arange(len(img_of_pair), dtype=np.int32), cnt)
    within = np.arange(len(pair)) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    kp = vis_kp[vis_start[img_of_pair[pair]] + within]
    keep = allowed[combo[pair], kp]
    kp = kp[keep]
    return PairSide(pair[keep], kp, kp_concept[kp])


def encode_pairs(image_pairs: pd.DataFrame, keypoints: pd.DataFrame, taxonomy: Taxonomy) -> EncodedPairs:
    """The pairs and their keypoints as integer codes, ready for the vectorized matching of correspondences."""
    cols = ["pair_id", "level", "src_image", "trg_image", "src_category", "trg_category"]
    require_columns(image_pairs, cols, "image_pairs")
    image_pairs = image_pairs[cols].astype(str)
    bad_level = image_pairs[~image_pairs.level.isin(LEVEL_NAMES)]
    if len(bad_level):
        raise ValueError(f"image_pairs has levels outside {LEVEL_NAMES}:\n{show_rows(bad_level)}")
    cats = set(taxonomy.categories)
    unknown = image_pairs[~image_pairs.src_category.isin(cats) | ~image_pairs.trg_category.isin(cats)]
    if len(unknown):
        raise ValueError(
            "image_pairs has categories missing from the taxonomy; fix them or add them to "
            f"{taxonomy.source}:\n{show_rows(unknown)}"
        )
    vis = visible_keypoints(keypoints, taxonomy)
    kp_names = list(taxonomy.keypoints)
    concept_names = list(taxonomy.concepts)
    kp_concept = np.array(
        [concept_names.index(taxonomy.keypoints[k].concept) for k in kp_names],
        _code_dtype(len(concept_names)),
    )
    kp_index = pd.Index(kp_names)

    # Visible keypoints as CSR over images: sorted by (image code, keypoint code).
    images = pd.Index(pd.unique(vis.image_id))
    vis_img = images.get_indexer(vis.image_id)
    vis_kp = kp_index.get_indexer(vis.keypoint).astype(_code_dtype(len(kp_names)))
    order = np.lexsort((vis_kp, vis_img))
    vis_img, vis_kp = vis_img[order], vis_kp[order]
    vis_count = np.bincount(vis_img, minlength=len(images))
    vis_start = np.cumsum(vis_count) - vis_count

    combo = image_pairs.groupby(["src_category", "trg_category"], sort=True).ngroup().to_numpy(np.int64)
    combos = (
        image_pairs[["src_category", "trg_category"]]
        .drop_duplicates()
        .sort_values(["src_category", "trg_category"], ignore_index=True)
    )
    allowed_rows = allowed_keypoints(taxonomy, combos)
    allowed = np.zeros((len(combos), len(kp_names)), dtype=bool)
    allowed[allowed_rows.combo.to_numpy(), kp_index.get_indexer(allowed_rows.keypoint)] = True

    visible = np.zeros((len(images), len(kp_names)), dtype=bool)
    visible[vis_img, vis_kp] = True
    src_img, trg_img = images.get_indexer(image_pairs.src_image), images.get_indexer(image_pairs.trg_image)
    args = (combo, vis_start, vis_count, vis_kp, allowed, kp_concept)
    return EncodedPairs(
        level=(image_pairs.level.to_numpy() == "cross").astype(np.int8),
        src=_side(src_img, *args),
        trg=_side(trg_img, *args),
        pair_ids=pa.array(image_pairs.pair_id.to_numpy(), pa.string()),
        kp_names=pa.array(kp_names, pa.string()),
        concept_names=pa.array(concept_names, pa.string()),
        kp_concept=kp_concept,
        src_img=src_img,
        trg_img=trg_img,
        combo=combo,
        allowed=allowed,
        visible=visible,
    )


def soc_mask(src: PairSide, trg: PairSide, n_kp: int) -> np.ndarray:
    """Which source rows have the same keypoint visible on the target side (a lookup over keys)."""
    base = int(src.pair[0]) if len(src.pair) else 0
    span = (int(src.pair[-1]) - base + 1) if len(src.pair) else 0
    t_key = (trg.pair.astype(np.int64) - base) * n_kp + trg.kp
    t_key = t_key[(t_key >= 0) & (t_key < span * n_kp)]
    present = np.zeros(span * n_kp, dtype=bool)
    present[t_key] = True
    return present[(src.pair.astype(np.int64) - base) * n_kp + src.kp]


def _concept_groups(
    src: PairSide, trg: PairSide, n_concepts: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Target rows regrouped by (pair, concept, kp), and per source row its group's start and size (both sides
    cover one pair range, so keys are counted with bincount)."""
    lo = min(int(src.pair[0]) if len(src.pair) else 0, int(trg.pair[0]) if len(trg.pair) else 0)
    hi = max(int(src.pair[-1]) if len(src.pair) else 0, int(trg.pair[-1]) if len(trg.pair) else 0) + 1
    t_key = (trg.pair.astype(np.int64) - lo) * n_concepts + trg.concept
    t_order = np.argsort(t_key, kind="stable")  # rows are sorted by (pair, kp): stable keeps kp order
    counts = np.bincount(t_key, minlength=(hi - lo) * n_concepts)
    s_key = (src.pair.astype(np.int64) - lo) * n_concepts + src.concept
    return t_order, (np.cumsum(counts) - counts)[s_key], counts[s_key]


def rows_per_pair(enc: EncodedPairs) -> np.ndarray:
    """Correspondence rows (SOC + CC) each pair will produce."""
    n_pairs = len(enc.pair_ids)
    soc = soc_mask(enc.src, enc.trg, len(enc.kp_names))
    _, _, size = _concept_groups(enc.src, enc.trg, len(enc.concept_names))
    return np.bincount(enc.src.pair, weights=size + soc, minlength=n_pairs).astype(np.int64)


def match_rows(enc: EncodedPairs, lo: int, hi: int) -> dict[str, np.ndarray]:
    """Correspondence codes of pairs lo <= pair < hi, ordered by pair, kind (soc, cc), src kp, trg kp; placed
    by arithmetic (its index among its kind plus the other kind's rows before it), not sorted."""
    src, trg = enc.src.slice(lo, hi), enc.trg.slice(lo, hi)
    soc = soc_mask(src, trg, len(enc.kp_names))
    t_order, left, size = _concept_groups(src, trg, len(enc.concept_names))
    pair = src.pair - lo
    soc_rows = np.flatnonzero(soc)
    n_soc = np.bincount(pair[soc_rows], minlength=hi - lo)
    n_cc = np.bincount(pair, weights=size, minlength=hi - lo).astype(np.int64)
    cc_total = int(size.sum())
    cc_index = np.arange(cc_total)
    soc_pos = np.arange(len(soc_rows)) + (np.cumsum(n_cc) - n_cc)[pair[soc_rows]]
    cc_pos = cc_index + np.repeat(np.cumsum(n_soc)[pair], size)
    cc_trg = t_order[np.repeat(left - (np.cumsum(size) - size), size) + cc_index]

    total = len(soc_rows) + cc_total
    row = np.empty(total, np.int64)  # the source row each output row comes from
    row[soc_pos] = soc_rows
    row[cc_pos] = np.repeat(np.arange(len(pair)), size)
    tkp = np.empty(total, src.kp.dtype)
    tkp[soc_pos] = src.kp[soc_rows]
    tkp[cc_pos] = trg.kp[cc_trg]
    kind = np.ones(total, np.int8)
    kind[soc_pos] = 0
    return {
        "pair": np.repeat(np.arange(lo, hi, dtype=np.int32), n_soc + n_cc),
        "kind": kind,
        "skp": src.kp[row],
        "tkp": tkp,
        "concept": src.concept[row],
        "n": size[row],
    }


def _code_dtype(n: int) -> type[np.signedinteger]:
    """The smallest signed integer type that holds codes 0..n-1."""
    return np.int16 if n < 2**15 else np.int32


def _dict_column(codes: np.ndarray, dictionary: pa.Array) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(pa.array(codes), dictionary)  # indices keep codes' dtype


def decode_matches(codes: dict[str, np.ndarray], enc: EncodedPairs, slice_pairs: bool) -> pa.Table:
    """Integer codes -> a correspondences table with dictionary-encoded strings; `slice_pairs` keeps the pair
    dictionary to the batch's range (small row-group dictionaries when streaming)."""
    pair, pair_dict = codes["pair"], enc.pair_ids
    if slice_pairs and len(pair):
        lo, hi = int(pair[0]), int(pair[-1])
        pair, pair_dict = pair - lo, enc.pair_ids.slice(lo, hi - lo + 1)
    return pa.table(
        {
            "pair_id": _dict_column(pair.astype(np.int32, copy=False), pair_dict),
            "level": _dict_column(enc.level[codes["pair"]], pa.array(LEVEL_NAMES)),
            "kind": _dict_column(codes["kind"], pa.array(KIND_NAMES)),
            "src_keypoint": _dict_column(codes["skp"], enc.kp_names),
            "trg_keypoint": _dict_column(codes["tkp"], enc.kp_names),
            "concept": _dict_column(codes["concept"], enc.concept_names),
            "geo": pa.array(codes["n"] >= 2),
            "n_candidates": pa.array(codes["n"].astype(np.int64)),
        }
    )
