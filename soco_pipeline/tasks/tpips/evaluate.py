"""Score tables: one row per (model, method, eval, aspect), eval "ooo" or "afc:<source>", aspect "all" for the
whole set: agreement beside the rater agreement and the ceiling, with the votes' `judgements` marker."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .annotators import JUDGEMENTS
from .baselines import SimFn, afc_scores, constant_choice, ooo_scores
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
    "rater_agreement",
    "rater_agreement_err",
    "ceiling",
    "judgements",
    "note",
]
OUTCOME_COLUMNS = ["model", "method", "triplet_id", "aspect", "split", "agreement", "judgements"]


def judgements_of(*tables: pd.DataFrame | None) -> str:
    """The one `judgements` marker of the vote tables given (simulated when none carries one)."""
    found = sorted(
        {str(v) for t in tables if t is not None and "judgements" in t for v in t.judgements.unique()}
    )
    if len(found) > 1:
        raise ValueError(f"vote tables mix judgements {found}; score one source at a time")
    return found[0] if found else JUDGEMENTS


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
        model=model,
        method=method,
        conditioned=bool(conditioned),
        judgements=judgements_of(ooo, afc),
        note=note,
    )
    return out[SCORE_COLUMNS]


def ooo_outcomes(model: str, method: str, ooo: pd.DataFrame, ooo_pred: np.ndarray) -> pd.DataFrame:
    """One method's outcome on every OOO row (OUTCOME_COLUMNS): the vote share (0-1) of the image it picks."""
    y = ooo[["y_0", "y_1", "y_2"]].to_numpy(float)
    return pd.DataFrame(
        {
            "model": model,
            "method": method,
            "triplet_id": ooo["triplet_id"].astype(str).to_numpy(),
            "aspect": ooo["aspect"].astype(str).to_numpy(),
            "split": ooo["split"].astype(str).to_numpy(),
            "agreement": agreement(ooo_pred, y) if len(ooo) else np.zeros(0),
            "judgements": judgements_of(ooo),
        },
        columns=OUTCOME_COLUMNS,
    )


def evaluate_sim_outcomes(
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
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(score rows, OOO outcomes) of a similarity on the OOO `split` rows and every 2AFC row."""
    m = (ooo.split == split).to_numpy()
    rows = ooo[m]
    pred = ooo_scores(sim, ooo_pos[m], rows.aspect.to_numpy()) if m.any() else np.zeros((0, 3))
    apred = afc_scores(sim, afc_pos, afc.aspect.to_numpy()) if afc is not None and len(afc) else None
    scores = score_rows(
        model, method, conditioned, rows, pred, afc if apred is not None else None, apred, note
    )
    return scores, ooo_outcomes(model, method, rows, pred)


def evaluate_constant(
    model: str,
    ooo: pd.DataFrame,
    afc: pd.DataFrame | None = None,
    position: int = 0,
    split: str = "test",
) -> pd.DataFrame:
    """Score the chooser that always picks the option at `position` (OOO: image k is the odd one; 2AFC: x_k)."""
    rows = ooo[(ooo.split == split).to_numpy()]
    apred = constant_choice(len(afc), 2, position) if afc is not None and len(afc) else None
    pred, note = constant_choice(len(rows), 3, position), f"always option {position + 1}"
    return score_rows(model, "constant", False, rows, pred, afc if apred is not None else None, apred, note)


def pixel_baselines(images: pd.DataFrame, ooo: pd.DataFrame, afc: pd.DataFrame, cfg) -> pd.DataFrame:
    """Score rows of the pixel baselines (random, constant, L2, SSIM) and, with aspect values, the oracle."""
    from . import baselines as b
    from .aspects import VALUE_COLUMNS
    from .images import load_pixels

    ids = images.image_id.tolist()
    opos, apos = b.ooo_positions(ooo, ids), b.afc_positions(afc, ids)
    pixels = load_pixels(images.uri.tolist(), cfg.image_size)
    methods = [("random", False, b.random_sim(cfg.seed)), ("l2", False, b.l2_sim(pixels))]
    methods.append(("ssim", False, b.ssim_sim(pixels)))
    if set(VALUE_COLUMNS) <= set(images.columns):
        methods.append(("oracle", True, b.oracle_sim(images, ids, cfg)))
    parts = [evaluate_sim_outcomes("pixels", m, c, s, ooo, opos, afc, apos)[0] for m, c, s in methods]
    parts.insert(1, evaluate_constant("pixels", ooo, afc))
    return pd.concat(parts, ignore_index=True)


def no_outcomes() -> pd.DataFrame:
    """The outcome table of a model that does not apply: no rows (OUTCOME_COLUMNS)."""
    return pd.DataFrame(
        {c: pd.Series(dtype=float if c == "agreement" else object) for c in OUTCOME_COLUMNS},
        columns=OUTCOME_COLUMNS,
    )


def not_applicable_rows(model: str, reason: str, judgements: str = JUDGEMENTS) -> pd.DataFrame:
    """One row saying a model does not apply (NaN scores, the reason in `note`)."""
    row = dict.fromkeys(SCORE_COLUMNS, np.nan) | {"model": model, "method": "n/a", "conditioned": False}
    row |= {"eval": "ooo", "aspect": "all", "n": 0, "judgements": judgements}
    row["note"] = f"not applicable: {reason}"
    return pd.DataFrame([row], columns=SCORE_COLUMNS)
