"""Release-style pair counts and the checks of the pair tables."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from soco_pipeline.pairs.common import (
    CORRESPONDENCE_COLUMNS,
    KIND_NAMES,
    LEVEL_NAMES,
    MAX_SHOWN,
    PAIR_COLUMNS,
    column_codes,
    related_category_pairs,
    require_columns,
    show_rows,
    table_columns,
)
from soco_pipeline.pairs.encoding import encode_pairs
from soco_pipeline.taxonomy import Taxonomy

COUNT_KINDS = ("image_pairs", "soc", "soc_geo", "cc")


def pair_counts(image_pairs: pd.DataFrame, correspondences: pa.Table | pd.DataFrame) -> pd.DataFrame:
    """Release-style counts per level and kind: total and evaluated (a correspondence is when its pair is)."""
    table_columns(correspondences, "correspondences")
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
    total[:size:n_kinds] = np.bincount(pair_level[known], minlength=len(LEVEL_NAMES))
    ev[:size:n_kinds] = np.bincount(pair_level[known & pair_eval], minlength=len(LEVEL_NAMES))
    return pd.DataFrame(
        {
            "level": np.repeat(LEVEL_NAMES, n_kinds),
            "kind": np.tile(COUNT_KINDS, len(LEVEL_NAMES)),
            "total": total.astype(np.int64),
            "evaluated": ev.astype(np.int64),
        }
    )


def check_image_pairs(
    image_pairs: pd.DataFrame, taxonomy: Taxonomy, images: pd.DataFrame | None = None
) -> list[str]:
    """Problems of an image_pairs table (empty list = fine), each naming offending rows."""
    require_columns(image_pairs, PAIR_COLUMNS, "image_pairs")
    problems: list[str] = []

    def flag(mask: np.ndarray | pd.Series, what: str) -> None:
        bad = image_pairs[np.asarray(mask, dtype=bool)]
        if len(bad):
            problems.append(f"{len(bad)} pair(s) {what}:\n{show_rows(bad[PAIR_COLUMNS[:8]])}")

    flag(image_pairs.src_image == image_pairs.trg_image, "pair an image with itself")
    flag(image_pairs.pair_id.duplicated(keep=False), "share a pair_id")
    flag(~image_pairs.level.isin(LEVEL_NAMES), f"have a level outside {LEVEL_NAMES}")
    intra = image_pairs.level == "intra"
    flag(intra & (image_pairs.src_category != image_pairs.trg_category), "are intra but cross categories")
    flag(intra & (image_pairs.ancestor != image_pairs.src_category), "are intra with ancestor != category")
    flag(image_pairs.pair_group != image_pairs.trg_category, "have pair_group != target category")
    cats = set(taxonomy.categories)
    flag(
        ~image_pairs.src_category.isin(cats) | ~image_pairs.trg_category.isin(cats),
        "have a category missing from the taxonomy",
    )
    cross = image_pairs[image_pairs.level == "cross"]
    used = (set(cross.src_category) | set(cross.trg_category)) & cats
    related = related_category_pairs(taxonomy, sorted(used))
    merged = cross[["src_category", "trg_category", "ancestor"]].merge(
        related, on=["src_category", "trg_category"], how="left", suffixes=("", "_lca")
    )
    cross_rows = np.flatnonzero((image_pairs.level == "cross").to_numpy())
    unrelated, wrong_anc = np.zeros((2, len(image_pairs)), dtype=bool)
    unrelated[cross_rows] = merged.ancestor_lca.isna().to_numpy()
    wrong_anc[cross_rows] = (
        merged.ancestor_lca.notna() & (merged.ancestor != merged.ancestor_lca)
    ).to_numpy()
    flag(unrelated, "are cross pairs between categories that share no keypoints")
    flag(wrong_anc, "have an ancestor other than the categories' lowest common ancestor")
    if images is not None:
        cat = images.drop_duplicates("image_id").set_index("image_id").category
        for side in ("src", "trg"):
            found = image_pairs[f"{side}_image"].map(cat)
            flag(found.isna(), f"have a {side}_image missing from image_set")
            flag(
                found.notna() & (found != image_pairs[f"{side}_category"]),
                f"have a {side}_category that differs from image_set's category",
            )
    return problems


def check_correspondences(
    correspondences: pa.Table | pd.DataFrame,
    image_pairs: pd.DataFrame,
    keypoints: pd.DataFrame,
    taxonomy: Taxonomy,
) -> list[str]:
    """Problems of a correspondences table (empty list = fine), each naming offending rows (vectorized)."""
    table = correspondences
    names = table_columns(table, "correspondences")
    missing = [c for c in CORRESPONDENCE_COLUMNS if c not in names]
    if missing:
        return [f"correspondences lacks columns {missing}"]
    enc = encode_pairs(image_pairs.reset_index(drop=True), keypoints, taxonomy)
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
    counts = np.bincount(
        enc.trg.pair.astype(np.int64) * n_con + enc.trg.concept, minlength=len(enc.pair_ids) * n_con
    )
    expected_n = np.where(known & (concept >= 0), counts[p * n_con + np.maximum(concept, 0)], -1)
    tests = {
        "name a pair_id missing from image_pairs": ~known,
        "have a level other than their pair's": known & (level != enc.level[p]),
        "have a kind other than 'soc' or 'cc'": kind < 0,
        "have a source keypoint that is missing or not visible in the source image": known
        & ~vis(enc.src_img, skp),
        "have a target keypoint that is missing or not visible in the target image": known
        & ~vis(enc.trg_img, tkp),
        "are SOC rows matching two different keypoints": (kind == 0) & (skp != tkp),
        "have a concept other than their keypoints' concept": (concept < 0)
        | (skp < 0)
        | (tkp < 0)
        | (enc.kp_concept[np.maximum(skp, 0)] != concept)
        | (enc.kp_concept[np.maximum(tkp, 0)] != concept),
        "use a keypoint the pair's categories do not share": known & ~(shared(skp) & shared(tkp)),
        "have n_candidates != visible shared target keypoints of the concept": known & (n != expected_n),
        "have geo != (n_candidates >= 2)": geo != (n >= 2),
    }
    problems = []
    for what, mask in tests.items():
        bad = np.flatnonzero(mask)
        if len(bad):
            rows = table.take(bad[:MAX_SHOWN]) if isinstance(table, pa.Table) else table.iloc[bad[:MAX_SHOWN]]
            rows = rows.to_pandas() if isinstance(rows, pa.Table) else rows
            problems.append(
                f"{len(bad)} correspondence(s) {what}:\n{show_rows(rows[CORRESPONDENCE_COLUMNS])}"
            )
    return problems
