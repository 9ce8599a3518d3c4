"""Agreement with the (simulated) raters: y_k̂ for k̂ = argmax ŷ, per aspect and overall, beside the consensus.

Agreement of a prediction is the vote share of the option it picks (the chance that a random rater agrees);
consensus is Σ_k y_k² (published). Error bars are 2 x the standard error of the per-row values. Ties in ŷ
go to the first option (argmax), so a constant chooser scores exactly the mean of y_0.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def agreement(scores: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per-row agreement y[k̂], k̂ = argmax of the model's scores (higher = that option is the pick)."""
    k = np.argmax(np.asarray(scores, float), axis=1)
    return np.asarray(y, float)[np.arange(len(k)), k]


def _mean_se(x: np.ndarray) -> tuple[float, float]:
    x = np.asarray(x, float)
    if len(x) == 0:
        return float("nan"), float("nan")
    se = float(x.std(ddof=1) / np.sqrt(len(x))) if len(x) > 1 else 0.0
    return float(x.mean()), 2.0 * se


def summarise(
    rows: pd.DataFrame, per_row: np.ndarray, y: np.ndarray, group: str = "aspect", overall_label: str = "all"
) -> pd.DataFrame:
    """Agreement and consensus (mean, 2 x SE) per `group` value and over all rows, in percent (0-100)."""
    cons = (np.asarray(y, float) ** 2).sum(1)
    frame = pd.DataFrame({group: rows[group].to_numpy(), "agreement": per_row, "consensus": cons})
    out = []
    for key, g in [(overall_label, frame), *sorted(frame.groupby(group), key=lambda kv: kv[0])]:
        a, ae = _mean_se(g.agreement.to_numpy())
        c, ce = _mean_se(g.consensus.to_numpy())
        out.append(
            {
                group: key,
                "n": len(g),
                "agreement": 100 * a,
                "agreement_err": 100 * ae,
                "consensus": 100 * c,
                "consensus_err": 100 * ce,
            }
        )
    return pd.DataFrame(out)
