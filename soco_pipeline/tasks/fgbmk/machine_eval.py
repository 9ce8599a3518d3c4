"""The machine-oriented evaluation of one backbone: probe and retrieval per level, across and within."""

from __future__ import annotations

import numpy as np
import pandas as pd

from soco_pipeline.evaluation.stats import bootstrap_share
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
    "top1_ci95_lo",
    "top1_ci95_hi",
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
    "probe_rows_skipped",
    "probe_rows_skipped_ids",
    "test_classes_without_train",
    "test_classes_without_train_ids",
    "simulated",
]


def tasks_of(items: pd.DataFrame) -> list[tuple[str, str, str]]:
    """(scope, superclass, level) of every probe: across per level, within each superclass at subclass."""
    across = [("across", "all", level) for level in LEVELS if items[level].nunique() > 1]
    within = [
        ("within", s, "subclass")
        for s in sorted(items.superclass.unique())
        if items.superclass.nunique() > 1 and items[items.superclass == s].subclass.nunique() > 1
    ]
    return across + within


def level_labels(items: pd.DataFrame, level: str) -> np.ndarray:
    """The level's ids as they are (no renumbering: FG-BMK's seen/unseen split is by the parity of the
    release's own ids, and its heads have max id + 1 outputs)."""
    return items[f"{level}_id"].to_numpy().astype(np.int64)


def label_lists(items: pd.DataFrame, level: str) -> list[list[int]]:
    """Every row's labels at `level`: all ids of a multi-label row, else its one id."""
    if level == "subclass" and "labels" in items.columns:
        return [[int(x) for x in str(v).split()] for v in items["labels"]]
    return [[int(v)] for v in level_labels(items, level)]


def unseen_test_classes(train_labels, test_labels) -> list[int]:
    """Classes that test rows hold and no training row does (a probe cannot predict them)."""
    seen = {c for lab in train_labels for c in lab}
    return sorted({c for lab in test_labels for c in lab} - seen)


def per_class_top1(logits, labels) -> np.ndarray:
    """Top-1 (argmax, as the probe's metric) per class present in `labels` (0-100), in class-id order."""
    labels = np.asarray(labels)
    hit = (np.asarray(logits).argmax(1) == labels).astype(np.float64)
    present = np.unique(labels)
    return (np.bincount(labels, hit)[present] / np.bincount(labels)[present]) * 100.0


def evaluate_backbone(
    backbone: str, feats: GlobalFeatures, items: pd.DataFrame, config: FgbmkConfig, simulated: bool = True
) -> tuple[pd.DataFrame, dict[tuple[str, str, str], ProbeResult]]:
    """Probe and retrieval metrics (METRIC_COLUMNS) of one backbone, and its trained probes by task."""
    rows, probes = [], {}
    for scope, sup, level in tasks_of(items):
        part = items if sup == "all" else items[items.superclass == sup]
        lists = label_lists(part, level)
        single = np.array([len(lab) == 1 for lab in lists])
        labels = np.array([lab[0] for lab in lists], dtype=np.int64)
        is_train, is_test = (part.split == "train").to_numpy(), (part.split == "test").to_numpy()
        k = max(c for lab in lists for c in lab) + 1  # the release: the largest id + 1 outputs
        # The probe reads single-label rows (the release's Dataset takes one int a line); retrieval all rows.
        train, test = is_train & single, is_test & single
        f_train, f_test = feats.subset(part.image_id[train]), feats.subset(part.image_id[test])
        probe = train_probe(f_train, labels[train], f_test, labels[test], config.linear_probe, config.seed, k)
        r_train = [lab for lab, t in zip(lists, is_train, strict=True) if t]
        r_test = [lab for lab, t in zip(lists, is_test, strict=True) if t]
        g_train, g_test = feats.subset(part.image_id[is_train]), feats.subset(part.image_id[is_test])
        ret = train_retrieval(g_train, r_train, g_test, r_test, config.retrieval, config.seed, k)
        probes[(scope, sup, level)] = probe
        per_class = per_class_top1(probe.eval_logits.numpy(), labels[test])
        # the top-1's 95% CI: a bootstrap over the test images (the best head's argmax, as topk_accuracy)
        lo, hi = bootstrap_share(probe.eval_logits.argmax(1).numpy() == labels[test], config.seed)
        unseen = unseen_test_classes([[c] for c in labels[train]], [[c] for c in labels[test]])
        present = np.unique(labels[train | test])
        rows.append(
            {
                "backbone": backbone,
                "scope": scope,
                "superclass": sup,
                "level": level,
                "n_classes": len(present),
                "n_train": int(train.sum()),
                "n_test": int(test.sum()),
                "chance_top1": 100.0 / len(present),
                "top1": probe.top1,
                "top1_ci95_lo": lo,
                "top1_ci95_hi": hi,
                "top5": probe.top5,
                "probe_head": probe.best,
                "probe_iterations": probe.iterations,
                "probe_seconds": probe.seconds,
                "recall_at_1": ret.recall_at_1,
                "map": ret.map,
                "retrieval_head": ret.best,
                "retrieval_iterations": ret.iterations,
                "retrieval_seconds": ret.seconds,
                **{f"class_top1_{s}": float(getattr(per_class, s)()) for s in ("mean", "std", "min", "max")},
                "test_per_class": float(test.sum()) / len(per_class),
                "probe_rows_skipped": int((~single & (is_train | is_test)).sum()),
                # the first 20 skipped rows by image id (the count says how many there are)
                "probe_rows_skipped_ids": " ".join(part.image_id[~single & (is_train | is_test)].head(20)),
                "test_classes_without_train": len(unseen),
                "test_classes_without_train_ids": " ".join(str(c) for c in unseen),
                "simulated": simulated,
            }
        )
    return pd.DataFrame(rows, columns=METRIC_COLUMNS), probes


