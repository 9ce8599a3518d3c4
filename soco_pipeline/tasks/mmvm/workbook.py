"""`soco score-workbook mmvm FILE`: a prediction workbook scored by the family's extraction and metrics."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from soco_pipeline.tasks.mmvm.answers import build_judge, score_predictions
from soco_pipeline.tasks.mmvm.metrics import accuracy_table
from soco_pipeline.tasks.mmvm.official import read_prediction_workbook


@dataclass(frozen=True)
class WorkbookScore:
    """One scored workbook: per-row verdicts, the metric rows, and a one-line summary."""

    rows: pd.DataFrame
    metrics: pd.DataFrame
    summary: str


def score_workbook(
    path: str | Path, judge_mode: str = "off", judge_spec: str | None = None, cache_root: str | None = None
) -> WorkbookScore:
    """Score one MMVM prediction workbook, with a judge (`judge_mode`, `judge_spec`) if asked."""
    judge = None
    if judge_mode != "off":
        if not judge_spec:
            raise ValueError(f"--judge {judge_mode} needs --judge-spec: an LVLM spec file of the judge")
        from soco_pipeline.lvlm.cache import AnswerCache
        from soco_pipeline.lvlm.specs import load_spec

        cache = AnswerCache(cache_root) if cache_root else None
        judge = build_judge(load_spec(judge_spec), judge_mode, cache=cache)
    rows = score_predictions(read_prediction_workbook(path), judge, where=str(path))
    metrics = accuracy_table(rows, Path(path).stem, "lvlm", method="answer")
    overall = metrics[metrics["breakdown"] == "overall"].iloc[0]
    judged = (
        ""
        if judge is None
        else f", judge {judge_mode}: {overall.judge_decided} decided, {overall.judge_failed} failed"
    )
    summary = (
        f"{path}: {len(rows)} rows, accuracy {overall.accuracy:.2f} (chance {overall.random_expected:.2f})"
        f"{judged}"
    )
    return WorkbookScore(rows, metrics, summary)
