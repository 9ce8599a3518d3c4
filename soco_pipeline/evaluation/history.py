"""A model's results over time, and the regression watch over them.

Every materialization of a model's scores leaves a snapshot in an archive beside the tables:
`<storage>/history/<family>/<model>/<data_version>.parquet` (the per-sample scores, SCORE_COLUMNS) and
`<data_version>.json` (when, the task hash, the headline values). A snapshot is replaced only by a run at the
same data version, so the previous spec's or weights' results stay queryable after a change.

The watch compares the current snapshot with the most recent one of another data version on the same task
hash, with the paired test `soco compare` uses (evaluation/stats.compare: the paired difference per metric,
a bootstrap over categories). A drop whose whole interval lies below zero is a regression.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
import pandas as pd

from soco_pipeline.storage import (
    exists,
    filesystem,
    join,
    read_bytes,
    read_parquet,
    write_bytes_atomic,
    write_parquet_atomic,
)

log = logging.getLogger(__name__)

HISTORY_COLUMNS = [
    "model",
    "family",
    "data_version",
    "materialized_at",
    "task_hash",
    "metric",
    "value",
    "previous_data_version",
    "delta",
    "delta_ci_low",
    "delta_ci_high",
    "level",
    "regression",
]
WEBHOOK_ENV = "SOCO_REGRESSION_WEBHOOK"


def archive_dir(storage_root: str, family: str, model: str) -> str:
    """The folder of a model's snapshots for one family."""
    return join(storage_root, "history", family, model)


def write_snapshot(
    storage_root: str,
    family: str,
    model: str,
    data_version: str,
    task_hash: str,
    scores: pd.DataFrame,
    values: dict[str, float],
    when: datetime | None = None,
) -> dict:
    """Archive one materialization's per-sample scores and headline values (atomic writes; the JSON last,
    so a snapshot without its JSON is never listed). Returns the snapshot's metadata."""
    folder = archive_dir(storage_root, family, model)
    meta = {
        "model": model,
        "family": family,
        "data_version": data_version,
        "task_hash": task_hash,
        "materialized_at": (when or datetime.now(UTC)).isoformat(timespec="seconds"),
        "values": {k: float(v) for k, v in values.items()},
    }
    write_parquet_atomic(scores, join(folder, f"{data_version}.parquet"))
    write_bytes_atomic(join(folder, f"{data_version}.json"), json.dumps(meta, sort_keys=True).encode())
    return meta


def snapshots(storage_root: str, family: str, model: str) -> list[dict]:
    """Every archived snapshot of a model (their metadata), oldest first."""
    folder = archive_dir(storage_root, family, model)
    if not exists(folder):
        return []
    fs, path = filesystem(folder)
    metas = []
    for name in fs.ls(path, detail=False):
        if str(name).endswith(".json"):
            try:
                metas.append(json.loads(read_bytes(join(folder, str(name).rsplit("/", 1)[-1]))))
            except (ValueError, OSError) as e:
                log.warning("history: snapshot %s is unreadable (%s); it is left out", name, e)
    return sorted(metas, key=lambda m: m["materialized_at"])


def previous_snapshot(history: list[dict], data_version: str, task_hash: str) -> dict | None:
    """The most recent snapshot of another data version on the same task hash (None if there is none)."""
    older = [m for m in history if m["data_version"] != data_version and m["task_hash"] == task_hash]
    return older[-1] if older else None


def snapshot_scores(storage_root: str, family: str, model: str, data_version: str) -> pd.DataFrame:
    """The per-sample scores of one archived snapshot."""
    return read_parquet(join(archive_dir(storage_root, family, model), f"{data_version}.parquet"))


def regression_test(
    current: pd.DataFrame,
    previous: pd.DataFrame,
    metrics: list[str],
    level: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
    reduction: str = "official",
) -> pd.DataFrame:
    """Per metric: current - previous (points) with its `level` bootstrap interval over categories (the
    paired test of `soco compare`; `reduction` official for SOCO, pooled for a family's per-sample accuracy);
    `regression` when the whole interval lies below zero."""
    from soco_pipeline.evaluation.stats import compare

    cur = current[current["metric"].isin(metrics)].assign(model="current")
    prev = previous[previous["metric"].isin(metrics)].assign(model="previous")
    overall, _ = compare(cur, prev, reduction=reduction, n_boot=n_boot, seed=seed, level=level)
    overall["regression"] = overall["ci95_hi_boot_category"] < 0
    return overall


def unpaired_difference(current: dict[str, float], previous: dict[str, float]) -> pd.DataFrame:
    """Per metric both snapshots hold: current - previous (points) in `regression_test`'s columns, without
    an interval and never a regression (a family that stores aggregates only has no paired test)."""
    metrics = sorted(set(current) & set(previous))
    a = np.array([current[m] for m in metrics], float)
    b = np.array([previous[m] for m in metrics], float)
    return pd.DataFrame(
        {
            "metric": metrics,
            "value_a": a,
            "value_b": b,
            "delta": a - b,
            "ci95_lo_boot_category": np.nan,
            "ci95_hi_boot_category": np.nan,
            "n_units": 0,
            "regression": False,
        }
    )


