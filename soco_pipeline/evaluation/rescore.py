"""Re-scoring without inference: new protocol options re-score stored predictions, new parser rules re-score
stored raw answers. Nothing here loads a backbone or calls a model."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from soco_pipeline.evaluation.metrics import compute_metrics
from soco_pipeline.evaluation.protocol import ProtocolConfig
from soco_pipeline.lvlm.metrics import lvlm_metrics
from soco_pipeline.lvlm.parse import parse_answers
from soco_pipeline.taxonomy import Taxonomy


def rescore_backbone(
    tables: dict[str, pd.DataFrame], taxonomy: Taxonomy, protocol: ProtocolConfig
) -> pd.DataFrame:
    """Metrics of stored predictions under another protocol's scoring knobs (alphas, threshold, target
    keypoint, reductions). Knobs that change predictions (the matching hash) need new predictions instead."""
    return compute_metrics(
        tables["predictions"],
        tables.get("four_choice_predictions"),
        tables["correspondences"],
        tables["keypoints"],
        tables["image_set"],
        tables["image_pairs"],
        taxonomy,
        protocol,
    )


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
