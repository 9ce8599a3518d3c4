"""PCK metrics (CC, SOC, SOC-geo, Cross-SOC), 4-choice accuracy, the leaderboard, and theory baselines.

Scoring reads stored predictions only (no features), so another alpha or threshold is a re-score.
PCK@alpha: a prediction is correct iff its distance to the target keypoint is < alpha * max(target bbox
w, h) in target pixels (the official normalised form times max(W, H)). Official reduction: mean over
a pair's keypoints -> mean over the pairs of a pair group (category) -> unweighted mean over categories;
'keypoint' pools all keypoints. Values are 0-100.
"""

from __future__ import annotations

import io

import numpy as np
import pandas as pd

from soco_pipeline.matching import cells_of, to_unit, visible_keypoint_xy
from soco_pipeline.protocol import ProtocolConfig
from soco_pipeline.storage import write_bytes_atomic
from soco_pipeline.taxonomy import Taxonomy

METRIC_COLUMNS = ["backbone", "metric", "alpha", "reduction", "scope", "group", "value", "n"]
PCK_METRICS = ("cc", "soc", "soc_geo", "cross_soc")
_KEYS = ["backbone", "metric", "alpha"]


class MetricsError(ValueError):
    """Predictions and ground truth disagree; the message names the record and the fix."""


# ----------------------------------------------------------------------------- ground truth
def _evaluated_pairs(image_pairs: pd.DataFrame) -> pd.DataFrame:
    return image_pairs.loc[
        image_pairs["evaluated"].astype(bool), ["pair_id", "level", "pair_group", "trg_image"]
    ]


def _image_info(images: pd.DataFrame, image_ids: np.ndarray) -> pd.DataFrame:
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


def _target_xy(keypoints: pd.DataFrame, image_ids: np.ndarray, names: np.ndarray) -> np.ndarray:
    return visible_keypoint_xy(keypoints, image_ids, names, "target", MetricsError)


def _gt_pixels(xy: np.ndarray, sizes: np.ndarray, input_size: np.ndarray, protocol: ProtocolConfig) -> np.ndarray:
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
    """Reduce per-keypoint scores to all / supercategory / category values.

    `kp` has backbone, metric, alpha, pair_id, pair_group, supercategory and `score` in [0, 1]
    (1 = correct); returns METRIC_COLUMNS rows with value in 0-100 and n = keypoints counted.
    """
    out = []
    g = dict(dropna=False, sort=True)
    if "official" in reductions:
        pair = kp.groupby(_KEYS + ["supercategory", "pair_group", "pair_id"], **g)["score"].agg(["mean", "size"])
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


def official_mean(scores: pd.DataFrame) -> float:
    """Official reduction (pair -> pair group -> mean) of a per-keypoint `score` column, in 0-100."""
    if scores.empty:
        return float("nan")
    pair = scores.groupby(["pair_group", "pair_id"], observed=True)["score"].mean()
    return 100.0 * float(pair.groupby(level=0).mean().mean())


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
    info = _image_info(images, trg)
    sizes = info[["W", "H"]].to_numpy()
    xy = _target_xy(keypoints, trg, m["trg_keypoint"].to_numpy())
    if protocol.target_keypoint == "scaled" and protocol.keypoint_scaling == "official_int":
        if "input_size" not in m.columns or m["input_size"].isna().any():
            raise MetricsError(
                f"{metric}: predictions lack `input_size`, which scaled ground truth needs; re-run predictions "
                f"or set target_keypoint: raw in the protocol"
            )
        gt = _gt_pixels(xy, sizes, m["input_size"].to_numpy(), protocol)
    else:
        gt = _gt_pixels(xy, sizes, np.zeros(len(m)), protocol)
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
    """Per-keypoint correctness for cc, soc, soc_geo, cross_soc: backbone, metric, alpha, pair_id,
    pair_group, src_keypoint, err, radius, score (0/1)."""
    alphas = tuple(protocol.alphas if alphas is None else alphas)
    corr = correspondences.merge(_evaluated_pairs(image_pairs).drop(columns="level"), on="pair_id")
    soc = corr[corr["kind"] == "soc"]
    free = predictions[predictions["mode"] == "free"]
    geo = predictions[predictions["mode"] == "geo"]
    geo_rows = soc[
        (soc["level"] == "intra") & soc["geo"].astype(bool) & (soc["n_candidates"] >= protocol.geo_min_candidates)
    ]
    parts = {
        "soc": (soc[soc["level"] == "intra"], free),
        "cross_soc": (soc[soc["level"] == "cross"], free),
        "soc_geo": (geo_rows, geo),
        "cc": (corr[(corr["kind"] == "cc") & (corr["level"] == "intra")], free),
    }
    frames = []
    for metric, (rows, preds) in parts.items():
        if rows.empty:
            continue
        s = _score_rows(rows, preds, keypoints, images, protocol, metric)
        if metric == "cc":  # the nearest target of the concept's CC group
            s = s.groupby(["backbone", "pair_id", "src_keypoint"], as_index=False, sort=False, observed=True).agg(
                pair_group=("pair_group", "first"), err=("err", "min"), radius=("radius", "first")
            )
        ok = _correct(s["err"].to_numpy(), s["radius"].to_numpy(), alphas, protocol)
        frames.append(
            s.loc[s.index.repeat(len(alphas))].assign(
                metric=metric, alpha=np.tile(alphas, len(s)), score=ok.reshape(-1).astype(np.float64)
            )
        )
    if not frames:
        return pd.DataFrame(columns=_KEYS + ["pair_id", "pair_group", "src_keypoint", "err", "radius", "score"])
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
            base.assign(metric="four_choice_circular", alpha=np.nan, score=right.all(axis=1).astype(np.float64)),
        ],
        ignore_index=True,
    )


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
    """All metrics of the backbones in `predictions` as a long table (METRIC_COLUMNS).

    metric: cc | soc | soc_geo | cross_soc (per alpha) | four_choice | four_choice_circular (alpha NaN);
    reduction: official | keypoint; scope: all | supercategory | category. Needs no features.
    """
    kp = pck_keypoints(predictions, correspondences, keypoints, images, image_pairs, protocol, alphas)
    frames = [kp[_KEYS + ["pair_id", "pair_group", "score"]]] if len(kp) else []
    if four_choice_predictions is not None and len(four_choice_predictions):
        ev = image_pairs[image_pairs["evaluated"].astype(bool)]
        fc = four_choice_items(four_choice_predictions, image_pairs)
        fc = fc[fc["pair_id"].isin(ev["pair_id"])]
        if len(fc):
            frames.append(fc[_KEYS + ["pair_id", "pair_group", "score"]])
    if not frames:
        return pd.DataFrame(columns=METRIC_COLUMNS)
    scores = pd.concat(frames, ignore_index=True)
    return reduce_scores(_attach_supercategory(scores, taxonomy), protocol.reductions)


