"""The FG-BMK tables that summarise: per-LVLM metrics and the family leaderboard (backbones and LVLMs)."""

from __future__ import annotations

import pandas as pd

from soco_pipeline.evaluation.stats import bootstrap_share
from soco_pipeline.tasks.fgbmk.answer_scoring import (
    accuracy_table,
    answer_acc,
    circular_accuracy,
    knowledge_bias,
)
from soco_pipeline.tasks.fgbmk.machine_eval import summary

LVLM_METRIC_COLUMNS = ["model", "task", "level", "form", "metric", "value", "n", "simulated"]


def lvlm_metrics(answers: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    """Long table of one model's accuracies per task/level/form on rotation 0, with 95% bootstrap CIs."""
    model = answers.model.iloc[0] if len(answers) else ""
    simulated = bool(answers.simulated.all()) if "simulated" in answers.columns else True
    plain = answers[answers.rotation == 0]
    rows = []
    for r in accuracy_table(plain, ["task", "level", "form"]).itertuples(index=False):
        rows.append((model, r.task, r.level, r.form, "accuracy", r.accuracy, r.n))
        rows.append((model, r.task, r.level, r.form, "accuracy_published", r.accuracy_published, r.n))
    for (task, level, form), grp in plain.groupby(["task", "level", "form"], sort=True):
        lo, hi = bootstrap_share(grp.correct.astype(bool), seed)
        rows.append((model, task, level, form, "accuracy_ci95_lo", lo, len(grp)))
        rows.append((model, task, level, form, "accuracy_ci95_hi", hi, len(grp)))
    for (task, level, form), grp in plain.groupby(["task", "level", "form"], sort=True):
        acc = answer_acc(grp)
        rows.append(
            (model, task, level, form, "overall_accuracy_published", acc["overall_accuracy"], acc["images"])
        )
    for r in circular_accuracy(answers, ["task", "level"]).itertuples(index=False):
        rows.append((model, r.task, r.level, "choice", "circular_accuracy", r.circular_accuracy, r.groups))
    if (answers.task == "knowledge_bias").any():
        per, rep = knowledge_bias(answers)
        rep["questions"] = float(per.n.mean()) if len(per) else float("nan")
        key = (model, "knowledge_bias", "subclass", "true_false")
        for k in ("mean", "std", "min", "max", "questions"):
            rows.append((*key, f"class_accuracy_{k}", rep[k], rep["classes"]))
    return pd.DataFrame([(*r, simulated) for r in rows], columns=LVLM_METRIC_COLUMNS)


def fgbmk_leaderboard(
    backbone_metrics: pd.DataFrame, robustness: pd.DataFrame, lvlm: pd.DataFrame
) -> pd.DataFrame:
    """One row per backbone (probe / retrieval, within vs across, FGSM) and per LVLM (choice, circular)."""
    rows = []
    if len(backbone_metrics):
        s = summary(backbone_metrics)
        for r in s.to_dict("records"):
            rob = (
                robustness[(robustness.backbone == r["backbone"]) & (robustness.level == "subclass")]
                if len(robustness)
                else robustness
            )
            fgsm = rob[rob.attack == "fgsm"] if len(rob) else rob
            worst = float(fgsm.sort_values("strength").accuracy.iloc[-1]) if len(fgsm) else float("nan")
            rows.append(
                {
                    "kind": "backbone",
                    "model": r.pop("backbone"),
                    **r,
                    "clean_subclass": float(rob.clean_accuracy.iloc[0]) if len(rob) else float("nan"),
                    "fgsm_max_eps_subclass": worst,
                }
            )
    if len(lvlm):
        for model, grp in lvlm.groupby("model", sort=True):
            sim = bool(grp.simulated.all()) if "simulated" in grp.columns else True
            row: dict = {"kind": "lvlm", "model": model, "simulated": sim}
            acc = grp[(grp.task == "hierarchical") & (grp.form == "choice") & (grp.metric == "accuracy")]
            for r in acc.itertuples(index=False):
                row[f"choice_{r.level}"] = float(r.value)
            # the choice accuracy's CI (bootstrap over questions), as a probe's top-1's
            for end in ("lo", "hi"):
                ci = grp[(grp.task == "hierarchical") & (grp.form == "choice")]
                for r in ci[ci.metric == f"accuracy_ci95_{end}"].itertuples(index=False):
                    row[f"ci95_{end}_{r.level}"] = float(r.value)
            circ = grp[(grp.task == "hierarchical") & (grp.metric == "circular_accuracy")]
            for r in circ.itertuples(index=False):
                row[f"circular_{r.level}"] = float(r.value)
            kb = grp[grp.metric == "class_accuracy_std"]
            row["knowledge_bias_std"] = float(kb.value.iloc[0]) if len(kb) else float("nan")
            rows.append(row)
    return pd.DataFrame(rows) if rows else pd.DataFrame(columns=["kind", "model"])  # nothing evaluated yet


CORRELATION_METRICS = (
    "top1_subclass",
    "top1_class",
    "top1_superclass",
    "map_subclass",
    "recall_at_1_subclass",
    "top1_within",
    "top1_drop_across",
)


SCORE = {  # what every FG-BMK score row says alike
    "task": "fgbmk",
    "task_display": "FG-BMK (embedded, simulated)",
    "is_main_model": False,
    "source": "fgbmk_leaderboard",
}


def correlation_scores(board: pd.DataFrame) -> pd.DataFrame:
    """The backbone rows of fgbmk_leaderboard as score rows of soco_pipeline.analysis (SCORE_COLUMNS)."""
    from soco_pipeline.analysis.reference import SCORE_COLUMNS

    rows = []
    for r in board[board.kind == "backbone"].to_dict("records"):
        for m in CORRELATION_METRICS:
            if m in r and pd.notna(r[m]):
                better = m != "top1_drop_across"
                rows.append(
                    {"model": r["model"], "metric": m, "value": float(r[m]), "higher_better": better, **SCORE}
                )
    return pd.DataFrame(rows, columns=SCORE_COLUMNS)
