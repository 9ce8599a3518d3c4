"""The machine-oriented evaluation of one backbone: probe and retrieval at each granularity level over all
superclasses ("across"), and at the subclass level inside each superclass ("within"; the paper's drop is
within minus across)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from soco_pipeline.features.global_cache import GlobalFeatures
from soco_pipeline.tasks.fgbmk.config import LEVELS, FgbmkConfig
from soco_pipeline.tasks.fgbmk.linear_probe import ProbeResult, train_probe
from soco_pipeline.tasks.fgbmk.retrieval import train_retrieval

METRIC_COLUMNS = [
    "backbone",
    "scope",
    "superclass",
    "level",
    "n_classes",
    "n_train",
    "n_test",
    "chance_top1",
    "top1",
    "top5",
    "probe_head",
    "probe_iterations",
    "probe_seconds",
    "recall_at_1",
    "map",
    "retrieval_head",
    "retrieval_iterations",
    "retrieval_seconds",
    "class_top1_mean",
    "class_top1_std",
    "class_top1_min",
    "class_top1_max",
    "test_per_class",
    "simulated",
]


def tasks_of(items: pd.DataFrame) -> list[tuple[str, str, str]]:
    """(scope, superclass, level) of every probe: across at each level with two classes or more, within each
    superclass at subclass (when there are several superclasses)."""
    across = [("across", "all", level) for level in LEVELS if items[level].nunique() > 1]
    within = [
        ("within", s, "subclass")
        for s in sorted(items.superclass.unique())
        if items.superclass.nunique() > 1 and items[items.superclass == s].subclass.nunique() > 1
    ]
    return across + within


def level_labels(items: pd.DataFrame, level: str) -> np.ndarray:
    """Contiguous 0..k-1 labels in the order of the level's ids (so even/odd follows the published ids)."""
    ids = items[f"{level}_id"].to_numpy()
    return np.searchsorted(np.unique(ids), ids)


def per_class_top1(logits, labels) -> np.ndarray:
    """Top-1 of the probe per class present in `labels` (0-100), in class-id order (finding 5's spread)."""
    labels = np.asarray(labels)
    hit = (np.asarray(logits).argmax(1) == labels).astype(np.float64)
    present = np.unique(labels)
    return (np.bincount(labels, hit)[present] / np.bincount(labels)[present]) * 100.0


def evaluate_backbone(
    backbone: str, feats: GlobalFeatures, items: pd.DataFrame, config: FgbmkConfig, simulated: bool = True
) -> tuple[pd.DataFrame, dict[tuple[str, str, str], ProbeResult]]:
    """Probe and retrieval metrics (METRIC_COLUMNS) of one backbone on `items` (split, <level>_id, superclass),
    and the trained probes by (scope, superclass, level) for the robustness step."""
    rows, probes = [], {}
    for scope, sup, level in tasks_of(items):
        part = items if sup == "all" else items[items.superclass == sup]
        labels = level_labels(part, level)
        train, test = (part.split == "train").to_numpy(), (part.split == "test").to_numpy()
        k = int(labels.max()) + 1
        f_train, f_test = feats.subset(part.image_id[train]), feats.subset(part.image_id[test])
        probe = train_probe(f_train, labels[train], f_test, labels[test], config.linear_probe, config.seed, k)
        ret = train_retrieval(f_train, labels[train], f_test, labels[test], config.retrieval, config.seed, k)
        probes[(scope, sup, level)] = probe
        per_class = per_class_top1(probe.eval_logits.numpy(), labels[test])
        rows.append(
            {
                "backbone": backbone,
                "scope": scope,
                "superclass": sup,
                "level": level,
                "n_classes": k,
                "n_train": int(train.sum()),
                "n_test": int(test.sum()),
                "chance_top1": 100.0 / k,
                "top1": probe.top1,
                "top5": probe.top5,
                "probe_head": probe.best,
                "probe_iterations": probe.iterations,
                "probe_seconds": probe.seconds,
                "recall_at_1": ret.recall_at_1,
                "map": ret.map,
                "retrieval_head": ret.best,
                "retrieval_iterations": ret.iterations,
                "retrieval_seconds": ret.seconds,
                "class_top1_mean": float(per_class.mean()),
                "class_top1_std": float(per_class.std()),
                "class_top1_min": float(per_class.min()),
                "class_top1_max": float(per_class.max()),
                "test_per_class": float(test.sum()) / len(per_class),
                "simulated": simulated,
            }
        )
    return pd.DataFrame(rows, columns=METRIC_COLUMNS), probes


def summary(metrics: pd.DataFrame) -> pd.DataFrame:
    """One row per backbone: top-1 / recall@1 / mAP at each level (across), the mean within a superclass at
    the subclass level, and the drop from within to across (the paper's finding 1)."""
    out = []
    for backbone, grp in metrics.groupby("backbone", sort=True):
        across = grp[grp.scope == "across"].set_index("level")
        within = grp[grp.scope == "within"]
        row = {"backbone": backbone}
        for level in LEVELS:
            if level in across.index:
                for m in ("top1", "top5", "recall_at_1", "map"):
                    row[f"{m}_{level}"] = float(across.loc[level, m])
        row["top1_within"] = float(within.top1.mean()) if len(within) else float("nan")
        row["map_within"] = float(within["map"].mean()) if len(within) else float("nan")
        row["top1_drop_across"] = row["top1_within"] - row.get("top1_subclass", float("nan"))
        row["simulated"] = bool(grp.simulated.all())
        out.append(row)
    return pd.DataFrame(out)