# ----------------------------------------------------------------------------- leaderboard
LEVEL_COLUMNS = ["cc", "soc", "soc_geo", "cross_soc", "four_choice", "four_choice_circular"]
GLOBAL_COLUMNS = ["knn_top1", "retrieval_map"]  # from analysis.global_metrics, when given


def leaderboard(
    metrics: pd.DataFrame, alpha: float = 0.1, reduction: str = "official", global_metrics: pd.DataFrame | None = None
) -> pd.DataFrame:
    """One row per backbone: cc, soc, soc_geo, cross_soc, the drops (points), soc per super-category,
    four_choice and four_choice_circular, at `alpha` with the given reduction; with `global_metrics`
    (analysis.global_metrics rows) also knn_top1 (k = 20) and retrieval_map (NaN where not computed)."""
    m = metrics[(metrics["reduction"] == reduction)]
    at = ((m["alpha"] - alpha).abs() < 1e-9) | m["metric"].str.startswith("four_choice")
    m = m[at]
    top = m[m["scope"] == "all"].pivot_table(index="backbone", columns="metric", values="value", aggfunc="first")
    board = top.reindex(columns=LEVEL_COLUMNS)
    board.insert(board.columns.get_loc("cross_soc") + 1, "cc_to_soc_drop", board["cc"] - board["soc"])
    board.insert(board.columns.get_loc("cc_to_soc_drop") + 1, "soc_to_cross_drop", board["soc"] - board["cross_soc"])
    sup = m[(m["scope"] == "supercategory") & (m["metric"] == "soc")]
    if len(sup):
        sup = sup.pivot_table(index="backbone", columns="group", values="value", aggfunc="first")
        sup.columns = [f"soc_{c}" for c in sup.columns]
        board = board.join(sup)
    if global_metrics is not None:  # analysis: global-feature metrics from the feature cache
        from soco_pipeline.analysis.global_metrics import headline_global

        board = board.join(headline_global(global_metrics).set_index("backbone").reindex(columns=GLOBAL_COLUMNS))
    board = board.sort_values("soc", ascending=False, na_position="last")
    return board.reset_index().rename_axis(columns=None)


