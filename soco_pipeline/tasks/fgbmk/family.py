"""FG-BMK's declaration (tasks/__init__.py): its config, headline, results record and regression watch."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from soco_pipeline.tasks import SAME_ROWS, FamilySpec
from soco_pipeline.tasks.fgbmk.config import load_config
from soco_pipeline.trust import family_records as fr
from soco_pipeline.trust.family_watch import FamilyWatch, PairedOn
from soco_pipeline.trust.headline import Headline

TABLES = fr.FamilyTables(("fgbmk_items", "fgbmk_questions"), ("fgbmk_metrics",), ("fgbmk_answers",))
PAIRED = PairedOn(
    table="fgbmk_probe_predictions",
    sample="image_id",
    outcome="correct",
    samples="fgbmk_items",
    group="subclass_id",
    cluster="image_id",
    method="level",
    prefix="top1",
)


def record_parts(model: str, kind: str, t: dict[str, pd.DataFrame], n_boot: int) -> dict[str, Any]:
    """FG-BMK: a backbone's probe top-1/top-5 per level (stored aggregates, test images); an LVLM's accuracy
    per task and form, CIs over questions clustered by question group (its rotations)."""
    items = t["fgbmk_items"]
    test = items[items["split"] == "test"]
    if kind == "backbone":
        m = t["fgbmk_metrics"]
        across = m[m["scope"] == "across"]
        n_cat = across["level"].map(lambda lv: int(test[f"{lv}_id"].nunique()))
        n_units = np.full(len(across), len(test))
        parts = [
            fr.aggregate_rows(
                model, f"{k}/" + across["level"], across[k], n_units=n_units, n_categories=n_cat
            )
            for k in ("top1", "top5")
        ]
        cols = ["image_id", "path", "split", "superclass_id", "class_id", "subclass_id"]
        samples, tasks = fr.hash_block("test_images", test["image_id"], fr.row_hashes(test, cols))
        return {
            "intervals": pd.concat(parts, ignore_index=True),
            "n_samples": {"test_images": {"requested": len(test), "evaluated": len(test)}},
            "sample_hashes": samples,
            "task_hashes": tasks,
        }
    q = t["fgbmk_questions"]
    a = t["fgbmk_answers"]
    needed = [c for c in ("group_id", "task", "form", "level") if c not in a.columns]
    a = a.merge(q[["question_id", *needed]], on="question_id", how="left", validate="many_to_one")
    scores = fr.sample_scores(
        model, a["task"] + "/" + a["form"], a["level"], a["question_id"], a["group_id"], a["correct"]
    )
    cols = ["question_id", "group_id", "rotation", "task", "level", "form", "image_id", "text"]
    samples, tasks = fr.hash_block("questions", q["question_id"], fr.row_hashes(q, cols))
    return {
        "intervals": fr.intervals_of(scores, n_boot),
        "n_samples": {"questions": {"requested": len(q), "evaluated": int(a["question_id"].nunique())}},
        "sample_hashes": samples,
        "task_hashes": tasks,
    }


def input_note(cfg) -> str:
    """FG-BMK extracts every backbone at its own input policy (the config's `global_features`)."""
    g = cfg.global_features
    dense = f", dense-only backbones at {g.dense_input} px" if g.dense_input else ""
    return (
        f"input: FG-BMK's own policy for every backbone (resize {g.resize}, centre crop {g.crop}{dense}; "
        f"assets/fgbmk.yaml global_features), not the spec's `input`: {SAME_ROWS}"
    )


SPEC = FamilySpec(
    "fgbmk",
    "FG-BMK: fine-grained recognition (probe / retrieval, LVLM questions)",
    lambda path, s: load_config(path, s.dataset_size if s.dataset_size in ("demo", "full") else None),
    headline=Headline(
        values=("top1_subclass", "choice_subclass"),
        label="FG-BMK subclass accuracy (probe top-1 | choice)",
        ci_low="ci95_lo_subclass",  # bootstrap over test images (probe) or questions (LVLM choice)
        ci_high="ci95_hi_subclass",
        simulated="simulated",
    ),
    record=TABLES,
    parts=record_parts,
    columns=tuple(
        "model kind top1_subclass map_subclass top1_within top1_drop_across fgsm_max_eps_subclass choice_subclass circular_subclass".split()
    ),
    input_note=input_note,
    findings=(
        "fgbmk_findings",
        tuple("finding claim paper measured effect ci_low ci_high holds why not_covered".split()),
    ),
    watch=FamilyWatch(
        family="fgbmk",
        headline="FG-BMK linear-probe top-1, subclass level (across superclasses)",
        metrics=r"top1/subclass",
        per_model=("fgbmk_metrics", "fgbmk_probe_predictions"),
        samples=("fgbmk_items",),
        paired=PAIRED,
    ),
)
