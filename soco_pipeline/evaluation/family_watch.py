"""What the regression watch compares in each task family, read from the family's stored tables.

A family's `FamilyWatch` names the metrics of its headline (as its results record names them,
family_records.py), the per-model and sample tables they come from, and either a `PairedOn` (the per-sample
table and its (sample, outcome) column pair: a paired test runs on it) or, where the family stores
aggregates only, the reason no paired test exists. `family_snapshot` turns one model's tables into what
evaluation/history.py archives and compares: the headline values, the per-sample 0/1 scores
(stats.SCORE_COLUMNS, empty when not paired-testable) and the task hash of the samples.

The three declarations (WATCHES):
- MMVM: accuracy per method (zero-shot, contrastive head) on the test items; paired on `mmvm_predictions`
  (`item_id`, `correct`), bootstrap categories = the item's match type (its cue combination), clusters = the
  case (the items of one scene pair);
- FG-BMK: the linear probe's subclass top-1; `fgbmk_metrics` stores the probe's accuracy per level, not its
  per-image outcomes: not paired-testable (the values are archived and their difference reported);
- TPIPS: odd-one-out agreement per method (test split); `tpips_baseline_scores` / `tpips_learned` store the
  agreement per (method, aspect), not per triplet: not paired-testable either.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from soco_pipeline.evaluation import hashes
from soco_pipeline.evaluation.stats import SCORE_COLUMNS


@dataclass(frozen=True)
class PairedOn:
    """The per-sample table a family's headline is paired-tested on: `table` (one row per scored sample of a
    model, per method when `method` names a column), its (`sample`, `outcome`) columns (the id, a 0/1 or bool
    outcome), and the family's sample table `samples`, whose `split` rows are scored and whose `group` (the
    bootstrap's categories) and `cluster` (samples that share an input) columns structure the test. Rows whose
    `status` column is not "ok" are not scored (a not-applicable backbone)."""

    table: str
    sample: str
    outcome: str
    samples: str
    group: str
    cluster: str
    method: str | None = None
    prefix: str = "accuracy"
    split: str = "test"

    def scores(self, model: str, tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
        """Per-sample scores (stats.SCORE_COLUMNS) of `model`: metric `<prefix>/<method>` (or `<prefix>`),
        group / cluster from the sample table, unit = the sample, score = the outcome as 0/1."""
        items = tables[self.samples]
        test = items[items["split"] == self.split] if "split" in items.columns else items
        rows = tables[self.table]
        if "status" in rows.columns:
            rows = rows[rows["status"] == "ok"]
        keep = [self.sample, self.group, self.cluster]
        rows = rows[rows[self.sample].isin(test[self.sample])].drop(columns=keep[1:], errors="ignore")
        rows = rows.merge(test[keep], on=self.sample, how="left", validate="many_to_one")
        metric = (
            self.prefix + "/" + rows[self.method].astype(str)
            if self.method
            else pd.Series(self.prefix, index=rows.index)
        )
        n = len(rows)
        return pd.DataFrame(
            {
                "model": np.full(n, model, dtype=object),
                "metric": metric.to_numpy(dtype=object),
                "group": rows[self.group].astype(str).to_numpy(),
                "unit": rows[self.sample].astype(str).to_numpy(),
                "element": np.full(n, "", dtype=object),
                "cluster": rows[self.cluster].astype(str).to_numpy(),
                "score": rows[self.outcome].astype(bool).astype(np.float64).to_numpy(),
            },
            columns=SCORE_COLUMNS,
        )


@dataclass(frozen=True)
class FamilyWatch:
    """What the regression watch compares in one family: `headline` in words, `metrics` (a regular expression
    over the metric names of the family's results record), the per-model tables and sample tables they are
    read from, and `paired` (the per-sample table of a paired test) or `not_paired` (why there is none)."""

    family: str
    headline: str
    metrics: str
    per_model: tuple[str, ...]
    samples: tuple[str, ...]
    paired: PairedOn | None = None
    not_paired: str = ""
    reduction: str = "pooled"

    def __post_init__(self) -> None:
        if (self.paired is None) == (not self.not_paired):
            raise ValueError(
                f"watch of {self.family!r}: give either `paired` (a per-sample table) or `not_paired` (why)"
            )

    @property
    def tables(self) -> tuple[str, ...]:
        """Every table the watch reads: the per-model ones, then the sample tables."""
        return (*self.per_model, *self.samples)


@dataclass(frozen=True)
class FamilySnapshot:
    """One model's watched figures: headline `values` (0-100) by metric, per-sample `scores`
    (SCORE_COLUMNS; empty when the family is not paired-testable) and the `task_hash` of its samples."""

    values: dict[str, float]
    scores: pd.DataFrame
    task_hash: str


def family_snapshot(
    watch: FamilyWatch, model: str, tables: dict[str, pd.DataFrame], n_boot: int = 200
) -> FamilySnapshot:
    """The watched figures of a backbone `model` from its family tables (names as in `watch.tables`): the
    values of the headline metrics of its results record (family_records), the per-sample scores of those
    metrics when `watch.paired` is set, and one task hash over the record's task hashes."""
    from soco_pipeline.evaluation.family_records import PARTS

    parts = PARTS[watch.family](model, "backbone", tables, n_boot)
    ci = parts["intervals"]
    wanted = ci["metric"].astype(str).map(lambda m: re.fullmatch(watch.metrics, m) is not None)
    values = dict(
        zip(ci.loc[wanted, "metric"].astype(str), ci.loc[wanted, "value"].astype(float), strict=True)
    )
    if not values:
        raise ValueError(
            f"{model!r} has no {watch.family} headline metric matching {watch.metrics!r} in its tables "
            f"({', '.join(watch.per_model)}): materialize them for this backbone"
        )
    scores = (
        watch.paired.scores(model, tables).query("metric in @values")
        if watch.paired is not None
        else pd.DataFrame(columns=SCORE_COLUMNS)
    )
    task_hash = hashes.sha(json.dumps(parts["task_hashes"], sort_keys=True))
    return FamilySnapshot(values, scores.reset_index(drop=True), task_hash)


MMVM_PAIRED = PairedOn(
    table="mmvm_predictions",
    sample="item_id",
    outcome="correct",
    samples="mmvm_items",
    group="match_type",
    cluster="case_id",
    method="method",
)

WATCHES: dict[str, FamilyWatch] = {
    "mmvm": FamilyWatch(
        family="mmvm",
        headline="MMVM accuracy per method (test split)",
        metrics=r"accuracy/.+",
        per_model=("mmvm_predictions",),
        samples=("mmvm_items",),
        paired=MMVM_PAIRED,
    ),
    "fgbmk": FamilyWatch(
        family="fgbmk",
        headline="FG-BMK linear-probe top-1, subclass level (across superclasses)",
        metrics=r"top1/subclass",
        per_model=("fgbmk_metrics",),
        samples=("fgbmk_items",),
        not_paired=(
            "fgbmk_metrics stores the probe's top-1 per level, not its per-image outcomes: no paired test; "
            "the values are archived and their difference reported"
        ),
    ),
    "tpips": FamilyWatch(
        family="tpips",
        headline="TPIPS odd-one-out agreement per method (test split)",
        metrics=r"ooo/.+",
        per_model=("tpips_baseline_scores", "tpips_learned"),
        samples=("tpips_ooo", "tpips_afc"),
        not_paired=(
            "tpips_baseline_scores and tpips_learned store the agreement per (method, aspect), not per "
            "triplet: no paired test; the values are archived and their difference reported"
        ),
    ),
}
