"""Theory baselines that check the metrics: the concept oracle's expected SOC and random-feature chance."""

from __future__ import annotations

import numpy as np
import pandas as pd

from soco_pipeline.evaluation.matching import cells_of, to_unit
from soco_pipeline.evaluation.metrics import (
    PCK_METRICS,
    evaluated_pairs,
    gt_pixels,
    image_info,
    reduce_scores,
    target_xy,
)
from soco_pipeline.evaluation.protocol import ProtocolConfig


def official_mean(scores: pd.DataFrame) -> float:
    """Official reduction (pair -> pair group -> mean) of a per-keypoint `score` column, in 0-100:
    `reduce_scores`' overall value for one backbone, metric and alpha."""
    if scores.empty:
        return float("nan")
    one = scores[["pair_group", "pair_id", "score"]].assign(
        backbone="", metric="", alpha=0.0, supercategory=""
    )
    red = reduce_scores(one, reductions=("official",))
    return float(red.loc[red["scope"] == "all", "value"].iloc[0])


def _soc_rows(correspondences, image_pairs, level: str, geo: bool, min_candidates: int) -> pd.DataFrame:
    corr = correspondences.merge(evaluated_pairs(image_pairs).drop(columns="level"), on="pair_id")
    rows = corr[(corr["kind"] == "soc") & (corr["level"] == level)]
    if geo:
        rows = rows[rows["geo"].astype(bool) & (rows["n_candidates"] >= min_candidates)]
    return rows, corr[corr["kind"] == "cc"]


def expected_concept_oracle_soc(
    correspondences: pd.DataFrame,
    image_pairs: pd.DataFrame,
    keypoints: pd.DataFrame | None = None,
    images: pd.DataFrame | None = None,
    alpha: float = 0.1,
    geo: bool = False,
    level: str = "intra",
    min_candidates: int = 2,
) -> float:
    """Expected SOC (official reduction, 0-100) of a backbone that knows the concept, not the identity.

    Assumptions: the oracle picks one of the k visible same-concept target keypoints uniformly (random
    tie-break) and its prediction lands on that keypoint. Without keypoints/images each keypoint scores
    1/k (instances assumed farther apart than the PCK radius); with them it scores (number of candidates
    within alpha * max bbox side of the true keypoint, itself included) / k. geo=True: the SOC-geo subset.
    """
    rows, cc = _soc_rows(correspondences, image_pairs, level, geo, min_candidates)
    if keypoints is None or images is None:
        return official_mean(rows.assign(score=1.0 / rows["n_candidates"].to_numpy()))
    c = rows[["pair_id", "src_keypoint", "trg_keypoint", "trg_image", "pair_group"]].merge(
        cc[["pair_id", "src_keypoint", "trg_keypoint"]].rename(columns={"trg_keypoint": "cand"}),
        on=["pair_id", "src_keypoint"],
    )
    trg = c["trg_image"].to_numpy()
    true = target_xy(keypoints, trg, c["trg_keypoint"].to_numpy())
    cand = target_xy(keypoints, trg, c["cand"].to_numpy())
    radius = image_info(images, trg)["bbox"].to_numpy()
    c["score"] = np.hypot(*(cand - true).T) < alpha * radius
    per = c.groupby(["pair_group", "pair_id", "src_keypoint"], as_index=False, observed=True)["score"].mean()
    return official_mean(per)


