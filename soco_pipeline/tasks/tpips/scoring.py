"""Agreement with the raters: y_k̂ for k̂ = argmax ŷ (a tie scores the tied options' mean share, our choice),
beside `rater_agreement` Σ_k y_k² and `ceiling` max_k y_k; error bars are 2 standard errors."""

from __future__ import annotations

import numpy as np
import pandas as pd


def agreement(scores: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per-row agreement y[k̂], k̂ = argmax of the model's scores (higher = that option is the pick); a tie
    scores the mean y of the tied options, a row of NaN scores (no answer) is a tie of every option."""
    s = np.nan_to_num(np.asarray(scores, float), nan=-np.inf)
    top = s == s.max(1, keepdims=True)
    return (np.asarray(y, float) * top).sum(1) / top.sum(1)


def rater_agreement(y: np.ndarray) -> np.ndarray:
    """Σ_k y_k² per row: the chance that two random raters pick the same option (the paper's consensus)."""
    return (np.asarray(y, float) ** 2).sum(1)


def ceiling(y: np.ndarray) -> np.ndarray:
    """max_k y_k per row: the best agreement any chooser can reach."""
    return np.asarray(y, float).max(1)


def _mean_se(x: np.ndarray) -> tuple[float, float]:
    x = np.asarray(x, float)
    if len(x) == 0:
        return float("nan"), float("nan")
    se = float(x.std(ddof=1) / np.sqrt(len(x))) if len(x) > 1 else 0.0
    return float(x.mean()), 2.0 * se


def summarise(
    rows: pd.DataFrame, per_row: np.ndarray, y: np.ndarray, group: str = "aspect", overall_label: str = "all"
) -> pd.DataFrame:
    """Agreement and rater agreement (mean, 2 x SE) and the ceiling per `group` value and overall, in %."""
    frame = pd.DataFrame(
        {
            group: rows[group].to_numpy(),
            "agreement": per_row,
            "rater_agreement": rater_agreement(y),
            "ceiling": ceiling(y) if len(y) else np.zeros(0),
        }
    )
    out = []
    for key, g in [(overall_label, frame), *sorted(frame.groupby(group), key=lambda kv: kv[0])]:
        a, ae = _mean_se(g.agreement.to_numpy())
        c, ce = _mean_se(g.rater_agreement.to_numpy())
        out.append(
            {
                group: key,
                "n": len(g),
                "agreement": 100 * a,
                "agreement_err": 100 * ae,
                "rater_agreement": 100 * c,
                "rater_agreement_err": 100 * ce,
                "ceiling": 100 * float(g.ceiling.mean()) if len(g) else float("nan"),
            }
        )
    return pd.DataFrame(out)
