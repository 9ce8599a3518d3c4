"""Confidence intervals that respect the sample's structure (docs/results.md, "Confidence intervals") and
paired comparisons; the estimate and every replicate go through `_estimate` on the same per-category sums, so
a value never falls outside its own interval. Input: SCORE_COLUMNS, one row per scored element."""

from __future__ import annotations

import numpy as np
import pandas as pd

from soco_pipeline.evaluation.protocol import ProtocolConfig

SCORE_COLUMNS = ["model", "metric", "group", "unit", "element", "cluster", "score"]
Z95 = 1.959963984540054
INTERVAL_COLUMNS = (
    "model metric value ci95_lo_boot_category ci95_hi_boot_category se_cluster_image "
    "ci95_lo_cluster_image_logit ci95_hi_cluster_image_logit n_units n_categories n_clusters"
).split()


# ----------------------------------------------------------------------------- scores
def backbone_scores(
    predictions: pd.DataFrame,
    four_choice_predictions: pd.DataFrame | None,
    correspondences: pd.DataFrame,
    keypoints: pd.DataFrame,
    images: pd.DataFrame,
    image_pairs: pd.DataFrame,
    protocol: ProtocolConfig,
    alpha: float | None = None,
) -> pd.DataFrame:
    """Per-keypoint 0/1 scores (SCORE_COLUMNS) of the PCK metrics at `alpha` and 4-choice."""
    from soco_pipeline.evaluation.metrics import scored_elements  # metrics imports torch (the matching)

    alphas = (protocol.headline_alpha if alpha is None else alpha,)
    tables = (predictions, four_choice_predictions, correspondences, keypoints, images, image_pairs)
    s = scored_elements(*tables, protocol, alphas=alphas)
    trg = image_pairs.set_index("pair_id")["trg_image"]
    return pd.DataFrame(
        {
            "model": s["backbone"].astype(str).to_numpy(),
            "metric": s["metric"].to_numpy(),
            "group": s["pair_group"].astype(str).to_numpy(),
            "unit": s["pair_id"].astype(str).to_numpy(),
            "element": s["src_keypoint"].astype(str).to_numpy(),
            "cluster": trg.reindex(s["pair_id"]).to_numpy(),
            "score": s["score"].astype(np.float64).to_numpy(),
        }
    )


def lvlm_scores(answers: pd.DataFrame) -> pd.DataFrame:
    """LVLM scores: '<setting>/average' per answer row, '<setting>/circular' per item group (cluster: pair)."""
    a = answers.assign(correct=answers["correct"].astype(bool))
    avg = pd.DataFrame(
        {
            "model": a["model"].astype(str).to_numpy(),
            "metric": (a["setting"] + "/average").to_numpy(),
            "group": a["pair_group"].astype(str).to_numpy(),
            "unit": a["g_index"].astype(str).to_numpy(),
            "element": a["rotation"].astype(str).to_numpy(),
            "cluster": a["pair_id"].astype(str).to_numpy(),
            "score": a["correct"].astype(np.float64).to_numpy(),
        }
    )
    circ = avg.groupby(["model", "metric", "group", "unit"], as_index=False, sort=False).agg(
        cluster=("cluster", "first"), score=("score", "min")
    )
    circ["metric"] = circ["metric"].str.replace("/average", "/circular", regex=False)
    circ["element"] = ""
    return pd.concat([avg, circ[SCORE_COLUMNS]], ignore_index=True)


# ----------------------------------------------------------------------------- intervals
def _weights(units: pd.DataFrame, reduction: str) -> np.ndarray:
    """Each unit's weight in the estimate, 1/(K n_c) (official) or 1/N (pooled)."""
    if reduction == "pooled":
        return np.full(len(units), 1.0 / len(units))
    n_c = units.groupby("group")["unit"].transform("size").to_numpy(np.float64)
    return 1.0 / (units["group"].nunique() * n_c)


