"""The TPIPS leaderboard: one row per (model, method), sorted by OOO agreement, and each not-applicable model once
although every per-backbone score asset reports it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from soco_pipeline.tasks.tpips.evaluate import not_applicable_rows, score_rows
from soco_pipeline.tasks.tpips.leaderboard import board_markdown, leaderboard

pytestmark = pytest.mark.unit

pytestmark = pytest.mark.unit


def _scores(model: str, method: str, pick: int) -> pd.DataFrame:
    ooo = pd.DataFrame(
        {
            "aspect": ["colour", "pose", "colour"],
            "y_0": [1.0, 0.2, 0.6],
            "y_1": [0.0, 0.8, 0.4],
            "y_2": [0.0, 0.0, 0.0],
        }
    )
    pred = np.zeros((3, 3))
    pred[:, pick] = 1.0
    return score_rows(model, method, False, ooo, pred)


def test_not_applicable_models_are_listed_once_and_scores_are_sorted():
    parts = [_scores("effnet", "cosine", 1), _scores("effnet", "mid", 0)]
    for _asset in ("tpips_baseline_scores", "tpips_learned"):  # both write the oracles' reason
        parts += [
            not_applicable_rows("oracle_part", "no part maps"),
            not_applicable_rows("oracle_concept", "no maps"),
        ]
    board = leaderboard(pd.concat(parts, ignore_index=True))
    na = board[board.method == "n/a"]
    assert sorted(na.model) == ["oracle_concept", "oracle_part"]
    scored = board[board.method != "n/a"]
    assert scored.method.tolist() == ["mid", "cosine"]
    assert np.isclose(scored.ooo.iloc[0], 100 * (1.0 + 0.2 + 0.6) / 3)
    assert np.isclose(scored.ooo_colour.iloc[1], 100 * (0.0 + 0.4) / 2)


def test_the_board_carries_the_judgements_and_prints_them_once():
    parts = [
        _scores("effnet", "cosine", 1),
        _scores("effnet", "mid", 0),
        not_applicable_rows("oracle_part", "x"),
    ]
    board = leaderboard(pd.concat(parts, ignore_index=True))
    assert board.judgements.tolist() == ["simulated"] * 3
    text = board_markdown(board)
    assert text.splitlines()[0] == "judgements: simulated (a noisy-observer model, not people)"
    assert text.count("simulated") == 1 and "| judgements" not in text
    # the ceiling (mean max y) and the rater agreement (mean Σ y²) of the three rows, not a "consensus ceiling"
    row = board.iloc[0]
    assert row.ceiling == pytest.approx(100 * (1.0 + 0.8 + 0.6) / 3)
    assert row.rater_agreement == pytest.approx(100 * (1.0 + 0.68 + 0.52) / 3)
    human = _scores("effnet", "mid", 0).assign(judgements="human")
    assert board_markdown(leaderboard(human)).startswith("judgements: human\n")