PREDICTION_COLUMNS = [
    "backbone",
    "image_id",
    "level",
    "predicted",
    "label",
    "correct",
    "probe_head",
    "simulated",
]


def probe_predictions(
    backbone: str,
    items: pd.DataFrame,
    probes: dict[tuple[str, str, str], ProbeResult],
    simulated: bool = True,
) -> pd.DataFrame:
    """The best head's argmax on every test image the probe scored, per level (PREDICTION_COLUMNS)."""
    parts = []
    for (scope, _, level), probe in sorted(probes.items()):
        if scope != "across":
            continue
        lists = label_lists(items, level)
        single = np.array([len(lab) == 1 for lab in lists])
        test = (items.split == "test").to_numpy() & single
        labels = np.array([lab[0] for lab in lists], dtype=np.int64)[test]
        predicted = probe.eval_logits.argmax(1).numpy().astype(np.int64)  # torch.argmax, as topk_accuracy
        if len(predicted) != len(labels):
            raise ValueError(
                f"{backbone}: the {level} probe scored {len(predicted)} test images, the items hold "
                f"{len(labels)} single-label test rows: pass the items the probe was trained on"
            )
        parts.append(
            pd.DataFrame(
                {
                    "backbone": backbone,
                    "image_id": items.image_id[test].astype(str).to_numpy(),
                    "level": level,
                    "predicted": predicted,
                    "label": labels,
                    "correct": predicted == labels,
                    "probe_head": probe.best,
                    "simulated": simulated,
                }
            )
        )
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=PREDICTION_COLUMNS)


def summary(metrics: pd.DataFrame) -> pd.DataFrame:
    """One row per backbone: scores per level (across), within a superclass, and the drop (finding 1)."""
    out = []
    for backbone, grp in metrics.groupby("backbone", sort=True):
        across = grp[grp.scope == "across"].set_index("level")
        within = grp[grp.scope == "within"]
        row = {"backbone": backbone}
        for level in LEVELS:
            if level in across.index:
                for m in ("top1", "top5", "recall_at_1", "map"):
                    row[f"{m}_{level}"] = float(across.loc[level, m])
                for end in ("lo", "hi"):  # NaN in metrics stored before the CI existed
                    row[f"ci95_{end}_{level}"] = float(across.loc[level].get(f"top1_ci95_{end}", np.nan))
        row["top1_within"] = float(within.top1.mean()) if len(within) else float("nan")
        row["map_within"] = float(within["map"].mean()) if len(within) else float("nan")
        row["top1_drop_across"] = row["top1_within"] - row.get("top1_subclass", float("nan"))
        row["simulated"] = bool(grp.simulated.all())
        out.append(row)
    return pd.DataFrame(out)
