"""Image pairs, keypoint-level correspondences (CC, SOC, SOC-geo, Cross-SOC) and the evaluation sample.

Intra pairs are every ordered pair of distinct images of a category. Cross pairs join images of
*related* categories (their lowest common ancestor in the taxonomy defines keypoints): for each target
image and each related source category, ``cross_sources_per_category`` source images are drawn with a
seeded RNG. Correspondences are built by vectorized sorted-merge joins (numpy) over integer codes, with
no per-pair or per-keypoint Python loop; strings only come back as dictionary-encoded Arrow columns, so
the full-scale table (millions of rows) stays small in memory and streams to Parquet in batches.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from soco_pipeline import storage
from soco_pipeline.taxonomy import Taxonomy

LEVEL_NAMES = ("intra", "cross")
KIND_NAMES = ("soc", "cc")
PAIR_COLUMNS = [
    "pair_id", "level", "pair_group", "src_image", "trg_image",
    "src_category", "trg_category", "ancestor", "evaluated",
]
CORRESPONDENCE_COLUMNS = [
    "pair_id", "level", "kind", "src_keypoint", "trg_keypoint", "concept", "geo", "n_candidates",
]
_MAX_SHOWN = 5  # offending rows quoted in an error message

# RNG streams derived from the one configured seed, so that each random choice is independent.
_STREAM_CROSS_SOURCES = 1
_STREAM_EVALUATION = 2

Quota = int | Literal["all"]


@dataclass(frozen=True)
class PairConfig:
    """How pairs are drawn: the seed, evaluation quotas per pair group and cross sources per category.

    ``intra_per_category`` / ``cross_per_category``: evaluated pairs per pair group (an int or "all").
    ``cross_sources_per_category``: source images drawn per (target image, related category), or "all".
    """

    seed: int = 0
    intra_per_category: Quota = 200
    cross_per_category: Quota = 200
    cross_sources_per_category: Quota = 1

    def __post_init__(self) -> None:
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < 0:
            raise ValueError(f"PairConfig.seed must be a non-negative int, got {self.seed!r}")
        for name in ("intra_per_category", "cross_per_category", "cross_sources_per_category"):
            v = getattr(self, name)
            if v != "all" and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
                raise ValueError(f"PairConfig.{name} must be a non-negative int or 'all', got {v!r}")


def _rng(seed: int, stream: int) -> np.random.Generator:
    return np.random.default_rng([seed, stream])


def _quota(v: Quota) -> float:
    return np.inf if v == "all" else float(v)


def _require_columns(df: pd.DataFrame, columns: list[str], table: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"table {table!r} lacks columns {missing}; it must follow the canonical schema")


def _show(df: pd.DataFrame) -> str:
    return df.head(_MAX_SHOWN).to_string(index=False)


# --------------------------------------------------------------------------------------------- taxonomy


def inherited_keypoints(taxonomy: Taxonomy, node: str) -> list[str]:
    """Keypoints a taxonomy node has: those defined at it and at its ancestors (root's first)."""
    names: list[str] = []
    for n in reversed(taxonomy.ancestors(node)):
        names.extend(taxonomy.nodes[n].keypoints)
    return names


def related_category_pairs(taxonomy: Taxonomy, categories: list[str] | None = None) -> pd.DataFrame:
    """Ordered (src_category, trg_category, ancestor) of distinct categories sharing keypoints."""
    cats = list(categories) if categories is not None else taxonomy.categories
    rows = []
    for a in cats:
        for b in cats:
            if a == b:
                continue
            lca = taxonomy.lowest_common_ancestor(a, b)
            if lca is not None and inherited_keypoints(taxonomy, lca):
                rows.append((a, b, lca))
    return pd.DataFrame(rows, columns=["src_category", "trg_category", "ancestor"])


def _allowed_keypoints(taxonomy: Taxonomy, combos: pd.DataFrame) -> pd.DataFrame:
    """(combo, keypoint) for each (src_category, trg_category) row of `combos`: the shared keypoints.

    For intra combos (same category) that is every keypoint of the category.
    """
    by_node: dict[str | None, list[str]] = {}
    combo_ids, names = [], []
    for i, (a, b) in enumerate(zip(combos.src_category, combos.trg_category, strict=True)):
        lca = taxonomy.lowest_common_ancestor(a, b)
        if lca not in by_node:
            by_node[lca] = inherited_keypoints(taxonomy, lca) if lca is not None else []
        kps = by_node[lca]
        combo_ids.extend([i] * len(kps))
        names.extend(kps)
    return pd.DataFrame({"combo": np.asarray(combo_ids, dtype=np.int32), "keypoint": names})


# ------------------------------------------------------------------------------------------ validation


def _check_images(images: pd.DataFrame, taxonomy: Taxonomy) -> pd.DataFrame:
    _require_columns(images, ["image_id", "category"], "image_set")
    imgs = images[["image_id", "category"]].astype(str)
    dup = imgs[imgs.image_id.duplicated(keep=False)]
    if len(dup):
        raise ValueError(f"image_set has duplicate image ids; keep one row per image:\n{_show(dup)}")
    unknown = imgs[~imgs.category.isin(taxonomy.categories)]
    if len(unknown):
        raise ValueError(
            f"image_set has categories missing from the taxonomy; fix the category or add it to "
            f"assets/taxonomy.yaml:\n{_show(unknown)}"
        )
    return imgs.sort_values(["category", "image_id"], ignore_index=True)


def _visible_keypoints(keypoints: pd.DataFrame, taxonomy: Taxonomy) -> pd.DataFrame:
    """The visible keypoints (image_id, keypoint), checked against the taxonomy."""
    _require_columns(keypoints, ["image_id", "category", "keypoint", "visible"], "keypoints")
    vis = keypoints.loc[keypoints.visible.astype(bool), ["image_id", "category", "keypoint"]]
    vis = vis.astype(str)
    table = taxonomy.keypoint_table()[["category", "keypoint"]]
    known = vis.merge(table, on=["category", "keypoint"], how="left", indicator=True)["_merge"] == "both"
    bad = vis[~known.to_numpy()]
    if len(bad):
        raise ValueError(
            "keypoints has visible rows whose keypoint is not a keypoint of the row's category in the "
            f"taxonomy; fix the keypoint name or the category:\n{_show(bad)}"
        )
    dup = vis[vis.duplicated(["image_id", "keypoint"], keep=False)]
    if len(dup):
        raise ValueError(f"keypoints has duplicate (image_id, keypoint) rows; aggregate them first:\n{_show(dup)}")
    if "concept" in keypoints.columns:
        given = keypoints.loc[keypoints.visible.astype(bool), "concept"].astype(str).to_numpy()
        expected = vis.keypoint.map({k: d.concept for k, d in taxonomy.keypoints.items()}).to_numpy()
        wrong = vis.assign(concept=given, taxonomy_concept=expected)[given != expected]
        if len(wrong):
            raise ValueError(
                "keypoints has rows whose concept differs from the taxonomy's concept of the keypoint; "
                f"rebuild the keypoints table against assets/taxonomy.yaml:\n{_show(wrong)}"
            )
    return vis[["image_id", "keypoint"]]


# ------------------------------------------------------------------------------------------- encoding


@dataclass
class _Side:
    """Per pair, the visible keypoints of one image that the pair's two categories share.

    Parallel integer arrays sorted by (pair, kp): the pair's row in the pairs table, the keypoint and
    concept codes (positions in the taxonomy's keypoint and concept lists).
    """

    pair: np.ndarray
    kp: np.ndarray
    concept: np.ndarray

    def slice(self, lo: int, hi: int) -> _Side:
        """The rows of pairs lo <= pair < hi."""
        a, b = np.searchsorted(self.pair, [lo, hi])
        return _Side(self.pair[a:b], self.kp[a:b], self.concept[a:b])


@dataclass
class _Encoded:
    """Integer-coded pairs and keypoints plus the dictionaries to decode them."""

    level: np.ndarray  # per pair: 0 intra, 1 cross
    src: _Side
    trg: _Side
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
    img_of_pair: np.ndarray, combo: np.ndarray, vis_start: np.ndarray, vis_count: np.ndarray,
    vis_kp: np.ndarray, allowed: np.ndarray, kp_concept: np.ndarray,
) -> _Side:
    """Expand each pair to its image's visible keypoints (CSR gather), keep the allowed ones."""
    cnt = np.zeros(len(img_of_pair), dtype=np.int64)
    known = img_of_pair >= 0  # -1: an image without visible keypoints
    cnt[known] = vis_count[img_of_pair[known]]
    pair = np.repeat(np.arange(len(img_of_pair), dtype=np.int32), cnt)
    within = np.arange(len(pair)) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    kp = vis_kp[vis_start[img_of_pair[pair]] + within]
    keep = allowed[combo[pair], kp]
    kp = kp[keep]
    return _Side(pair[keep], kp, kp_concept[kp])