def _category_sums(units: pd.DataFrame, column: str = "score") -> tuple[np.ndarray, np.ndarray]:
    """Per category (sorted): the sum of the units' `column` and the number of units."""
    cat = units.groupby("group", sort=True)[column].agg(["sum", "size"])
    return cat["sum"].to_numpy(np.float64), cat["size"].to_numpy(np.float64)


def _estimate(sums: np.ndarray, sizes: np.ndarray, idx: np.ndarray, reduction: str) -> np.ndarray:
    """The headline of each row of category indices: point and replicates in one arithmetic."""
    if reduction == "pooled":
        return sums[idx].sum(axis=1) / sizes[idx].sum(axis=1)
    return (sums / sizes)[idx].mean(axis=1)


def _value_and_bootstrap(
    units: pd.DataFrame, reduction: str, n_boot: int, seed: int, column: str = "score"
) -> tuple[float, np.ndarray]:
    """The estimate of `column` and n_boot bootstrap estimates, categories resampled with replacement."""
    sums, sizes = _category_sums(units, column)
    k = len(sums)
    value = float(_estimate(sums, sizes, np.arange(k)[None, :], reduction)[0])
    idx = np.random.default_rng(seed).integers(0, k, size=(n_boot, k))
    return value, _estimate(sums, sizes, idx, reduction)


def _cluster_se(units: pd.DataFrame, w: np.ndarray, value: float) -> tuple[float, int]:
    """Cluster-robust SE of the weighted mean sum(w s), clusters = `cluster` (linearised sandwich)."""
    u = pd.Series(w * (units["score"].to_numpy() - value)).groupby(units["cluster"].to_numpy()).sum()
    g = len(u)
    if g < 2:
        return float("nan"), g
    return float(np.sqrt(g / (g - 1) * np.square(u.to_numpy()).sum())), g


def logit_interval(value: float, se: float, n_clusters: int, z: float = Z95) -> tuple[float, float]:
    """(lo, hi) in [0, 1] on the logit scale; Wilson's where the SE is 0; NaN if undefined."""
    if not (np.isfinite(se) and np.isfinite(value)):
        return float("nan"), float("nan")
    p = min(max(value, 0.0), 1.0)
    if 0.0 < p < 1.0 and se > 0.0:
        centre, half = np.log(p / (1.0 - p)), z * se / (p * (1.0 - p))
        return _expit(centre - half), _expit(centre + half)
    n, z2 = float(n_clusters), z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * np.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    # at p = 0 (1) the lower (upper) Wilson bound is exactly 0 (1); pin it against rounding
    return (0.0 if p == 0.0 else float(centre - half)), (1.0 if p == 1.0 else float(centre + half))


def bootstrap_share(correct, seed: int = 0, n_boot: int = 2000) -> tuple[float, float]:
    """95% percentile-bootstrap interval (0-100) of a share, by a seeded Binomial draw."""
    c = np.asarray(correct, dtype=bool)
    if c.size == 0:
        return float("nan"), float("nan")
    draws = np.random.default_rng(seed).binomial(c.size, c.mean(), size=n_boot) / c.size
    lo, hi = np.quantile(draws, [0.025, 0.975])
    return 100 * float(lo), 100 * float(hi)


def _expit(x: float) -> float:
    return float(1.0 / (1.0 + np.exp(-x)))


def intervals(
    scores: pd.DataFrame, reduction: str = "official", n_boot: int = 2000, seed: int = 0
) -> pd.DataFrame:
    """Per (model, metric): value (0-100) and 95% CIs, reduction 'official' or 'pooled'."""
    rows = []
    for (model, metric), s in scores.groupby(["model", "metric"], sort=True):
        # per unit: group, cluster and mean score (a pair's keypoints averaged first, as the official reduction)
        units = s.groupby(["group", "unit"], as_index=False, sort=True).agg(
            cluster=("cluster", "first"), score=("score", "mean")
        )
        value, boot = _value_and_bootstrap(units, reduction, n_boot, seed)
        lo, hi = np.quantile(boot, [0.025, 0.975])
        se, g = _cluster_se(units, _weights(units, reduction), value)
        c_lo, c_hi = logit_interval(value, se, g)
        rows.append(
            {
                "model": model,
                "metric": metric,
                "value": 100 * value,
                "ci95_lo_boot_category": 100 * lo,
                "ci95_hi_boot_category": 100 * hi,
                "se_cluster_image": 100 * se,
                "ci95_lo_cluster_image_logit": 100 * c_lo,
                "ci95_hi_cluster_image_logit": 100 * c_hi,
                "n_units": len(units),
                "n_categories": int(units["group"].nunique()),
                "n_clusters": g,
            }
        )
    return pd.DataFrame(rows, columns=INTERVAL_COLUMNS)