def random_feature_chance(
    correspondences: pd.DataFrame,
    image_pairs: pd.DataFrame,
    keypoints: pd.DataFrame,
    images: pd.DataFrame,
    grid: tuple[int, int],
    input_size: int,
    protocol: ProtocolConfig,
    metric: str = "soc",
    alpha: float | None = None,
    support: str = "grid",
    chunk: int = 4096,
) -> float:
    """Expected PCK (official reduction, 0-100) of a uniformly random patch pick on an h x w grid.

    Per keypoint: the fraction of candidate cells whose reported point (protocol.prediction_point,
    in target pixels) lies within the radius of the target keypoint (CC: of any keypoint of its
    group). Candidates: every cell of the padded grid (support='grid', i.i.d. features everywhere) or
    only cells whose point lies inside the image (support='image'); for soc_geo, the distinct
    patches of the same-concept candidates.
    """
    alpha = protocol.headline_alpha if alpha is None else alpha
    h, w = grid
    level = "cross" if metric in ("cross_soc", "cross_cc") else "intra"
    rows, cc = _soc_rows(
        correspondences, image_pairs, level, metric == "soc_geo", protocol.geo_min_candidates
    )
    if metric in ("cc", "cross_cc"):
        rows = cc[cc["level"] == level]
    if metric not in PCK_METRICS:
        raise ValueError(f"metric {metric!r}: expected one of {PCK_METRICS}")
    if support not in ("grid", "image"):
        raise ValueError(f"support {support!r}: expected 'grid' or 'image'")
    trg = rows["trg_image"].to_numpy()
    info = image_info(images, trg)
    sizes = info[["W", "H"]].to_numpy()
    side = sizes.max(axis=1)
    gt = gt_pixels(
        target_xy(keypoints, trg, rows["trg_keypoint"].to_numpy()),
        sizes,
        np.full(len(rows), input_size),
        protocol,
    )
    thr = alpha * info["bbox"].to_numpy()
    off = 0.5 if protocol.prediction_point == "center" else 0.0
    cu = ((np.arange(w) + off) / w)[None, :].repeat(h, 0).reshape(-1)
    cv = ((np.arange(h) + off) / h)[:, None].repeat(w, 1).reshape(-1)

    if metric == "soc_geo":
        c = rows[["pair_id", "src_keypoint", "pair_group"]].reset_index(drop=True)
        c["row"] = np.arange(len(c))
        c = c.merge(
            cc[["pair_id", "src_keypoint", "trg_keypoint", "trg_image"]], on=["pair_id", "src_keypoint"]
        )
        ci = image_info(images, c["trg_image"].to_numpy())
        uv = to_unit(
            target_xy(keypoints, c["trg_image"].to_numpy(), c["trg_keypoint"].to_numpy()),
            ci[["W", "H"]].to_numpy(),
            input_size,
            protocol,
        )
        c["cell"] = cells_of(uv, h, w)
        c = c.drop_duplicates(["row", "cell"])
        r = c["row"].to_numpy()
        px = np.stack([cu[c["cell"]], cv[c["cell"]]], 1) * side[r, None]
        c["score"] = np.hypot(*(px - gt[r]).T) < thr[r]
        per = c.groupby(["pair_group", "pair_id", "src_keypoint"], as_index=False, observed=True)[
            "score"
        ].mean()
        return official_mean(per)

    hits = np.zeros((len(rows), h * w), dtype=bool)
    for a in range(0, len(rows), chunk):
        s = slice(a, a + chunk)
        dx = cu[None, :] * side[s, None] - gt[s, 0:1]
        dy = cv[None, :] * side[s, None] - gt[s, 1:2]
        hits[s] = np.hypot(dx, dy) < thr[s, None]
    inside = (
        np.ones_like(hits)
        if support == "grid"
        else ((cu[None, :] * side[:, None] < sizes[:, 0:1]) & (cv[None, :] * side[:, None] < sizes[:, 1:2]))
    )
    keys = rows[["pair_group", "pair_id", "src_keypoint"]].reset_index(drop=True)
    if metric in ("cc", "cross_cc"):  # a cell counts if it is within the radius of any keypoint of the group
        order = np.lexsort((keys["src_keypoint"], keys["pair_id"]))
        keys, hits, inside = keys.iloc[order].reset_index(drop=True), hits[order], inside[order]
        starts = np.flatnonzero(~keys.duplicated(["pair_id", "src_keypoint"]).to_numpy())
        hits = np.logical_or.reduceat(hits, starts, axis=0)
        inside = inside[starts]
        keys = keys.iloc[starts].reset_index(drop=True)
    score = (hits & inside).sum(1) / inside.sum(1)
    return official_mean(keys.assign(score=score))