def history_table(history: list[dict], verdicts: dict[str, pd.DataFrame], level: float) -> pd.DataFrame:
    """The model's history as rows (model, family, data version, date, task hash, metric, value), each
    snapshot with the verdict of its comparison when one was made (`verdicts` by data version)."""
    rows = []
    for m in history:
        v = verdicts.get(m["data_version"])
        by_metric = v.set_index("metric") if v is not None and len(v) else None
        for metric, value in sorted(m["values"].items()):
            hit = by_metric is not None and metric in by_metric.index
            rows.append(
                {
                    "model": m["model"],
                    "family": m["family"],
                    "data_version": m["data_version"],
                    "materialized_at": m["materialized_at"],
                    "task_hash": m["task_hash"],
                    "metric": metric,
                    "value": value,
                    "previous_data_version": m.get("previous_data_version", ""),
                    "delta": float(by_metric.at[metric, "delta"]) if hit else float("nan"),
                    "delta_ci_low": float(by_metric.at[metric, "ci95_lo_boot_category"])
                    if hit
                    else float("nan"),
                    "delta_ci_high": float(by_metric.at[metric, "ci95_hi_boot_category"])
                    if hit
                    else float("nan"),
                    "level": level,
                    "regression": bool(by_metric.at[metric, "regression"]) if hit else False,
                }
            )
    return pd.DataFrame(rows, columns=HISTORY_COLUMNS)


def regression_message(model: str, family: str, verdict: pd.DataFrame, previous: str, current: str) -> str:
    """One line per regressed metric: both figures, the paired difference and its interval."""
    lines = [
        f"{model} ({family}) regressed from data version {previous} to {current}: "
        f"{r.metric} {r.value_b:.1f} -> {r.value_a:.1f} ({r.delta:+.1f} points, interval "
        f"[{r.ci95_lo_boot_category:+.1f}, {r.ci95_hi_boot_category:+.1f}], {r.n_units} pairs)"
        for r in verdict[verdict["regression"]].itertuples()
    ]
    return "\n".join(lines)


def figure_text(value: float, previous: float, delta: float, lo: float, hi: float) -> str:
    """A watched metric as the check shows it: "previous -> value (delta, [lo, hi])", without the interval
    when there is none (no paired test), "value" alone when nothing was compared."""
    if pd.isna(delta):
        return f"{value:.1f}"
    if pd.isna(lo):
        return f"{previous:.1f} -> {value:.1f} ({delta:+.1f})"
    return f"{previous:.1f} -> {value:.1f} ({delta:+.1f}, [{lo:+.1f}, {hi:+.1f}])"


@dataclass(frozen=True)
class WatchOutcome:
    """The watch's verdict on one materialization: the model's history rows (HISTORY_COLUMNS), the data
    version compared with ("" when none), the regression message ("" when none), the paired test in words,
    and per metric of the current snapshot its figures as text ("previous -> value (delta, [lo, hi])")."""

    table: pd.DataFrame
    previous: str
    message: str
    test: str
    figures: dict[str, str]


def watch(
    storage_root: str,
    family: str,
    model: str,
    data_version: str,
    level: float = 0.95,
    seed: int = 0,
    reduction: str = "official",
    not_paired: str = "",
    n_boot: int = 2000,
) -> WatchOutcome:
    """Compare the archived snapshot of `model` at `data_version` with the most recent snapshot of another
    data version on the same task hash: the paired test per watched metric (`regression_test`), or, with
    `not_paired` (why the family has no per-sample outcomes), the plain difference of the values."""
    snaps = snapshots(storage_root, family, model)
    current = next((s for s in reversed(snaps) if s["data_version"] == data_version), None)
    if current is None:
        raise FileNotFoundError(
            f"no archived {family} snapshot of {model!r} at data version {data_version} under "
            f"{archive_dir(storage_root, family, model)}: materialize its results first"
        )
    prev = previous_snapshot(snaps, data_version, current["task_hash"])
    verdicts, message = {}, ""
    test = (
        f"not paired-testable: {not_paired}"
        if not_paired
        else (
            f"paired difference per sample, {level:.0%} bootstrap interval over categories ({reduction} "
            "reduction, as `soco compare`)"
        )
    )
    if prev is not None:
        if not_paired:
            verdict = unpaired_difference(current["values"], prev["values"])
        else:
            metrics = sorted(current["values"])
            old = snapshot_scores(storage_root, family, model, prev["data_version"])
            new = snapshot_scores(storage_root, family, model, data_version)
            if old.empty or new.empty:  # archived while the family stored aggregates only: nothing to pair
                which = prev["data_version"] if old.empty else data_version
                test = f"not paired-testable: the snapshot of data version {which} holds no per-sample scores"
                verdict = unpaired_difference(current["values"], prev["values"])
            else:
                verdict = regression_test(
                    new, old, metrics, level, n_boot=n_boot, seed=seed, reduction=reduction
                )
                message = regression_message(model, family, verdict, prev["data_version"], data_version)
        verdicts[data_version] = verdict
        current["previous_data_version"] = prev["data_version"]
    table = history_table(snaps, verdicts, level)
    now = table[table["data_version"] == data_version]
    before = prev["values"] if prev else {}
    figures = {
        r.metric: figure_text(
            r.value, before.get(r.metric, float("nan")), r.delta, r.delta_ci_low, r.delta_ci_high
        )
        for r in now.itertuples()
    }
    return WatchOutcome(table, prev["data_version"] if prev else "", message, test, figures)


def notify(message: str, url: str | None = None, timeout_s: float = 5.0) -> str:
    """Log a regression, and POST it as JSON to `url` when one is given (the address is never logged: it
    may carry a token). Returns what happened, for the sensor's log; a failed post is reported, not raised."""
    log.warning("regression: %s", message)
    if not url:
        return "logged"
    import requests

    try:
        r = requests.post(url, json={"text": message}, timeout=timeout_s)
        return f"logged; webhook answered HTTP {r.status_code}"
    except requests.RequestException as e:
        return f"logged; webhook failed ({type(e).__name__})"
