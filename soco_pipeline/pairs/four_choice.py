"""Four-choice items: per evaluated SOC correspondence, four target keypoints A-D, one of them right (DESIGN
section 1). All draws come from one seeded generator in a fixed row order, so the table is deterministic."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from soco_pipeline.pairs.common import column_codes, table_columns
from soco_pipeline.pairs.correspondences import candidate_keypoints
from soco_pipeline.taxonomy import Taxonomy, load_taxonomy

N_OPTIONS = 4
OPTION_COLUMNS = ["option_a", "option_b", "option_c", "option_d"]
_STREAM_FOUR_CHOICE = 3


def _soc_items(
    correspondences: pa.Table | pd.DataFrame, pair_ids: pd.Index, kp_index: pd.Index, concept_index: pd.Index
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(pair, keypoint, concept) codes of the SOC rows whose pair is in `pair_ids`."""
    missing = {"pair_id", "kind", "trg_keypoint", "concept"} - set(
        table_columns(correspondences, "correspondences")
    )
    if missing:
        raise ValueError(f"correspondences lacks columns {sorted(missing)}")
    kind = column_codes(correspondences["kind"], pd.Index(["soc", "cc"]))
    soc = np.flatnonzero(kind == 0)
    pair = column_codes(correspondences["pair_id"], pair_ids)[soc]
    keep = soc[pair >= 0]
    pair = pair[pair >= 0]
    kp = column_codes(correspondences["trg_keypoint"], kp_index)[keep]
    concept = column_codes(correspondences["concept"], concept_index)[keep]
    if (kp < 0).any() or (concept < 0).any():
        raise ValueError(
            "correspondences name keypoints or concepts missing from the taxonomy; rebuild them "
            "with soco_pipeline.pairs.build_correspondences against the current taxonomy"
        )
    return pair, kp, concept


def build_four_choice(
    image_pairs: pd.DataFrame,
    correspondences: pa.Table | pd.DataFrame,
    keypoints: pd.DataFrame,
    seed: int,
    taxonomy: Taxonomy | None = None,
) -> pd.DataFrame:
    """Four-choice items (FourChoiceSchema) for every SOC correspondence of the evaluated pairs: the right
    target keypoint, a same-concept distractor when there is one, the rest random; `answer` is its position
    (0-3). Items with fewer than four candidates are skipped; sorted by pair_id and source keypoint."""
    taxonomy = taxonomy if taxonomy is not None else load_taxonomy()
    evaluated = image_pairs[image_pairs.evaluated.astype(bool)].sort_values("pair_id", ignore_index=True)
    pair_ids = pd.Index(evaluated.pair_id.astype(str))
    kp_index = pd.Index(list(taxonomy.keypoints))
    concept_index = pd.Index(list(taxonomy.concepts))

    item_pair, item_kp, item_concept = _soc_items(correspondences, pair_ids, kp_index, concept_index)
    order = np.lexsort((item_kp, item_pair))
    item_pair, item_kp, item_concept = item_pair[order], item_kp[order], item_concept[order]

    pool = candidate_keypoints(evaluated, keypoints, taxonomy, side="trg")  # sorted by pair, keypoint
    pool_pair = pool.pair_id.cat.codes.to_numpy().astype(np.int64)  # codes follow pair_ids' order
    pool_kp = column_codes(pool.keypoint, kp_index)
    pool_concept = column_codes(pool.concept, concept_index)
    n_pool = np.bincount(pool_pair, minlength=len(pair_ids))
    pool_start = np.cumsum(n_pool) - n_pool

    enough = n_pool[item_pair] >= N_OPTIONS
    item_pair, item_kp, item_concept = item_pair[enough], item_kp[enough], item_concept[enough]
    n_items = len(item_pair)
    if n_items == 0:
        return pd.DataFrame(
            {c: pd.Series(dtype=str) for c in ["pair_id", "src_keypoint", *OPTION_COLUMNS]}
            | {"answer": pd.Series(dtype=np.int64)}
        )
    rng = np.random.default_rng([seed, _STREAM_FOUR_CHOICE])

    # One row per item, one column per candidate of its pair's pool (padded to the largest pool).
    width = int(n_pool.max())
    col = np.arange(width)
    valid = col[None, :] < n_pool[item_pair][:, None]
    cand = np.where(valid, pool_start[item_pair][:, None] + col[None, :], 0)
    cand_kp = pool_kp[cand]
    valid &= cand_kp != item_kp[:, None]
    key = np.where(valid, rng.random((n_items, width)), np.inf)
    # The same-concept candidate with the smallest key jumps the queue; the rest go in key order.
    same = valid & (pool_concept[cand] == item_concept[:, None])
    has_same = same.any(axis=1)
    best_same = np.argmin(np.where(same, key, np.inf), axis=1)
    key[np.flatnonzero(has_same), best_same[has_same]] = -1.0
    pick = np.argpartition(key, N_OPTIONS - 2, axis=1)[:, : N_OPTIONS - 1]
    distractors = np.take_along_axis(cand_kp, pick, axis=1)

    options = np.column_stack([item_kp, distractors])
    perm = np.argsort(rng.random((n_items, N_OPTIONS)), axis=1)
    options = np.take_along_axis(options, perm, axis=1)
    answer = np.argmax(perm == 0, axis=1)

    names = kp_index.to_numpy()
    out = pd.DataFrame({"pair_id": pair_ids.to_numpy()[item_pair], "src_keypoint": names[item_kp]})
    for j, name in enumerate(OPTION_COLUMNS):
        out[name] = names[options[:, j]]
    out["answer"] = answer.astype(np.int64)
    return out
