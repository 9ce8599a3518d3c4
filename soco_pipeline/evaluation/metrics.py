"""PCK metrics (CC, SOC, SOC-geo, Cross-SOC, cross-level CC) and 4-choice accuracy, reduced the official way.

Scoring reads stored predictions only (no features), so another alpha or threshold is a re-score.
PCK@alpha: a prediction is correct iff its distance to the target keypoint is < alpha * max(target bbox
w, h) in target pixels (the official normalised form times max(W, H)). Official reduction: mean over
a pair's keypoints -> mean over the pairs of a pair group (category) -> unweighted mean over categories;
'keypoint' pools all keypoints. Values are 0-100.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from soco_pipeline.evaluation.matching import visible_keypoint_xy
from soco_pipeline.evaluation.protocol import ProtocolConfig
from soco_pipeline.taxonomy import Taxonomy

METRIC_COLUMNS = ["backbone", "metric", "alpha", "reduction", "scope", "group", "value", "n"]
PCK_METRICS = ("cc", "soc", "soc_geo", "cross_soc", "cross_cc")
_KEYS = ["backbone", "metric", "alpha"]


class MetricsError(ValueError):
    """Predictions and ground truth disagree; the message names the record and the fix."""


# ----------------------------------------------------------------------------- ground truth
def evaluated_pairs(image_pairs: pd.DataFrame) -> pd.DataFrame:
    """The pairs that are scored (`evaluated`), with the columns scoring needs."""
    return image_pairs.loc[
        image_pairs["evaluated"].astype(bool), ["pair_id", "level", "pair_group", "trg_image"]
    ]


def image_info(images: pd.DataFrame, image_ids: np.ndarray) -> pd.DataFrame:
    """width, height and the longer bbox side of each target image (a clear error for unknown ids)."""
    im = images.set_index("image_id").reindex(image_ids)
    if im["width"].isna().any():
        missing = pd.unique(np.asarray(image_ids)[im["width"].isna().to_numpy()])[:5]
        raise MetricsError(f"target images {list(missing)} are not in the image set: rebuild the pairs")
    return pd.DataFrame(
        {
            "W": im["width"].to_numpy(np.float64),
            "H": im["height"].to_numpy(np.float64),
            "bbox": np.maximum(im["bbox_r"] - im["bbox_l"], im["bbox_b"] - im["bbox_t"]).to_numpy(np.float64),
        }
    )


def target_xy(keypoints: pd.DataFrame, image_ids: np.ndarray, names: np.ndarray) -> np.ndarray:
    """Pixel positions of the named visible keypoints on the target images (MetricsError when one is missing)."""
    return visible_keypoint_xy(keypoints, image_ids, names, "target", MetricsError)


def gt_pixels(
    xy: np.ndarray, sizes: np.ndarray, input_size: np.ndarray, protocol: ProtocolConfig
) -> np.ndarray:
    """The ground-truth point scored against: raw, or through the same keypoint scaling (official)."""
    if protocol.target_keypoint == "raw":
        return xy
    side = sizes.max(axis=1, keepdims=True)
    if protocol.keypoint_scaling == "exact":
        return xy
    # Same int() truncations as the source (step 4), mapped back to pixels; rows of equal S at once.
    s = input_size.astype(np.float64)[:, None]
    return np.trunc(np.trunc(xy) * (s / side)) / s * side


def _correct(err: np.ndarray, radius: np.ndarray, alphas, protocol: ProtocolConfig) -> np.ndarray:
    """(n x len(alphas)) correctness: err < alpha * radius (strict) or <= (inclusive)."""
    thr = radius[:, None] * np.asarray(alphas, dtype=np.float64)[None, :]
    return err[:, None] < thr if protocol.threshold == "strict" else err[:, None] <= thr


# ----------------------------------------------------------------------------- reduction
def _attach_supercategory(df: pd.DataFrame, taxonomy: Taxonomy) -> pd.DataFrame:
    cats = pd.unique(df["pair_group"])
    try:
        sup = {c: taxonomy.supercategory(c) for c in cats}
    except KeyError as e:
        raise MetricsError(f"pair group is not a taxonomy category: {e}") from None
    return df.assign(supercategory=df["pair_group"].map(sup))


def reduce_scores(kp: pd.DataFrame, reductions=("official", "keypoint")) -> pd.DataFrame:
    """Per-keypoint scores reduced to all / supercategory / category METRIC_COLUMNS rows."""
    out = []
    g = dict(dropna=False, sort=True)
    if "official" in reductions:
        pair = kp.groupby(_KEYS + ["supercategory", "pair_group", "pair_id"], **g)["score"].agg(
            ["mean", "size"]
        )
        cat = pair.groupby(_KEYS + ["supercategory", "pair_group"], **g).agg(
            value=("mean", "mean"), n=("size", "sum")
        )
        sup = cat.groupby(_KEYS + ["supercategory"], **g).agg(value=("value", "mean"), n=("n", "sum"))
        alls = cat.groupby(_KEYS, **g).agg(value=("value", "mean"), n=("n", "sum"))
        out += _scoped(cat, sup, alls, "official")
    if "keypoint" in reductions:
        cat = kp.groupby(_KEYS + ["supercategory", "pair_group"], **g)["score"].agg(value="mean", n="size")
        sup = kp.groupby(_KEYS + ["supercategory"], **g)["score"].agg(value="mean", n="size")
        alls = kp.groupby(_KEYS, **g)["score"].agg(value="mean", n="size")
        out += _scoped(cat, sup, alls, "keypoint")
    res = pd.concat(out, ignore_index=True) if out else pd.DataFrame(columns=METRIC_COLUMNS)
    res["value"] = 100.0 * res["value"].astype(np.float64)
    res["n"] = res["n"].astype(np.int64)
    return res[METRIC_COLUMNS]


def _scoped(cat: pd.DataFrame, sup: pd.DataFrame, alls: pd.DataFrame, reduction: str) -> list[pd.DataFrame]:
    cat = cat.reset_index().rename(columns={"pair_group": "group"}).drop(columns="supercategory")
    sup = sup.reset_index().rename(columns={"supercategory": "group"})
    alls = alls.reset_index().assign(group="all")
    return [
        alls.assign(scope="all", reduction=reduction),
        sup.assign(scope="supercategory", reduction=reduction),
        cat.assign(scope="category", reduction=reduction),
    ]


# ----------------------------------------------------------------------------- PCK
def _score_rows(
    rows: pd.DataFrame, preds: pd.DataFrame, keypoints, images, protocol: ProtocolConfig, metric: str
) -> pd.DataFrame:
    """Per correspondence row: backbone, pair, group, error (px) and radius (max bbox side, px)."""
    m = rows.merge(preds, on=["pair_id", "src_keypoint"], how="left")
    if m["pred_x"].isna().any():
        r = m[m["pred_x"].isna()].iloc[0]
        raise MetricsError(
            f"{metric}: no prediction for pair {r.pair_id!r}, source keypoint {r.src_keypoint!r}: the "
            f"predictions are stale; re-materialize predictions for this backbone"
        )
    trg = m["trg_image"].to_numpy()
    info = image_info(images, trg)
    sizes = info[["W", "H"]].to_numpy()
    xy = target_xy(keypoints, trg, m["trg_keypoint"].to_numpy())
    if protocol.target_keypoint == "scaled" and protocol.keypoint_scaling == "official_int":
        if "input_size" not in m.columns or m["input_size"].isna().any():
            raise MetricsError(
                f"{metric}: predictions lack `input_size`, which scaled ground truth needs; re-run predictions "
                f"or set target_keypoint: raw in the protocol"
            )
        gt = gt_pixels(xy, sizes, m["input_size"].to_numpy(), protocol)
    else:
        gt = gt_pixels(xy, sizes, np.zeros(len(m)), protocol)
    err = np.hypot(m["pred_x"].to_numpy() - gt[:, 0], m["pred_y"].to_numpy() - gt[:, 1])
    return pd.DataFrame(
        {
            "backbone": m["backbone"].to_numpy(),
            "pair_id": m["pair_id"].to_numpy(),
            "src_keypoint": m["src_keypoint"].to_numpy(),
            "pair_group": m["pair_group"].to_numpy(),
            "err": err,
            "radius": info["bbox"].to_numpy(),
        }
    )


def pck_keypoints(
    predictions: pd.DataFrame,
    correspondences: pd.DataFrame,
    keypoints: pd.DataFrame,
    images: pd.DataFrame,
    image_pairs: pd.DataFrame,
    protocol: ProtocolConfig,
    alphas=None,
) -> pd.DataFrame:
    """Per-keypoint 0/1 correctness of cc, soc, soc_geo, cross_soc and cross_cc per alpha."""
    alphas = tuple(protocol.alphas if alphas is None else alphas)
    corr = correspondences.merge(evaluated_pairs(image_pairs).drop(columns="level"), on="pair_id")
    soc = corr[corr["kind"] == "soc"]
    free = predictions[predictions["mode"] == "free"]
    geo = predictions[predictions["mode"] == "geo"]
    geo_rows = soc[
        (soc["level"] == "intra")
        & soc["geo"].astype(bool)
        & (soc["n_candidates"] >= protocol.geo_min_candidates)
    ]
    parts = {
        "soc": (soc[soc["level"] == "intra"], free),
        "cross_soc": (soc[soc["level"] == "cross"], free),
        "soc_geo": (geo_rows, geo),
        "cc": (corr[(corr["kind"] == "cc") & (corr["level"] == "intra")], free),
        # CC of the cross pairs, as the official scorer reports it (metrics.cross.overall.concept_pck).
        "cross_cc": (corr[(corr["kind"] == "cc") & (corr["level"] == "cross")], free),
    }
    frames = []
    for metric, (rows, preds) in parts.items():
        if rows.empty:
            continue
        s = _score_rows(rows, preds, keypoints, images, protocol, metric)
        if metric in ("cc", "cross_cc"):  # the nearest target of the concept's CC group
            s = s.groupby(
                ["backbone", "pair_id", "src_keypoint"], as_index=False, sort=False, observed=True
            ).agg(pair_group=("pair_group", "first"), err=("err", "min"), radius=("radius", "first"))
        ok = _correct(s["err"].to_numpy(), s["radius"].to_numpy(), alphas, protocol)
        frames.append(
            s.loc[s.index.repeat(len(alphas))].assign(
                metric=metric, alpha=np.tile(alphas, len(s)), score=ok.reshape(-1).astype(np.float64)
            )
        )
    if not frames:
        return pd.DataFrame(
            columns=_KEYS + ["pair_id", "pair_group", "src_keypoint", "err", "radius", "score"]
        )
    return pd.concat(frames, ignore_index=True)


def four_choice_items(four_choice_predictions: pd.DataFrame, image_pairs: pd.DataFrame) -> pd.DataFrame:
    """Per 4-choice item: plain (rotation 0) and circular (every rotation) correctness as scores."""
    fc = four_choice_predictions.merge(image_pairs[["pair_id", "pair_group"]], on="pair_id", how="left")
    if fc["pair_group"].isna().any():
        raise MetricsError(
            f"4-choice item of pair {fc.loc[fc['pair_group'].isna(), 'pair_id'].iloc[0]!r} is not in image_pairs"
        )
    picks = fc[[f"pick_{r}" for r in range(4)]].to_numpy()
    right = picks == fc["answer"].to_numpy()[:, None]
    base = fc[["backbone", "pair_id", "src_keypoint", "pair_group"]]
    return pd.concat(
        [
            base.assign(metric="four_choice", alpha=np.nan, score=right[:, 0].astype(np.float64)),
            base.assign(
                metric="four_choice_circular", alpha=np.nan, score=right.all(axis=1).astype(np.float64)
            ),
        ],
        ignore_index=True,
    )


def scored_elements(
    predictions: pd.DataFrame,
    four_choice_predictions: pd.DataFrame | None,
    correspondences: pd.DataFrame,
    keypoints: pd.DataFrame,
    images: pd.DataFrame,
    image_pairs: pd.DataFrame,
    protocol: ProtocolConfig,
    alphas=None,
) -> pd.DataFrame:
    """Every scored element before reduction: PCK keypoints per alpha, 4-choice items."""
    cols = _KEYS + ["pair_id", "pair_group", "src_keypoint", "score"]
    kp = pck_keypoints(predictions, correspondences, keypoints, images, image_pairs, protocol, alphas)
    frames = [kp[cols]] if len(kp) else []
    if four_choice_predictions is not None and len(four_choice_predictions):
        fc = four_choice_items(four_choice_predictions, image_pairs)
        fc = fc[fc["pair_id"].isin(evaluated_pairs(image_pairs)["pair_id"])]
        if len(fc):
            frames.append(fc[cols])
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=cols)


def compute_metrics(
    predictions: pd.DataFrame,
    four_choice_predictions: pd.DataFrame | None,
    correspondences: pd.DataFrame,
    keypoints: pd.DataFrame,
    images: pd.DataFrame,
    image_pairs: pd.DataFrame,
    taxonomy: Taxonomy,
    protocol: ProtocolConfig,
    alphas=None,
) -> pd.DataFrame:
    """All metrics of `predictions` as a long METRIC_COLUMNS table (docs/results.md)."""
    tables = (predictions, four_choice_predictions, correspondences, keypoints, images, image_pairs)
    scores = scored_elements(*tables, protocol, alphas)
    if scores.empty:
        return pd.DataFrame(columns=METRIC_COLUMNS)
    return reduce_scores(_attach_supercategory(scores, taxonomy), protocol.reductions)