def _encode(image_pairs: pd.DataFrame, keypoints: pd.DataFrame, taxonomy: Taxonomy) -> _Encoded:
    cols = ["pair_id", "level", "src_image", "trg_image", "src_category", "trg_category"]
    _require_columns(image_pairs, cols, "image_pairs")
    image_pairs = image_pairs[cols].astype(str)
    bad_level = image_pairs[~image_pairs.level.isin(LEVEL_NAMES)]
    if len(bad_level):
        raise ValueError(f"image_pairs has levels outside {LEVEL_NAMES}:\n{_show(bad_level)}")
    cats = set(taxonomy.categories)
    unknown = image_pairs[~image_pairs.src_category.isin(cats) | ~image_pairs.trg_category.isin(cats)]
    if len(unknown):
        raise ValueError(
            "image_pairs has categories missing from the taxonomy; fix them or add them to "
            f"assets/taxonomy.yaml:\n{_show(unknown)}"
        )
    vis = _visible_keypoints(keypoints, taxonomy)
    kp_names = list(taxonomy.keypoints)
    concept_names = list(taxonomy.concepts)
    kp_concept = np.array([concept_names.index(taxonomy.keypoints[k].concept) for k in kp_names],
                          _code_dtype(len(concept_names)))
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
        image_pairs[["src_category", "trg_category"]].drop_duplicates()
        .sort_values(["src_category", "trg_category"], ignore_index=True)
    )
    allowed_rows = _allowed_keypoints(taxonomy, combos)
    allowed = np.zeros((len(combos), len(kp_names)), dtype=bool)
    allowed[allowed_rows.combo.to_numpy(), kp_index.get_indexer(allowed_rows.keypoint)] = True

    visible = np.zeros((len(images), len(kp_names)), dtype=bool)
    visible[vis_img, vis_kp] = True
    src_img, trg_img = images.get_indexer(image_pairs.src_image), images.get_indexer(image_pairs.trg_image)
    args = (combo, vis_start, vis_count, vis_kp, allowed, kp_concept)
    return _Encoded(
        level=(image_pairs.level.to_numpy() == "cross").astype(np.int8),
        src=_side(src_img, *args),
        trg=_side(trg_img, *args),
        pair_ids=pa.array(image_pairs.pair_id.to_numpy(), pa.string()),
        kp_names=pa.array(kp_names, pa.string()),
        concept_names=pa.array(concept_names, pa.string()),
        kp_concept=kp_concept, src_img=src_img, trg_img=trg_img, combo=combo, allowed=allowed,
        visible=visible,
    )


