"""Accuracy of one model overall, per cue, per candidate count and with / without the query, beside chance
and a 95% Wilson interval; a case counts toward every cue it lists (`report_acc_mmatch`; docs/mmvm.md)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from soco_pipeline.tasks.mmvm.config import MAX_CANDIDATES
from soco_pipeline.tasks.mmvm.cues import CUES, parse_match_type

METRIC_COLUMNS = [
    "model",
    "kind",
    "method",
    "split",
    "breakdown",
    "key",
    "n_items",
    "accuracy",
    "ci_low",
    "ci_high",
    "random_expected",
    "status",
    "reason",
    "none_mode",
    "none_rule",
    "judge_decided",
    "judge_failed",
]
LVLM_NONE_RULE = "the model picks the None option itself"
LVLM_NONE_MODE = "model"


def wilson(k: np.ndarray, n: np.ndarray, z: float = 1.96) -> tuple[np.ndarray, np.ndarray]:
    """95% Wilson score interval of k successes in n (in 0-100)."""
    n = np.asarray(n, float)
    p = np.divide(k, n, out=np.zeros_like(n), where=n > 0)
    denom = 1 + z * z / np.maximum(n, 1)
    centre = (p + z * z / (2 * np.maximum(n, 1))) / denom
    half = z * np.sqrt(p * (1 - p) / np.maximum(n, 1) + z * z / (4 * np.maximum(n, 1) ** 2)) / denom
    return 100 * (centre - half), 100 * (centre + half)


def _groups(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per (breakdown, key, item) membership: overall, cue (a case in each of its cues), count, presence."""
    codes = rows["match_type"].map(lambda v: parse_match_type(v).codes)
    base = rows[["correct", "n_candidates"]].reset_index(drop=True)
    parts = [
        base.assign(breakdown="overall", key="all"),
        base.assign(breakdown="candidates", key=rows["count_label"].astype(str).to_numpy()),
        base.assign(
            breakdown="query", key=np.where(rows["query_absent"].to_numpy(bool), "absent", "present")
        ),
    ]
    if "correct_forced" in rows:  # feature backbones: the argmax alone, on the items that hold the query
        present = ~rows["query_absent"].to_numpy(bool)
        forced = rows.loc[present, ["correct_forced", "n_candidates"]].rename(
            columns={"correct_forced": "correct"}
        )
        parts.append(forced.reset_index(drop=True).assign(breakdown="query", key="present_forced"))
    exploded = base.assign(code=codes.to_numpy()).explode("code").dropna(subset=["code"])  # "[]": no cue
    exploded = exploded.assign(breakdown="cue", key=exploded["code"].map(lambda c: CUES[int(c)]))
    parts.append(exploded.drop(columns="code"))
    return pd.concat(parts, ignore_index=True)


def accuracy_table(
    rows: pd.DataFrame, model: str, kind: str, split: str = "test", method: str = ""
) -> pd.DataFrame:
    """METRIC_COLUMNS rows of one model from its per-item rows."""
    if "status" in rows and len(rows) and (rows["status"] == "not_applicable").all():
        row = dict.fromkeys(METRIC_COLUMNS, np.nan) | {"model": model, "kind": kind, "method": method}
        row |= {
            "split": split,
            "breakdown": "overall",
            "key": "all",
            "n_items": 0,
            "status": "not_applicable",
        }
        row |= {"reason": str(rows["reason"].iat[0]), "none_mode": "", "none_rule": ""}
        return pd.DataFrame([row | {"judge_decided": 0, "judge_failed": 0}], columns=METRIC_COLUMNS)
    none_rule = str(rows["none_rule"].iat[0]) if "none_rule" in rows and len(rows) else LVLM_NONE_RULE
    none_mode = str(rows["none_mode"].iat[0]) if "none_mode" in rows and len(rows) else LVLM_NONE_MODE
    rows = rows[rows["split"] == split] if "split" in rows else rows
    status = rows["judge_status"] if "judge_status" in rows else pd.Series([], dtype=str)
    g = _groups(rows)
    shown = np.minimum(g["n_candidates"].astype(float), MAX_CANDIDATES)  # the reference shows at most 25
    g["chance"] = 1.0 / (shown + 1.0)
    g["correct"] = g["correct"].astype(float)
    agg = (
        g.groupby(["breakdown", "key"], sort=False)
        .agg(n_items=("correct", "size"), hits=("correct", "sum"), random_expected=("chance", "mean"))
        .reset_index()
    )
    lo, hi = wilson(agg["hits"].to_numpy(), agg["n_items"].to_numpy())
    out = agg.assign(
        model=model,
        kind=kind,
        method=method,
        split=split,
        accuracy=100 * agg["hits"] / agg["n_items"],
        ci_low=lo,
        ci_high=hi,
        random_expected=100 * agg["random_expected"],
        status="ok",
        reason="",
        none_mode=none_mode,
        none_rule=none_rule,
        judge_decided=int((status == "decided").sum()),
        judge_failed=int((status == "failed").sum()),
    )
    return out[METRIC_COLUMNS]


def method_metrics(rows: pd.DataFrame, kind: str, split: str = "test") -> pd.DataFrame:
    """accuracy_table of every (model, method) in a predictions/answers table."""
    if "method" not in rows or kind == "lvlm":
        return pd.concat(
            [accuracy_table(g, m, kind, split, "answer") for m, g in rows.groupby("model")], ignore_index=True
        )
    return pd.concat(
        [accuracy_table(g, m, kind, split, meth) for (m, meth), g in rows.groupby(["model", "method"])],
        ignore_index=True,
    )


def leaderboard(metrics: pd.DataFrame) -> pd.DataFrame:
    """One row per (model, method): overall accuracy and chance, judge counts, then the breakdown columns."""
    if metrics.empty:
        return pd.DataFrame(columns=["model", "kind", "method", "status", "accuracy", "random_expected"])
    m = metrics[metrics["split"] == "test"]
    base = m[m["breakdown"] == "overall"][
        [
            "model",
            "kind",
            "method",
            "status",
            "reason",
            "accuracy",
            "random_expected",
            "n_items",
            "none_mode",
            "none_rule",
            "judge_decided",
            "judge_failed",
        ]
    ]
    wide = m[m["breakdown"] != "overall"].assign(col=lambda d: d["breakdown"] + ":" + d["key"].astype(str))
    wide = wide.pivot_table(index=["model", "method"], columns="col", values="accuracy", aggfunc="first")
    board = base.merge(wide.reset_index(), on=["model", "method"], how="left")
    return board.sort_values(
        ["status", "accuracy"], ascending=[False, False], na_position="last", ignore_index=True
    )
