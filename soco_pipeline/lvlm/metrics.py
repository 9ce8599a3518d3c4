"""SOCO-LVLM scores: average and circular accuracy; failed and unreadable answers count wrong."""

from __future__ import annotations

import numpy as np
import pandas as pd

from soco_pipeline.evaluation.stats import SCORE_COLUMNS, intervals
from soco_pipeline.lvlm.specs import SETTINGS
from soco_pipeline.taxonomy import ASSETS_DIR

REFERENCE_PATH = ASSETS_DIR / "lvlm_reference.csv"
RANDOM_AVERAGE = 25.0
RANDOM_CIRCULAR = 100 * 0.25**4  # 0.39
METRIC_COLUMNS = [
    "model",
    "setting",
    "scope",
    "group",
    "metric",
    "value",
    "n_rows",
    "n_groups",
    "n_errors",
    "n_unparsable",
    "ci95_lo_boot_category",
    "ci95_hi_boot_category",
]
# Per evaluated model: failed rows, and the share (%) of answers received that the parser could not read.
HEALTH_COLUMNS = ["n_rows", "n_errors", "unparsable_pct"]
# Warn in the run log when more than this share of the answers received gave no letter.
UNPARSABLE_WARN_SHARE = 0.5


def unparsable_warning(answers: pd.DataFrame, share: float = UNPARSABLE_WARN_SHARE) -> str | None:
    """A warning when no letter was parsed from more than `share` of the answers received; None otherwise."""
    received = answers[answers["error"].astype(str) == ""]
    bad = received[received["parsed"].astype(str) == ""]
    if received.empty or len(bad) <= share * len(received):
        return None
    model = str(answers["model"].iloc[0]) if "model" in answers.columns else "the model"
    return (
        f"{model}: {len(bad)} of {len(received)} answers received gave no letter the parser can read "
        f"(e.g. {str(bad['raw_answer'].iloc[0])[:80]!r}); they all count wrong. Check the prompt format, the "
        f"model's chat template or its max_new_tokens (unparsable_pct on the LVLM leaderboard)"
    )


def circular_groups(answers: pd.DataFrame) -> pd.DataFrame:
    """One row per (model, setting, g_index): all rows right, row count and the item's scopes."""
    return answers.groupby(["model", "setting", "g_index"], as_index=False, sort=False).agg(
        correct=("correct", "all"),
        rows=("correct", "size"),
        pair_group=("pair_group", "first"),
        supercategory=("supercategory", "first"),
    )


def lvlm_metrics(answers: pd.DataFrame, seed: int = 0, n_boot: int = 2000) -> pd.DataFrame:
    """Long table (METRIC_COLUMNS) per scope, 0-100; seeded 95% CIs over categories on the scope-all rows."""
    if answers.empty:
        return pd.DataFrame(columns=METRIC_COLUMNS)
    is_error = answers["error"].astype(str) != ""
    a = answers.assign(
        correct=answers["correct"].astype(bool),
        is_error=is_error,
        is_unparsable=~is_error & (answers["parsed"].astype(str) == ""),
    )
    groups = circular_groups(a)
    frames = []
    for scope, col in (("all", None), ("supercategory", "supercategory"), ("category", "pair_group")):
        keys_rows = ["model", "setting"] + ([col] if col else [])
        rows = a.groupby(keys_rows, as_index=False).agg(
            value=("correct", "mean"),
            n_rows=("correct", "size"),
            n_errors=("is_error", "sum"),
            n_unparsable=("is_unparsable", "sum"),
        )
        grp = groups.groupby(keys_rows, as_index=False).agg(
            value_c=("correct", "mean"), n_groups=("correct", "size")
        )
        m = rows.merge(grp, on=keys_rows)
        m["group"] = m[col].astype(str) if col else "all"
        m["scope"] = scope
        base = m[["model", "setting", "scope", "group", "n_rows", "n_groups", "n_errors", "n_unparsable"]]
        frames.append(base.assign(metric="average", value=100 * m["value"].to_numpy()))
        frames.append(base.assign(metric="circular", value=100 * m["value_c"].to_numpy()))
    out = pd.concat(frames, ignore_index=True)

    # evaluation/stats.py scores: per row (average), per item group (circular); the CI resamples categories
    def scored(df: pd.DataFrame, metric: str, unit: pd.Series) -> pd.DataFrame:
        return pd.DataFrame(
            {
                "model": df["model"].astype(str),
                "metric": df["setting"].astype(str) + metric,
                "group": df["pair_group"].astype(str),
                "unit": unit,
                "element": "",
                "cluster": df["g_index"].astype(str),
                "score": df["correct"].astype(np.float64),
            }
        )[SCORE_COLUMNS]

    per_row = a["g_index"].astype(str) + "/" + np.arange(len(a)).astype(str)  # one unit per row
    rows_scored = scored(a, "/average", per_row)
    circ = scored(groups, "/circular", groups["g_index"].astype(str))
    ci = intervals(pd.concat([rows_scored, circ], ignore_index=True), "pooled", n_boot, seed)
    ci[["setting", "metric"]] = ci["metric"].str.split("/", n=1, expand=True)
    keyed = out.merge(ci, on=["model", "setting", "metric"], how="left", suffixes=("", "_ci"))
    at_all = (out["scope"] == "all").to_numpy()
    for c in ("ci95_lo_boot_category", "ci95_hi_boot_category"):
        out[c] = np.where(at_all, keyed[c].to_numpy(float), np.nan)
    out = out[METRIC_COLUMNS]
    return out.sort_values(["model", "setting", "scope", "group", "metric"], ignore_index=True)


