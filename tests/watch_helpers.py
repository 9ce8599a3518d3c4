"""Helpers of the family pipeline tests' regression-watch checks: plant an earlier data version of a backbone's
archived snapshot (its per-sample outcomes changed), so that re-materializing `<family>_history[b]` compares
the current run with it by the paired test, and read that check back."""

from __future__ import annotations

from datetime import UTC, datetime

import dagster as dg
import numpy as np

from soco_pipeline.trust import history


def plant_earlier_version(storage_root: str, family: str, model: str, flip: int = 2) -> dict[str, float]:
    """Copy the model's only archived snapshot as data version "earlier" (a day before), with the outcome of
    its first `flip` samples per metric set to 1 (a better earlier run); returns the earlier headline values
    (0-100, the mean of its scores)."""
    (meta,) = history.snapshots(storage_root, family, model)
    scores = history.snapshot_scores(storage_root, family, model, meta["data_version"]).copy()
    first = scores.groupby("metric").cumcount().to_numpy() < flip
    scores.loc[first, "score"] = 1.0
    values = {m: 100 * float(g["score"].mean()) for m, g in scores.groupby("metric")}
    when = datetime(2000, 1, 1, tzinfo=UTC)
    history.write_snapshot(storage_root, family, model, "earlier", meta["task_hash"], scores, values, when)
    return values


def current_scores(storage_root: str, family: str, model: str) -> tuple[str, object]:
    """(the data version, the per-sample scores) of the model's snapshot other than the planted "earlier"."""
    (meta,) = [m for m in history.snapshots(storage_root, family, model) if m["data_version"] != "earlier"]
    return meta["data_version"], history.snapshot_scores(storage_root, family, model, meta["data_version"])


def regression_check(result: dg.ExecuteInMemoryResult, asset: str) -> dg.AssetCheckEvaluation:
    """The `no_regression` check evaluation of `asset` in a materialization's result."""
    (ev,) = [
        e
        for e in result.get_asset_check_evaluations()
        if e.check_name == "no_regression" and e.asset_key == dg.AssetKey(asset)
    ]
    return ev


def figure(text: str) -> tuple[float, float, float, float, float]:
    """(before, after, delta, lo, hi) of a check's figure "<before> -> <after> (<delta>, [<lo>, <hi>])"."""
    values, rest = text.split(" (", 1)
    before, after = (float(v) for v in values.split(" -> "))
    delta, interval = rest.rstrip(")").split(", [")
    lo, hi = (float(v) for v in interval.rstrip("]").split(", "))
    return before, after, float(delta), lo, hi


def mean_outcome(values: np.ndarray) -> float:
    """The mean of per-sample outcomes in points (0-100)."""
    return 100 * float(np.mean(np.asarray(values, dtype=np.float64)))