# ----------------------------------------------------------------------------- paired comparison
COMPARE_COLUMNS = (
    "metric model_a model_b value_a value_b delta ci95_lo_boot_category ci95_hi_boot_category n_units "
    "n_categories wins_a wins_b ties sign_test_p"
).split()
CATEGORY_COLUMNS = ["metric", "group", "delta", "n_units", "wins_a", "wins_b", "ties", "sign_test_p"]


def _sign_p(wins_a: np.ndarray, wins_b: np.ndarray) -> np.ndarray:
    """Two-sided exact sign test p-value per row (ties dropped; 1.0 when every unit ties)."""
    from scipy.stats import binomtest  # 0.8 s to import, on the import path of the Definitions

    return np.array(
        [binomtest(int(a), int(a + b)).pvalue if a + b else 1.0 for a, b in zip(wins_a, wins_b, strict=True)]
    )


def compare(
    scores_a: pd.DataFrame,
    scores_b: pd.DataFrame,
    reduction: str = "official",
    n_boot: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Paired difference A - B per metric: category-bootstrap CI, sign test, per category."""
    keys = ["metric", "group", "unit", "element"]
    m = scores_a.merge(scores_b, on=keys, suffixes=("_a", "_b"), how="inner")
    if m.empty:
        raise ValueError("the two runs share no scored pairs or items: compare runs on the same sample")
    name_a, name_b = str(scores_a["model"].iloc[0]), str(scores_b["model"].iloc[0])
    m["d"] = m["score_a"] - m["score_b"]
    overall, per_cat = [], []
    for metric, s in m.groupby("metric", sort=True):
        units = s.groupby(["group", "unit"], as_index=False, sort=True).agg(
            d=("d", "mean"), a=("score_a", "mean"), b=("score_b", "mean")
        )
        delta, boot = _value_and_bootstrap(units, reduction, n_boot, seed, column="d")
        value_a = _value_and_bootstrap(units, reduction, 0, seed, column="a")[0]
        value_b = _value_and_bootstrap(units, reduction, 0, seed, column="b")[0]
        lo, hi = np.quantile(boot, [(1 - level) / 2, (1 + level) / 2])
        units["win_a"], units["win_b"] = units["d"] > 0, units["d"] < 0
        cat = units.groupby("group", as_index=False).agg(
            delta=("d", "mean"), n_units=("d", "size"), wins_a=("win_a", "sum"), wins_b=("win_b", "sum")
        )
        cat["ties"] = cat["n_units"] - cat["wins_a"] - cat["wins_b"]
        cat["sign_test_p"] = _sign_p(cat["wins_a"].to_numpy(), cat["wins_b"].to_numpy())
        per_cat.append(cat.assign(metric=metric, delta=100 * cat["delta"]))
        wa, wb = int(units["win_a"].sum()), int(units["win_b"].sum())
        overall.append(
            {
                "metric": metric,
                "model_a": name_a,
                "model_b": name_b,
                "value_a": 100 * value_a,
                "value_b": 100 * value_b,
                "delta": 100 * delta,
                "ci95_lo_boot_category": 100 * lo,
                "ci95_hi_boot_category": 100 * hi,
                "n_units": len(units),
                "n_categories": int(units["group"].nunique()),
                "wins_a": wa,
                "wins_b": wb,
                "ties": len(units) - wa - wb,
                "sign_test_p": float(_sign_p([wa], [wb])[0]),
            }
        )
    return pd.DataFrame(overall, columns=COMPARE_COLUMNS), pd.concat(per_cat, ignore_index=True)[
        CATEGORY_COLUMNS
    ]


# ----------------------------------------------------------------------------- tables
CI_COLUMNS = (
    "ci95_lo_boot_category ci95_hi_boot_category se_cluster_image ci95_lo_cluster_image_logit "
    "ci95_hi_cluster_image_logit"
).split()
BOARD_CI_METRICS = ("cc", "soc", "soc_geo", "cross_soc", "four_choice")
BOARD_CI_COLUMNS = ["ci95_lo_boot_category", "ci95_hi_boot_category", "se_cluster_image"]  # per metric


def attach_intervals(
    metrics: pd.DataFrame, scores: pd.DataFrame, headline_alpha: float, n_boot: int = 2000, seed: int = 0
) -> pd.DataFrame:
    """The metrics table with CI_COLUMNS filled on its headline rows from `scores`."""
    ci = intervals(scores, n_boot=n_boot, seed=seed).rename(columns={"model": "backbone"})
    at = (
        (metrics["scope"] == "all")
        & (metrics["reduction"] == "official")
        & (((metrics["alpha"] - headline_alpha).abs() < 1e-9) | metrics["alpha"].isna())
    )
    keyed = metrics.loc[at, ["backbone", "metric"]].merge(
        ci[["backbone", "metric", *CI_COLUMNS]], on=["backbone", "metric"], how="left"
    )
    out = metrics.copy()
    for c in CI_COLUMNS:
        out[c] = np.nan
        out.loc[at, c] = keyed[c].to_numpy()
    return out


def add_interval_columns(board: pd.DataFrame, metrics: pd.DataFrame) -> pd.DataFrame:
    """A leaderboard with its headline metrics' CI and SE columns."""
    if "ci95_lo_boot_category" not in metrics.columns:
        return board
    rows = metrics[metrics["ci95_lo_boot_category"].notna() & metrics["metric"].isin(BOARD_CI_METRICS)]
    wide = rows.pivot_table(index="backbone", columns="metric", aggfunc="first", values=BOARD_CI_COLUMNS)
    wide.columns = [f"{c}_{m}" for c, m in wide.columns]
    order = [f"{c}_{m}" for m in BOARD_CI_METRICS for c in BOARD_CI_COLUMNS if f"{c}_{m}" in wide.columns]
    return board.merge(wide[order], left_on="backbone", right_index=True, how="left")


def ci_display(board: pd.DataFrame) -> pd.DataFrame:
    """For Markdown: the numeric CI columns folded into one '<metric> 95% CI' text column each."""
    out = board.copy()
    for m in BOARD_CI_METRICS:
        lo, hi = f"ci95_lo_boot_category_{m}", f"ci95_hi_boot_category_{m}"
        if lo in out.columns:
            out[f"{m} 95% CI (boot. categories)"] = [
                "" if pd.isna(a) else f"[{a:.1f}, {b:.1f}]" for a, b in zip(out[lo], out[hi], strict=True)
            ]
            out = out.drop(columns=[lo, hi, f"se_cluster_image_{m}"], errors="ignore")
    return out


def with_intervals(
    metrics: pd.DataFrame,
    predictions: pd.DataFrame,
    four_choice_predictions: pd.DataFrame | None,
    correspondences: pd.DataFrame,
    keypoints: pd.DataFrame,
    images: pd.DataFrame,
    image_pairs: pd.DataFrame,
    protocol: ProtocolConfig,
    seed: int = 0,
) -> pd.DataFrame:
    """`attach_intervals` on the scores of the stored predictions (the metrics asset's CIs)."""
    scores = backbone_scores(
        predictions, four_choice_predictions, correspondences, keypoints, images, image_pairs, protocol
    )
    return attach_intervals(metrics, scores, protocol.headline_alpha, seed=seed)
