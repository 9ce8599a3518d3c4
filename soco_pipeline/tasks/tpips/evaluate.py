"""Score tables: agreement per aspect and overall beside the consensus, for OOO (a split) and each 2AFC source.

One row per (model, method, eval, aspect): eval is "ooo" or "afc:<source>", aspect "all" for the whole set.
Every row says the judgements are simulated.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .annotators import JUDGEMENTS
from .baselines import SimFn, afc_scores, ooo_scores
from .scoring import agreement, summarise

SCORE_COLUMNS = [
    "model",
    "method",
    "conditioned",
    "eval",
    "aspect",
    "n",
    "agreement",
    "agreement_err",
    "consensus",
    "consensus_err",
    "judgements",
    "note",
]


def score_rows(
    model: str,
    method: str,
    conditioned: bool,
    ooo: pd.DataFrame,
    ooo_pred: np.ndarray,
    afc: pd.DataFrame | None = None,
    afc_pred: np.ndarray | None = None,
    note: str = "",
) -> pd.DataFrame:
    """The score table of one method from its predicted option scores (OOO (N, 3); 2AFC (M, 2))."""
    parts = []
    y = ooo[["y_0", "y_1", "y_2"]].to_numpy(float)
    if len(ooo):
        parts.append(summarise(ooo, agreement(ooo_pred, y), y).assign(eval="ooo"))
    if afc is not None and afc_pred is not None:
        ya = afc[["y_0", "y_1"]].to_numpy(float)
        per = agreement(afc_pred, ya)
        for source, idx in afc.groupby("source").indices.items():
            parts.append(summarise(afc.iloc[idx], per[idx], ya[idx]).assign(eval=f"afc:{source}"))
        if len(afc):
            parts.append(summarise(afc, per, ya).assign(eval="afc:all"))
    out = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=SCORE_COLUMNS)
    out = out.assign(
        model=model, method=method, conditioned=bool(conditioned), judgements=JUDGEMENTS, note=note
    )
    return out[SCORE_COLUMNS]


def evaluate_sim(
    model: str,
    method: str,
    conditioned: bool,
    sim: SimFn,
    ooo: pd.DataFrame,
    ooo_pos: np.ndarray,
    afc: pd.DataFrame | None = None,
    afc_pos: np.ndarray | None = None,
    split: str = "test",
    note: str = "",
) -> pd.DataFrame:
    """Score a similarity on the OOO `split` rows and on every 2AFC row."""
    m = (ooo.split == split).to_numpy()
    rows = ooo[m]
    pred = ooo_scores(sim, ooo_pos[m], rows.aspect.to_numpy()) if m.any() else np.zeros((0, 3))
    apred = afc_scores(sim, afc_pos, afc.aspect.to_numpy()) if afc is not None and len(afc) else None
    return score_rows(model, method, conditioned, rows, pred, afc if apred is not None else None, apred, note)


def not_applicable_rows(model: str, reason: str) -> pd.DataFrame:
    """One row saying a model does not apply (NaN scores, the reason in `note`)."""
    return pd.DataFrame(
        [
            {
                "model": model,
                "method": "n/a",
                "conditioned": False,
                "eval": "ooo",
                "aspect": "all",
                "n": 0,
                "agreement": np.nan,
                "agreement_err": np.nan,
                "consensus": np.nan,
                "consensus_err": np.nan,
                "judgements": JUDGEMENTS,
                "note": f"not applicable: {reason}",
            }
        ],
        columns=SCORE_COLUMNS,
    )
