"""SOCO-LVLM scores: average accuracy (correct rows / rows) and circular accuracy (items whose four
rotations are all right / items), per setting, overall, per super-category and per category; the
leaderboard with the random baselines, the page's reference figures and the best backbone.

Beside each score: how many rows failed (`n_errors`: no answer after retries, counted wrong) and how
many answers the official parser could not read (`n_unparsable`: an answer came but gave no letter,
also counted wrong, as the official script does). The leaderboard shows both per evaluated model, so a
score made of errors or unreadable answers is visible as such."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

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
]
# Per evaluated model on the leaderboard: failed rows, and the share (%) of answers received that the
# parser could not read.
HEALTH_COLUMNS = ["n_rows", "n_errors", "unparsable_pct"]


UNPARSABLE_WARN_SHARE = (
    0.5  # warn in the run log when more than this share of the answers received gave no letter
)


def unparsable_warning(answers: pd.DataFrame, share: float = UNPARSABLE_WARN_SHARE) -> str | None:
    """A run-log warning when the parser read no letter from more than `share` of the answers received (failed
    rows aside): the score is then the parser's failure, not the model's; None otherwise."""
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


def lvlm_metrics(answers: pd.DataFrame) -> pd.DataFrame:
    """Long table (METRIC_COLUMNS): metric average | circular, value 0-100, scope all | supercategory | category."""
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
    out = pd.concat(frames, ignore_index=True)[METRIC_COLUMNS]
    return out.sort_values(["model", "setting", "scope", "group", "metric"], ignore_index=True)


def load_reference(path: str | Path | None = None) -> pd.DataFrame:
    """The published reference figures (model, setting, metric, value, source)."""
    return pd.read_csv(path or REFERENCE_PATH)


def _wide(long: pd.DataFrame) -> pd.DataFrame:
    cols = [f"{s}_{m}" for s in SETTINGS for m in ("average", "circular")]
    if long.empty:
        return pd.DataFrame(columns=["model", *cols])
    w = long.assign(col=long["setting"] + "_" + long["metric"]).pivot_table(
        index="model", columns="col", values="value", aggfunc="first"
    )
    return w.reindex(columns=cols).reset_index().rename_axis(columns=None)


def answer_health(metrics: pd.DataFrame) -> pd.DataFrame:
    """Per model (scope all, summed over settings): rows, failed rows and the share (%) of answers received
    that gave no letter. Metrics of before `n_unparsable` existed give NaN there."""
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
    """One row per evaluated model (kind 'evaluated'), the page's reference models ('reference'), the
    random baselines ('random') and the best backbone's four-choice accuracy ('backbone').

    Columns: model, kind, <setting>_average, <setting>_circular for vis / vis_desc / desc, then for the
    evaluated models n_rows, n_errors (failed rows, counted wrong) and unparsable_pct (answers received
    that the parser read no letter from, %), source.
    """
    ours = _wide(metrics[metrics["scope"] == "all"]) if len(metrics) else _wide(pd.DataFrame())
    ours = ours.assign(kind="evaluated", source="this pipeline")
    if len(metrics):
        ours = ours.merge(answer_health(metrics), on="model", how="left")
    parts = [ours]
    reference = load_reference() if reference is None else reference
    if len(reference):
        ref = _wide(reference.rename(columns={"metric": "metric"}))
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
                "vis_average": float(best["four_choice"]),
                "vis_circular": float(best["four_choice_circular"]),
            }
            parts.append(
                pd.DataFrame(
                    [
                        {
                            "model": f"{best['backbone']} (4-choice, best backbone)",
                            **row,
                            "kind": "backbone",
                            "source": "leaderboard (this pipeline)",
                        }
                    ]
                )
            )
    board = pd.concat([p for p in parts if len(p)], ignore_index=True)
    cols = [
        "model",
        "kind",
        *[f"{s}_{m}" for s in SETTINGS for m in ("average", "circular")],
        *HEALTH_COLUMNS,
        "source",
    ]
    return board.reindex(columns=cols)
