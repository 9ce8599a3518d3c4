"""What the regression watch compares in each family (`FamilyWatch`) and `family_snapshot`, one model's tables
as trust/history.py archives them."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from soco_pipeline.evaluation.stats import SCORE_COLUMNS
from soco_pipeline.trust import hashes


@dataclass(frozen=True)
class PairedOn:
    """The per-sample table a headline is paired-tested on: its `sample` id and `outcome` (0/1, or a share
    when not `binary`) columns, per `method` when named; `samples` gives `split`, `group` and `cluster`; rows
    whose `status` is not ok are not scored."""

    table: str | tuple[str, ...]
    sample: str | tuple[str, ...]
    outcome: str
    samples: str
    group: str
    cluster: str
    method: str | None = None
    prefix: str = "accuracy"
    split: str = "test"
    binary: bool = True

    def scores(self, model: str, tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
        """Per-sample scores of `model` (metric `<prefix>[/<method>]`, unit = the sample, score = outcome)."""
        items = tables[self.samples]
        test = items[items["split"] == self.split] if "split" in items.columns else items
        names = (self.table,) if isinstance(self.table, str) else self.table
        rows = pd.concat([tables[n] for n in names], ignore_index=True)
        if "status" in rows.columns:
            rows = rows[rows["status"] == "ok"]
        extra = list(dict.fromkeys((self.group, self.cluster)))
        test = test.assign(_unit=self.unit_of(test))
        rows = rows.assign(_unit=self.unit_of(rows))
        rows = rows[rows["_unit"].isin(test["_unit"])].drop(columns=extra, errors="ignore")
        rows = rows.merge(test[["_unit", *extra]], on="_unit", how="left", validate="many_to_one")
        outcome = rows[self.outcome]
        score = outcome.astype(bool) if self.binary else outcome.astype(np.float64)
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
                "unit": rows["_unit"].to_numpy(),
                "element": np.full(n, "", dtype=object),
                "cluster": rows[self.cluster].astype(str).to_numpy(),
                "score": score.astype(np.float64).to_numpy(),
            },
            columns=SCORE_COLUMNS,
        )

    def unit_of(self, frame: pd.DataFrame) -> pd.Series:
        """The sample id of each row of `frame`: its `sample` column, or its `sample` columns joined by "/"."""
        keys = (self.sample,) if isinstance(self.sample, str) else self.sample
        unit = frame[keys[0]].astype(str)
        for key in keys[1:]:
            unit = unit + "/" + frame[key].astype(str)
        return unit


@dataclass(frozen=True)
class ArchivedBy:
    """A watch whose snapshots `asset` archives (SOCO's `results_record`); the history asset compares."""

    asset: str
    history: str
    sensor: str
    group: str
    code_version: str


@dataclass(frozen=True)
class FamilyWatch:
    """What the regression watch compares in one family: `headline`, `metrics` (a regex over record metric
    names), the tables read, and `paired` or `not_paired` (why); or only `archived`."""

    family: str
    headline: str
    metrics: str
    per_model: tuple[str, ...]
    samples: tuple[str, ...]
    paired: PairedOn | None = None
    not_paired: str = ""
    reduction: str = "pooled"
    archived: ArchivedBy | None = None

    def __post_init__(self) -> None:
        if self.archived is None and (self.paired is None) == (not self.not_paired):
            raise ValueError(
                f"watch of {self.family!r}: give either `paired` (a per-sample table) or `not_paired` (why)"
            )

    @property
    def tables(self) -> tuple[str, ...]:
        """Every table the watch reads: the per-model ones, then the sample tables."""
        return (*self.per_model, *self.samples)

    @property
    def history(self) -> str:
        """The history asset (and table): `<family>_history`, or the name its `archived` keeps."""
        return self.archived.history if self.archived is not None else f"{self.family}_history"

    @property
    def sensor(self) -> str:
        """The regression sensor's name: `<family>_regression_sensor`, or the name its `archived` keeps."""
        return self.archived.sensor if self.archived is not None else f"{self.family}_regression_sensor"

    def watches(self, metric: str) -> bool:
        """Whether the watch compares `metric` (a metric name of the results record that `metrics` matches)."""
        return re.fullmatch(self.metrics, metric) is not None


@dataclass(frozen=True)
class FamilySnapshot:
    """One model's watched figures: headline `values`, per-sample `scores` and the `task_hash`."""

    values: dict[str, float]
    scores: pd.DataFrame
    task_hash: str


def family_snapshot(
    watch: FamilyWatch, record_parts: Callable, model: str, tables: dict[str, pd.DataFrame], n_boot: int = 200
) -> FamilySnapshot:
    """A backbone's watched figures: record headline values, per-sample scores if paired, a task hash."""
    parts = record_parts(model, "backbone", tables, n_boot)
    ci = parts["intervals"]
    wanted = ci["metric"].astype(str).map(watch.watches)
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
