"""MMVM's declaration (tasks/__init__.py): its config, headline, results record and regression watch."""

from __future__ import annotations

import dataclasses
from typing import Any

import pandas as pd

from soco_pipeline.tasks import FamilySpec
from soco_pipeline.tasks.mmvm.config import load_config
from soco_pipeline.trust import family_records as fr
from soco_pipeline.trust.family_watch import FamilyWatch, PairedOn
from soco_pipeline.trust.headline import Headline

TABLES = fr.FamilyTables(("mmvm_items",), ("mmvm_predictions",), ("mmvm_answers",))
PAIRED = PairedOn(
    table="mmvm_predictions",
    sample="item_id",
    outcome="correct",
    samples="mmvm_items",
    group="match_type",
    cluster="case_id",
    method="method",
)


def record_parts(model: str, kind: str, t: dict[str, pd.DataFrame], n_boot: int) -> dict[str, Any]:
    """MMVM: accuracy (per method for a backbone) on the test items, CIs over items clustered by case (PAIRED)."""
    items = t["mmvm_items"]
    test = items[items["split"] == "test"]
    if kind == "backbone":
        rows = t["mmvm_predictions"]
        if (rows["status"] != "ok").all():
            raise fr.NotApplicableError(
                f"{model!r} is not applicable to MMVM: {rows['reason'].iat[0] if 'reason' in rows else ''}"
            )
        paired = PAIRED
    else:
        rows = t["mmvm_answers"]
        paired = dataclasses.replace(PAIRED, table="mmvm_answers", method=None)
    scores = paired.scores(model, t)
    cols = ["item_id", "case_id", "n_candidates", "match_type", "query_absent", "question", "answer"]
    samples, tasks = fr.hash_block("items", test["item_id"], fr.row_hashes(test, cols))
    return {
        "intervals": fr.intervals_of(scores, n_boot),
        "n_samples": {"items": {"requested": len(test), "evaluated": int(scores["unit"].nunique())}},
        "sample_hashes": samples,
        "task_hashes": tasks,
    }


SPEC = FamilySpec(
    "mmvm",
    "MMVM: multimodal visual matching (accuracy)",
    lambda path, settings: load_config(path),
    headline=Headline(
        values=("accuracy",),
        label="MMVM accuracy (test split)",
        where="kind != 'oracle' and status == 'ok'",
        best_of="method",
        n="n_items",
        simulated="data_source",
    ),
    record=TABLES,
    parts=record_parts,
    columns=("model", "method", "status", "accuracy", "random_expected", "n_items"),
    workbook="soco_pipeline.tasks.mmvm.workbook:score_workbook",
    watch=FamilyWatch(
        family="mmvm",
        headline="MMVM accuracy per method (test split)",
        metrics=r"accuracy/.+",
        per_model=("mmvm_predictions",),
        samples=("mmvm_items",),
        paired=PAIRED,
    ),
)