def leaderboard_markdown(df: pd.DataFrame) -> str:
    """The leaderboard as a GitHub-flavoured Markdown table (values with one decimal)."""
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" if c == "backbone" else "---:" for c in cols) + "|"]
    for row in df.itertuples(index=False):
        cells = [
            ("" if pd.isna(v) else f"{v:.1f}") if isinstance(v, (float, np.floating)) else str(v) for v in row
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def leaderboard_plot(df: pd.DataFrame, path: str) -> str:
    """Bar charts (per level; SOC per super-category) of a leaderboard, written atomically as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = [c for c in ["cc", "soc", "soc_geo", "cross_soc", "four_choice"] if c in df.columns]
    sups = [c for c in df.columns if c.startswith("soc_") and c not in ("soc_geo", "soc_to_cross_drop")]
    fig, axes = plt.subplots(1, 2, figsize=(14, 4.8))
    for ax, cols, title in ((axes[0], levels, "PCK@0.1 per level"), (axes[1], sups, "SOC per super-category")):
        width = 0.8 / max(1, len(df))
        x = np.arange(len(cols))
        for i, row in enumerate(df.itertuples(index=False)):
            vals = [getattr(row, c) for c in cols]
            ax.bar(x + i * width, np.nan_to_num(np.asarray(vals, dtype=float)), width, label=row.backbone)
        ax.set_xticks(x + width * (len(df) - 1) / 2, [c.replace("soc_", "") if ax is axes[1] else c for c in cols])
        ax.set_ylim(0, 100)
        ax.set_title(title)
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    write_bytes_atomic(path, buf.getvalue())
    return path


# ----------------------------------------------------------------------------- theory
def _soc_rows(correspondences, image_pairs, level: str, geo: bool, min_candidates: int) -> pd.DataFrame:
    corr = correspondences.merge(_evaluated_pairs(image_pairs).drop(columns="level"), on="pair_id")
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
    true = _target_xy(keypoints, trg, c["trg_keypoint"].to_numpy())
    cand = _target_xy(keypoints, trg, c["cand"].to_numpy())
    radius = _image_info(images, trg)["bbox"].to_numpy()
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
    level = "cross" if metric == "cross_soc" else "intra"
    rows, cc = _soc_rows(correspondences, image_pairs, level, metric == "soc_geo", protocol.geo_min_candidates)
    if metric == "cc":
        rows = cc[cc["level"] == "intra"]
    if metric not in PCK_METRICS:
        raise ValueError(f"metric {metric!r}: expected one of {PCK_METRICS}")
    if support not in ("grid", "image"):
        raise ValueError(f"support {support!r}: expected 'grid' or 'image'")
    trg = rows["trg_image"].to_numpy()
    info = _image_info(images, trg)
    sizes = info[["W", "H"]].to_numpy()
    side = sizes.max(axis=1)
    gt = _gt_pixels(_target_xy(keypoints, trg, rows["trg_keypoint"].to_numpy()), sizes,
                    np.full(len(rows), input_size), protocol)
    thr = alpha * info["bbox"].to_numpy()
    off = 0.5 if protocol.prediction_point == "center" else 0.0
    cu = ((np.arange(w) + off) / w)[None, :].repeat(h, 0).reshape(-1)
    cv = ((np.arange(h) + off) / h)[:, None].repeat(w, 1).reshape(-1)

    if metric == "soc_geo":
        c = rows[["pair_id", "src_keypoint", "pair_group"]].reset_index(drop=True)
        c["row"] = np.arange(len(c))
        c = c.merge(cc[["pair_id", "src_keypoint", "trg_keypoint", "trg_image"]], on=["pair_id", "src_keypoint"])
        ci = _image_info(images, c["trg_image"].to_numpy())
        uv = to_unit(_target_xy(keypoints, c["trg_image"].to_numpy(), c["trg_keypoint"].to_numpy()),
                     ci[["W", "H"]].to_numpy(), input_size, protocol)
        c["cell"] = cells_of(uv, h, w)
        c = c.drop_duplicates(["row", "cell"])
        r = c["row"].to_numpy()
        px = np.stack([cu[c["cell"]], cv[c["cell"]]], 1) * side[r, None]
        c["score"] = np.hypot(*(px - gt[r]).T) < thr[r]
        per = c.groupby(["pair_group", "pair_id", "src_keypoint"], as_index=False, observed=True)["score"].mean()
        return official_mean(per)

    hits = np.zeros((len(rows), h * w), dtype=bool)
    for a in range(0, len(rows), chunk):
        s = slice(a, a + chunk)
        dx = cu[None, :] * side[s, None] - gt[s, 0:1]
        dy = cv[None, :] * side[s, None] - gt[s, 1:2]
        hits[s] = np.hypot(dx, dy) < thr[s, None]
    inside = np.ones_like(hits) if support == "grid" else (
        (cu[None, :] * side[:, None] < sizes[:, 0:1]) & (cv[None, :] * side[:, None] < sizes[:, 1:2])
    )
    keys = rows[["pair_group", "pair_id", "src_keypoint"]].reset_index(drop=True)
    if metric == "cc":  # a cell counts if it is within the radius of any keypoint of the group
        order = np.lexsort((keys["src_keypoint"], keys["pair_id"]))
        keys, hits, inside = keys.iloc[order].reset_index(drop=True), hits[order], inside[order]
        starts = np.flatnonzero(~keys.duplicated(["pair_id", "src_keypoint"]).to_numpy())
        hits = np.logical_or.reduceat(hits, starts, axis=0)
        inside = inside[starts]
        keys = keys.iloc[starts].reset_index(drop=True)
    score = (hits & inside).sum(1) / inside.sum(1)
    return official_mean(keys.assign(score=score))