def column_codes(values: pa.ChunkedArray | pa.Array | pd.Series, index: pd.Index) -> np.ndarray:
    """Positions of a string column's values in `index` (-1 where absent).

    Dictionary-encoded Arrow columns and pandas categoricals are mapped through their (small)
    dictionaries, so millions of rows cost one integer gather.
    """
    if isinstance(values, pa.Array):
        values = pa.chunked_array([values])
    if isinstance(values, pa.ChunkedArray):
        if pa.types.is_dictionary(values.type):
            parts = [
                index.get_indexer(c.dictionary.to_pandas().astype(str))[c.indices.to_numpy(zero_copy_only=False)]
                for c in values.chunks
            ]
            return np.concatenate(parts) if parts else np.array([], dtype=np.int64)
        values = values.to_pandas()
    if isinstance(values.dtype, pd.CategoricalDtype):
        codes = values.cat.codes.to_numpy()
        mapped = index.get_indexer(values.cat.categories.astype(str))
        return np.where(codes >= 0, mapped[np.maximum(codes, 0)], -1) if len(mapped) else np.full(len(codes), -1)
    return index.get_indexer(values.astype(str))


def _soc_mask(src: _Side, trg: _Side, n_kp: int) -> np.ndarray:
    """Which source rows have the same keypoint visible on the target side (a lookup over keys)."""
    base = int(src.pair[0]) if len(src.pair) else 0
    span = (int(src.pair[-1]) - base + 1) if len(src.pair) else 0
    t_key = (trg.pair.astype(np.int64) - base) * n_kp + trg.kp
    t_key = t_key[(t_key >= 0) & (t_key < span * n_kp)]
    present = np.zeros(span * n_kp, dtype=bool)
    present[t_key] = True
    return present[(src.pair.astype(np.int64) - base) * n_kp + src.kp]