CI_WIDE = [f"{s}_average_ci95_{end}" for s in SETTINGS for end in ("lo", "hi")]  # the board's CI columns


def _wide(long: pd.DataFrame) -> pd.DataFrame:
    cols = [f"{s}_{m}" for s in SETTINGS for m in ("average", "circular")]
    if long.empty:
        return pd.DataFrame(columns=["model", *cols])
    keyed = long.assign(col=long["setting"] + "_" + long["metric"])
    w = keyed.pivot_table(index="model", columns="col", values="value", aggfunc="first").reindex(columns=cols)
    for end in ("lo", "hi"):  # metrics stored before the CI existed have no such column: NaN
        c = f"ci95_{end}_boot_category"
        if c in keyed.columns and keyed[c].notna().any():
            ci = keyed.pivot_table(index="model", columns="col", values=c, aggfunc="first")
            for s in SETTINGS:
                if f"{s}_average" in ci.columns:
                    w[f"{s}_average_ci95_{end}"] = ci[f"{s}_average"]
    return w.reset_index().rename_axis(columns=None)


def answer_health(metrics: pd.DataFrame) -> pd.DataFrame:
    """Per model: rows, failed rows and the unparsable share (%); NaN for older metrics."""
    m = metrics[(metrics["scope"] == "all") & (metrics["metric"] == "average")]
    if m.empty:
        return pd.DataFrame(columns=["model", *HEALTH_COLUMNS])
    old = "n_unparsable" not in m
    g = (
        m.assign(n_unparsable=0 if old else m["n_unparsable"])
        .groupby("model", as_index=False)
        .agg(n_rows=("n_rows", "sum"), n_errors=("n_errors", "sum"), n_unparsable=("n_unparsable", "sum"))
    )
    if old:
        g["n_unparsable"] = np.nan
    answered = (g["n_rows"] - g["n_errors"]).astype(float)
    share = 100 * g["n_unparsable"].astype(float) / answered.where(answered > 0)
    return g.assign(unparsable_pct=share)[["model", *HEALTH_COLUMNS]]


def lvlm_leaderboard(
    metrics: pd.DataFrame, backbone_board: pd.DataFrame | None = None, reference: pd.DataFrame | None = None
) -> pd.DataFrame:
    """One row per evaluated model, reference, random baseline and the best backbone."""
    ours = _wide(metrics[metrics["scope"] == "all"]) if len(metrics) else _wide(pd.DataFrame())
    ours = ours.assign(kind="evaluated", source="this pipeline")
    if len(metrics):
        ours = ours.merge(answer_health(metrics), on="model", how="left")
    parts = [ours]
    reference = pd.read_csv(REFERENCE_PATH) if reference is None else reference
    if len(reference):
        ref = _wide(reference)
        src = reference.groupby("model")["source"].first()
        parts.append(ref.assign(kind="reference", source=ref["model"].map(src)))
    rnd = {f"{s}_average": RANDOM_AVERAGE for s in SETTINGS} | {
        f"{s}_circular": RANDOM_CIRCULAR for s in SETTINGS
    }
    parts.append(
        pd.DataFrame([{"model": "random", **rnd, "kind": "random", "source": "chance: 1/4 and (1/4)^4"}])
    )
    if backbone_board is not None and len(backbone_board) and "four_choice_circular" in backbone_board:
        best = backbone_board.loc[backbone_board["four_choice_circular"].astype(float).idxmax()]
        if not np.isnan(float(best["four_choice_circular"])):
            row = {
                "model": f"{best['backbone']} (4-choice, best backbone)",
                "vis_average": float(best["four_choice"]),
                "vis_circular": float(best["four_choice_circular"]),
                "kind": "backbone",
                "source": "leaderboard (this pipeline)",
            }
            parts.append(pd.DataFrame([row]))
    board = pd.concat([p for p in parts if len(p)], ignore_index=True)
    cols = [
        "model",
        "kind",
        *[f"{s}_{m}" for s in SETTINGS for m in ("average", "circular")],
        *CI_WIDE,
        *HEALTH_COLUMNS,
        "source",
    ]
    return board.reindex(columns=cols)
