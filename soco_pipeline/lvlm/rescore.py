"""Re-scoring without inference: stored predictions by new protocol options, stored answers by new rules."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from soco_pipeline.lvlm.metrics import lvlm_metrics
from soco_pipeline.lvlm.parse import parse_answers


def rescore_answers(
    answers: pd.DataFrame, parse: Callable[[pd.Series], pd.Series] = parse_answers
) -> pd.DataFrame:
    """Stored LVLM answers re-parsed from their raw text with `parse` (a Series of texts -> letters or '')."""
    out = answers.copy()
    out["parsed"] = parse(out["raw_answer"].astype(str)).astype(str).to_numpy()
    out["correct"] = (out["parsed"] == out["answer"]) & (out["error"].astype(str) == "")
    return out


def rescore_lvlm(
    answers: pd.DataFrame, parse: Callable[[pd.Series], pd.Series] = parse_answers
) -> pd.DataFrame:
    """LVLM metrics (lvlm.metrics.lvlm_metrics) of stored answers under another parser; no model call."""
    return lvlm_metrics(rescore_answers(answers, parse))