def _concept_groups(src: _Side, trg: _Side, n_concepts: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Target rows regrouped by (pair, concept, kp), and per source row its group's start and size.

    Both sides cover the same pair range (they come from one slice), so keys are counted with bincount.
    """
    lo = min(int(src.pair[0]) if len(src.pair) else 0, int(trg.pair[0]) if len(trg.pair) else 0)
    hi = max(int(src.pair[-1]) if len(src.pair) else 0, int(trg.pair[-1]) if len(trg.pair) else 0) + 1
    t_key = (trg.pair.astype(np.int64) - lo) * n_concepts + trg.concept
    t_order = np.argsort(t_key, kind="stable")  # rows are sorted by (pair, kp): stable keeps kp order
    counts = np.bincount(t_key, minlength=(hi - lo) * n_concepts)
    s_key = (src.pair.astype(np.int64) - lo) * n_concepts + src.concept
    return t_order, (np.cumsum(counts) - counts)[s_key], counts[s_key]


def _rows_per_pair(enc: _Encoded) -> np.ndarray:
    """Correspondence rows (SOC + CC) each pair will produce."""
    n_pairs = len(enc.pair_ids)
    soc = _soc_mask(enc.src, enc.trg, len(enc.kp_names))
    _, _, size = _concept_groups(enc.src, enc.trg, len(enc.concept_names))
    return np.bincount(enc.src.pair, weights=size + soc, minlength=n_pairs).astype(np.int64)


def _match(enc: _Encoded, lo: int, hi: int) -> dict[str, np.ndarray]:
    """Correspondence codes of pairs lo <= pair < hi, ordered by pair, kind (soc, cc), src kp, trg kp.

    SOC: source rows whose keypoint is visible on the target side. CC: each source row repeated over
    the target rows of its (pair, concept) group. Rows are placed by arithmetic, with no sort: a row's
    position is its index among the rows of its kind plus the rows of the other kind before it (the
    earlier pairs' CC rows for SOC; the SOC rows up to its own pair for CC).
    """
    src, trg = enc.src.slice(lo, hi), enc.trg.slice(lo, hi)
    soc = _soc_mask(src, trg, len(enc.kp_names))
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
        "kind": kind, "skp": src.kp[row], "tkp": tkp, "concept": src.concept[row], "n": size[row],
    }


def _code_dtype(n: int) -> type[np.signedinteger]:
    """The smallest signed integer type that holds codes 0..n-1."""
    return np.int16 if n < 2**15 else np.int32


def _dict_column(codes: np.ndarray, dictionary: pa.Array) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(pa.array(codes), dictionary)  # indices keep codes' dtype


def _decode(codes: dict[str, np.ndarray], enc: _Encoded, slice_pairs: bool) -> pa.Table:
    """Integer codes -> a correspondences table with dictionary-encoded string columns.

    With `slice_pairs` the pair dictionary holds only the batch's (contiguous) pair range, which keeps
    each Parquet row group's dictionary small when streaming.
    """
    pair, pair_dict = codes["pair"], enc.pair_ids
    if slice_pairs and len(pair):
        lo, hi = int(pair[0]), int(pair[-1])
        pair, pair_dict = pair - lo, enc.pair_ids.slice(lo, hi - lo + 1)
    return pa.table({
        "pair_id": _dict_column(pair.astype(np.int32, copy=False), pair_dict),
        "level": _dict_column(enc.level[codes["pair"]], pa.array(LEVEL_NAMES)),
        "kind": _dict_column(codes["kind"], pa.array(KIND_NAMES)),
        "src_keypoint": _dict_column(codes["skp"], enc.kp_names),
        "trg_keypoint": _dict_column(codes["tkp"], enc.kp_names),
        "concept": _dict_column(codes["concept"], enc.concept_names),
        "geo": pa.array(codes["n"] >= 2),
        "n_candidates": pa.array(codes["n"].astype(np.int64)),
    })


def _select_pairs(image_pairs: pd.DataFrame, evaluated_only: bool) -> pd.DataFrame:
    if not evaluated_only:
        return image_pairs.reset_index(drop=True)
    _require_columns(image_pairs, ["evaluated"], "image_pairs")
    return image_pairs[image_pairs.evaluated.astype(bool)].reset_index(drop=True)


# ---------------------------------------------------------------------------------------- image pairs


def _sample_without_replacement(n: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """Per row, min(k, n) distinct offsets in [0, n) drawn uniformly; -1 pads rows with n < k.

    Vectorized over rows, looping only over the k draws: draw r in [0, n - i), then shift it past the
    offsets already taken (in increasing order) to land on the r-th offset not yet taken.
    """
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
    return pd.DataFrame({
        "level": "intra",
        "pair_group": pairs.category.to_numpy(),
        "src_image": pairs.image_id_src.to_numpy(),
        "trg_image": pairs.image_id_trg.to_numpy(),
        "src_category": pairs.category.to_numpy(),
        "trg_category": pairs.category.to_numpy(),
        "ancestor": pairs.category.to_numpy(),
    })


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
        return pd.DataFrame(columns=["level", "pair_group", "src_image", "trg_image",
                                     "src_category", "trg_category", "ancestor"])
    offsets = _sample_without_replacement(n_src, k, _rng(cfg.seed, _STREAM_CROSS_SOURCES))
    row, j = np.nonzero(offsets >= 0)
    src_pos = start.reindex(targets.src_category).to_numpy()[row] + offsets[row, j]
    chosen = targets.iloc[row]
    return pd.DataFrame({
        "level": "cross",
        "pair_group": chosen.trg_category.to_numpy(),
        "src_image": imgs.image_id.to_numpy()[src_pos],
        "trg_image": chosen.trg_image.to_numpy(),
        "src_category": chosen.src_category.to_numpy(),
        "trg_category": chosen.trg_category.to_numpy(),
        "ancestor": chosen.ancestor.to_numpy(),
    })


def soc_counts(image_pairs: pd.DataFrame, keypoints: pd.DataFrame, taxonomy: Taxonomy) -> np.ndarray:
    """Number of SOC correspondences (keypoints visible in both images, shared) of each pair, in order."""
    pairs = image_pairs.reset_index(drop=True)
    enc = _encode(pairs, keypoints, taxonomy)
    soc = _soc_mask(enc.src, enc.trg, len(enc.kp_names))
    return np.bincount(enc.src.pair[soc], minlength=len(pairs)).astype(np.int64)


def evaluation_sample(image_pairs: pd.DataFrame, eligible: np.ndarray, cfg: PairConfig) -> np.ndarray:
    """The evaluated flag: per (level, pair_group), a seeded uniform sample of the eligible pairs.

    Each pair gets a random key drawn in the table's order; within a group the eligible pairs with the
    smallest keys are taken, up to the level's quota (all of them for "all"), so ids play no part.
    """
    keys = _rng(cfg.seed, _STREAM_EVALUATION).random(len(image_pairs))
    group = image_pairs.groupby(["level", "pair_group"], sort=True).ngroup().to_numpy()
    idx = np.flatnonzero(eligible)
    order = idx[np.lexsort((keys[idx], group[idx]))]
    g = group[order]
    first = np.r_[0, np.flatnonzero(np.diff(g)) + 1] if len(g) else np.array([], dtype=np.int64)
    rank = np.arange(len(order)) - np.repeat(first, np.diff(np.r_[first, len(order)]))
    quota = np.where(
        image_pairs.level.to_numpy()[order] == "intra",
        _quota(cfg.intra_per_category), _quota(cfg.cross_per_category),
    )
    out = np.zeros(len(image_pairs), dtype=bool)
    out[order[rank < quota]] = True
    return out


def build_image_pairs(
    images: pd.DataFrame, keypoints: pd.DataFrame, taxonomy: Taxonomy, cfg: PairConfig
) -> pd.DataFrame:
    """Intra and cross image pairs (ImagePairSchema) with the seeded evaluation sample marked.

    Intra: every ordered pair of distinct images of a category. Cross: per target image and related
    source category, ``cfg.cross_sources_per_category`` seeded source images. Pairs without any
    visible SOC correspondence are never evaluated. Rows sorted by level (intra first), pair_group,
    src_image, trg_image.
    """
    imgs = _check_images(images, taxonomy)
    pairs = pd.concat([_intra_pairs(imgs), _cross_pairs(imgs, taxonomy, cfg)], ignore_index=True)
    pairs["_lvl"] = (pairs.level == "cross").astype(np.int8)
    pairs = pairs.sort_values(["_lvl", "pair_group", "src_image", "trg_image"], ignore_index=True)
    pairs = pairs.drop(columns="_lvl")
    pairs.insert(0, "pair_id", pairs.level + ":" + pairs.src_image + ":" + pairs.trg_image)
    eligible = soc_counts(pairs, keypoints, taxonomy) > 0
    pairs["evaluated"] = evaluation_sample(pairs, eligible, cfg)
    return pairs[PAIR_COLUMNS]


# ------------------------------------------------------------------------------------ correspondences


def build_correspondences(
    image_pairs: pd.DataFrame, keypoints: pd.DataFrame, taxonomy: Taxonomy, evaluated_only: bool = False
) -> pa.Table:
    """Keypoint-level correspondences (CorrespondenceSchema) of every pair, as an Arrow table.

    String columns are dictionary-encoded (``to_pandas()`` gives categoricals). Rows are sorted by pair
    (in `image_pairs` order), kind (soc, cc), source and target keypoint (taxonomy order). SOC: the same
    keypoint visible in both images; CC: per concept, every visible source x target keypoint. Cross
    pairs only use the keypoints their categories share. n_candidates = visible target keypoints of
    the concept; geo = n_candidates >= 2. The joins are sorted-merge joins over integer codes.
    """
    enc = _encode(_select_pairs(image_pairs, evaluated_only), keypoints, taxonomy)
    return _decode(_match(enc, 0, len(enc.pair_ids)), enc, slice_pairs=False)


def iter_correspondences(
    image_pairs: pd.DataFrame,
    keypoints: pd.DataFrame,
    taxonomy: Taxonomy,
    evaluated_only: bool = False,
    batch_rows: int = 1_000_000,
) -> Iterator[pa.Table]:
    """The rows of build_correspondences in batches of whole pairs, about `batch_rows` rows each."""
    if batch_rows < 1:
        raise ValueError(f"batch_rows must be positive, got {batch_rows}")
    enc = _encode(_select_pairs(image_pairs, evaluated_only), keypoints, taxonomy)
    ends = np.cumsum(_rows_per_pair(enc))
    lo, n_pairs = 0, len(enc.pair_ids)
    while lo < n_pairs:
        done = ends[lo - 1] if lo else 0
        hi = max(int(np.searchsorted(ends, done + batch_rows, "right")), lo + 1)
        codes = _match(enc, lo, hi)
        if len(codes["pair"]):
            yield _decode(codes, enc, slice_pairs=True)
        lo = hi


def write_correspondences(
    image_pairs: pd.DataFrame,
    keypoints: pd.DataFrame,
    taxonomy: Taxonomy,
    path: str,
    evaluated_only: bool = False,
    batch_rows: int = 1_000_000,
) -> int:
    """Stream the correspondences to one Parquet file at an fsspec `path` atomically; returns the row count.

    Batches of whole pairs go to a temporary sibling, moved onto `path` once complete; at most one batch
    is in memory.
    """
    fs, p = storage.filesystem(path)
    parent = p.rsplit("/", 1)[0]
    fs.makedirs(parent, exist_ok=True)
    tmp = f"{parent}/.tmp-{uuid.uuid4().hex}-{p.rsplit('/', 1)[-1]}"
    rows = 0
    try:
        with fs.open(tmp, "wb") as f:
            writer = None
            for table in iter_correspondences(image_pairs, keypoints, taxonomy, evaluated_only, batch_rows):
                if writer is None:
                    writer = pq.ParquetWriter(f, table.schema, compression="zstd")
                writer.write_table(table)
                rows += table.num_rows
            if writer is None:  # no rows: still write a file with the schema
                empty = build_correspondences(image_pairs.iloc[:0], keypoints.iloc[:0], taxonomy)
                writer = pq.ParquetWriter(f, empty.schema, compression="zstd")
            writer.close()
        fs.mv(tmp, p)
    finally:
        if fs.exists(tmp):
            fs.rm(tmp)
    return rows


def candidate_keypoints(
    image_pairs: pd.DataFrame, keypoints: pd.DataFrame, taxonomy: Taxonomy, side: str = "trg"
) -> pd.DataFrame:
    """Per pair, the visible keypoints of one side ('src' or 'trg') that the pair's categories share.

    Columns pair_id, keypoint, concept (categoricals); sorted by pair (input order) and keypoint
    (taxonomy order). These are a target's SOC-geo / four-choice candidates.
    """
    if side not in ("src", "trg"):
        raise ValueError(f"side must be 'src' or 'trg', got {side!r}")
    enc = _encode(image_pairs.reset_index(drop=True), keypoints, taxonomy)
    rows = enc.src if side == "src" else enc.trg
    return pd.DataFrame({
        "pair_id": pd.Categorical.from_codes(rows.pair, enc.pair_ids.to_pandas()),
        "keypoint": pd.Categorical.from_codes(rows.kp, enc.kp_names.to_pandas()),
        "concept": pd.Categorical.from_codes(rows.concept, enc.concept_names.to_pandas()),
    })


# -------------------------------------------------------------------------------------------- counts


COUNT_KINDS = ("image_pairs", "soc", "soc_geo", "cc")


def pair_counts(image_pairs: pd.DataFrame, correspondences: pa.Table | pd.DataFrame) -> pd.DataFrame:
    """Release-style counts: per level and kind (image_pairs, soc, soc_geo, cc), all and evaluated.

    Columns level, kind, total, evaluated (a correspondence counts as evaluated when its pair is).
    """
    if not isinstance(correspondences, pa.Table | pd.DataFrame):
        raise TypeError(f"correspondences must be an Arrow Table or a DataFrame, not {type(correspondences)}")
    pairs = image_pairs[["pair_id", "level", "evaluated"]]
    pair_index = pd.Index(pairs.pair_id.astype(str))
    pair_eval = pairs.evaluated.to_numpy(dtype=bool)
    pair_level = column_codes(pairs.level, pd.Index(LEVEL_NAMES))
    pair = column_codes(correspondences["pair_id"], pair_index)
    level = column_codes(correspondences["level"], pd.Index(LEVEL_NAMES))
    kind = column_codes(correspondences["kind"], pd.Index(KIND_NAMES))
    geo = np.asarray(correspondences["geo"], dtype=bool)
    evaluated = (pair >= 0) & pair_eval[np.maximum(pair, 0)] if len(pair_eval) else np.zeros(len(pair), bool)

    # Cell of each row in the (level, count kind) grid: soc -> 1, soc_geo -> 2 (also counted as soc), cc -> 3.
    n_kinds = len(COUNT_KINDS)
    ok = (level >= 0) & (kind >= 0)
    cell = level * n_kinds + np.where(kind == 0, 1, 3)
    geo_cell = level * n_kinds + 2
    cells = np.concatenate([cell[ok], geo_cell[ok & (kind == 0) & geo]])
    cells_ev = np.concatenate([cell[ok & evaluated], geo_cell[ok & evaluated & (kind == 0) & geo]])
    size = len(LEVEL_NAMES) * n_kinds
    total = np.bincount(cells, minlength=size)
    ev = np.bincount(cells_ev, minlength=size)
    known = pair_level >= 0
    total[: size : n_kinds] = np.bincount(pair_level[known], minlength=len(LEVEL_NAMES))
    ev[: size : n_kinds] = np.bincount(pair_level[known & pair_eval], minlength=len(LEVEL_NAMES))
    return pd.DataFrame({
        "level": np.repeat(LEVEL_NAMES, n_kinds),
        "kind": np.tile(COUNT_KINDS, len(LEVEL_NAMES)),
        "total": total.astype(np.int64),
        "evaluated": ev.astype(np.int64),
    })


# -------------------------------------------------------------------------------------------- checks


def check_image_pairs(
    image_pairs: pd.DataFrame, taxonomy: Taxonomy, images: pd.DataFrame | None = None
) -> list[str]:
    """Problems of an image_pairs table (empty list = fine), each naming offending rows.

    Checks: no self pairs, unique pair ids, known levels, intra pairs within one category, cross
    pairs only between related categories, ancestor = lowest common ancestor, pair_group = target
    category, and (with `images`) images that exist with the stated categories.
    """
    _require_columns(image_pairs, PAIR_COLUMNS, "image_pairs")
    problems: list[str] = []

    def flag(mask: np.ndarray | pd.Series, what: str) -> None:
        bad = image_pairs[np.asarray(mask, dtype=bool)]
        if len(bad):
            problems.append(f"{len(bad)} pair(s) {what}:\n{_show(bad[PAIR_COLUMNS[:8]])}")

    flag(image_pairs.src_image == image_pairs.trg_image, "pair an image with itself")
    flag(image_pairs.pair_id.duplicated(keep=False), "share a pair_id")
    flag(~image_pairs.level.isin(LEVEL_NAMES), f"have a level outside {LEVEL_NAMES}")
    intra = image_pairs.level == "intra"
    flag(intra & (image_pairs.src_category != image_pairs.trg_category), "are intra but cross categories")
    flag(intra & (image_pairs.ancestor != image_pairs.src_category), "are intra with ancestor != category")
    flag(image_pairs.pair_group != image_pairs.trg_category, "have pair_group != target category")
    cats = set(taxonomy.categories)
    flag(~image_pairs.src_category.isin(cats) | ~image_pairs.trg_category.isin(cats),
         "have a category missing from the taxonomy")
    cross = image_pairs[image_pairs.level == "cross"]
    used = (set(cross.src_category) | set(cross.trg_category)) & cats
    related = related_category_pairs(taxonomy, sorted(used))
    merged = cross[["src_category", "trg_category", "ancestor"]].merge(
        related, on=["src_category", "trg_category"], how="left", suffixes=("", "_lca")
    )
    unrelated = np.zeros(len(image_pairs), dtype=bool)
    unrelated[np.flatnonzero((image_pairs.level == "cross").to_numpy())] = merged.ancestor_lca.isna().to_numpy()
    flag(unrelated, "are cross pairs between categories that share no keypoints")
    wrong_anc = np.zeros(len(image_pairs), dtype=bool)
    wrong_anc[np.flatnonzero((image_pairs.level == "cross").to_numpy())] = (
        merged.ancestor_lca.notna() & (merged.ancestor != merged.ancestor_lca)
    ).to_numpy()
    flag(wrong_anc, "have an ancestor other than the categories' lowest common ancestor")
    if images is not None:
        cat = images.drop_duplicates("image_id").set_index("image_id").category
        for side in ("src", "trg"):
            found = image_pairs[f"{side}_image"].map(cat)
            flag(found.isna(), f"have a {side}_image missing from image_set")
            flag(found.notna() & (found != image_pairs[f"{side}_category"]),
                 f"have a {side}_category that differs from image_set's category")
    return problems


def check_correspondences(
    correspondences: pa.Table | pd.DataFrame,
    image_pairs: pd.DataFrame,
    keypoints: pd.DataFrame,
    taxonomy: Taxonomy,
) -> list[str]:
    """Problems of a correspondences table (empty list = fine), each naming offending rows.

    Checks: known pair ids with matching level, known kinds, both keypoints exist and are visible in
    their image, SOC rows match a keypoint with itself, the concept is both keypoints' concept, only
    keypoints the pair's categories share, n_candidates = visible shared target keypoints of the
    concept, geo = n_candidates >= 2. Vectorized over integer codes.
    """
    if not isinstance(correspondences, pa.Table | pd.DataFrame):
        raise TypeError(f"correspondences must be an Arrow Table or a DataFrame, not {type(correspondences)}")
    table = correspondences
    names = table.column_names if isinstance(table, pa.Table) else list(table.columns)
    missing = [c for c in CORRESPONDENCE_COLUMNS if c not in names]
    if missing:
        return [f"correspondences lacks columns {missing}"]
    enc = _encode(image_pairs.reset_index(drop=True), keypoints, taxonomy)
    kp_index, concept_index = pd.Index(enc.kp_names.to_pandas()), pd.Index(enc.concept_names.to_pandas())
    pair = column_codes(table["pair_id"], pd.Index(enc.pair_ids.to_pandas()))
    level = column_codes(table["level"], pd.Index(LEVEL_NAMES))
    kind = column_codes(table["kind"], pd.Index(KIND_NAMES))
    skp = column_codes(table["src_keypoint"], kp_index)
    tkp = column_codes(table["trg_keypoint"], kp_index)
    concept = column_codes(table["concept"], concept_index)
    geo = np.asarray(table["geo"], dtype=bool)
    n = np.asarray(table["n_candidates"], dtype=np.int64)

    known = pair >= 0
    p = np.maximum(pair, 0)

    def vis(img: np.ndarray, kp: np.ndarray) -> np.ndarray:
        ok = known & (img[p] >= 0) & (kp >= 0)
        out = np.zeros(len(pair), dtype=bool)
        out[ok] = enc.visible[img[p][ok], kp[ok]]
        return out

    def shared(kp: np.ndarray) -> np.ndarray:
        return enc.allowed[enc.combo[p], np.maximum(kp, 0)] & (kp >= 0)

    # Visible shared target keypoints per (pair, concept), to recount n_candidates.
    n_con = len(enc.concept_names)
    counts = np.bincount(enc.trg.pair.astype(np.int64) * n_con + enc.trg.concept,
                         minlength=len(enc.pair_ids) * n_con)
    expected_n = np.where(known & (concept >= 0), counts[p * n_con + np.maximum(concept, 0)], -1)
    tests = {
        "name a pair_id missing from image_pairs": ~known,
        "have a level other than their pair's": known & (level != enc.level[p]),
        "have a kind other than 'soc' or 'cc'": kind < 0,
        "have a source keypoint that is missing or not visible in the source image": known & ~vis(enc.src_img, skp),
        "have a target keypoint that is missing or not visible in the target image": known & ~vis(enc.trg_img, tkp),
        "are SOC rows matching two different keypoints": (kind == 0) & (skp != tkp),
        "have a concept other than their keypoints' concept":
            (concept < 0) | (skp < 0) | (tkp < 0)
            | (enc.kp_concept[np.maximum(skp, 0)] != concept) | (enc.kp_concept[np.maximum(tkp, 0)] != concept),
        "use a keypoint the pair's categories do not share": known & ~(shared(skp) & shared(tkp)),
        "have n_candidates != visible shared target keypoints of the concept": known & (n != expected_n),
        "have geo != (n_candidates >= 2)": geo != (n >= 2),
    }
    problems = []
    for what, mask in tests.items():
        bad = np.flatnonzero(mask)
        if len(bad):
            rows = table.take(bad[:_MAX_SHOWN]) if isinstance(table, pa.Table) else table.iloc[bad[:_MAX_SHOWN]]
            rows = rows.to_pandas() if isinstance(rows, pa.Table) else rows
            problems.append(f"{len(bad)} correspondence(s) {what}:\n{_show(rows[CORRESPONDENCE_COLUMNS])}")
    return problems


def require_valid(problems: list[str], table: str) -> None:
    """Raise ValueError listing every problem of `table` (from a check_* function), if there are any."""
    if problems:
        raise ValueError(f"table {table!r} fails its checks:\n" + "\n".join(problems))
