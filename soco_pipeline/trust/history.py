"""A model's results over time (`<storage>/history/<family>/<model>/<data_version>` snapshots) and the
regression watch: `soco compare`'s paired test against the latest other data version on the same task hash."""

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

HISTORY_COLUMNS = (
    "model family data_version materialized_at task_hash metric value previous_data_version delta "
    "delta_ci_low delta_ci_high level regression"
).split()
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
    """Archive one materialization's scores and values (the JSON written last); returns its metadata."""
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


DROPPED = "dropped"  # the archive's sub-folder `soco drop-snapshot` moves a snapshot's files into
META_KEYS = ("model", "family", "data_version", "task_hash", "materialized_at", "values")


def read_archive(storage_root: str, family: str, model: str) -> tuple[list[dict], dict[str, str]]:
    """A model's readable snapshots (oldest first) and the damaged ones as {data version: why}."""
    folder = archive_dir(storage_root, family, model)
    if not exists(folder):
        return [], {}
    fs, path = filesystem(folder)
    metas, damaged = [], {}
    for name in fs.ls(path, detail=False):
        base = str(name).rsplit("/", 1)[-1]
        if not base.endswith(".json") or base.startswith("."):
            continue
        try:
            meta = json.loads(read_bytes(join(folder, base)))
            missing = [k for k in META_KEYS if k not in meta] if isinstance(meta, dict) else list(META_KEYS)
            if missing:
                raise ValueError(f"no field {', '.join(missing)}")
            metas.append(meta)
        except (ValueError, OSError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            damaged[base.removesuffix(".json")] = (
                f"{join(folder, base)} is unreadable ({type(e).__name__}: {e})"
            )
    return sorted(metas, key=lambda m: m["materialized_at"]), damaged


def snapshots(storage_root: str, family: str, model: str) -> list[dict]:
    """Every readable archived snapshot of a model, oldest first."""
    return read_archive(storage_root, family, model)[0]


def damaged_advice(family: str, model: str, data_version: str, asset: str) -> str:
    """What to do about a damaged snapshot: drop it (the named command) or archive it again."""
    return (
        f"drop it with `soco drop-snapshot {family} {model} {data_version}` (its files move to "
        f"history/{family}/{model}/{DROPPED}/; the watch then compares with the snapshot before it), or restore the "
        f"spec and weights of data version {data_version} and re-materialize {asset} for {model}, which archives "
        "that snapshot again; re-materializing with today's spec does not repair it"
    )


def drop_snapshot(storage_root: str, family: str, model: str, data_version: str) -> list[str]:
    """Move a snapshot's files into the archive's `dropped/` folder; returns the new paths."""
    folder = archive_dir(storage_root, family, model)
    fs, _ = filesystem(folder)
    moved = []
    for ext in (".json", ".parquet"):  # the JSON first: a snapshot without its JSON is never listed
        src = join(folder, f"{data_version}{ext}")
        if exists(src):
            dest = join(folder, DROPPED, f"{data_version}{ext}")
            fs.makedirs(filesystem(join(folder, DROPPED))[1], exist_ok=True)
            fs.mv(filesystem(src)[1], filesystem(dest)[1])
            moved.append(dest)
    if not moved:
        metas, damaged = read_archive(storage_root, family, model)
        there = sorted({m["data_version"] for m in metas} | set(damaged))
        raise FileNotFoundError(
            f"no snapshot of data version {data_version!r} under {folder}; its snapshots: "
            f"{', '.join(there) or 'none'}"
        )
    return moved


def previous_snapshot(history: list[dict], data_version: str, task_hash: str) -> dict | None:
    """The most recent snapshot of another data version on the same task hash (None if there is none)."""
    older = [m for m in history if m["data_version"] != data_version and m["task_hash"] == task_hash]
    return older[-1] if older else None


def snapshot_scores(
    storage_root: str, family: str, model: str, data_version: str, fix: str = ""
) -> pd.DataFrame:
    """The per-sample scores of one archived snapshot (`fix`: the advice a damaged file's error gives)."""
    path = join(archive_dir(storage_root, family, model), f"{data_version}.parquet")
    if not exists(path):
        raise FileNotFoundError(f"{path} does not exist (the snapshot's JSON does); {fix}")
    return read_parquet(path, fix=fix)


def regression_test(
    current: pd.DataFrame,
    previous: pd.DataFrame,
    metrics: list[str],
    level: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
    reduction: str = "official",
) -> pd.DataFrame:
    """Per metric: current - previous with its bootstrap interval; `regression` when wholly below zero."""
    from soco_pipeline.evaluation.stats import compare

    cur = current[current["metric"].isin(metrics)].assign(model="current")
    prev = previous[previous["metric"].isin(metrics)].assign(model="previous")
    overall, _ = compare(cur, prev, reduction=reduction, n_boot=n_boot, seed=seed, level=level)
    overall["regression"] = overall["ci95_hi_boot_category"] < 0
    return overall


def unpaired_difference(current: dict[str, float], previous: dict[str, float]) -> pd.DataFrame:
    """`regression_test`'s columns without an interval, never a regression (aggregates only)."""
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
    """The model's history as rows, each snapshot with its verdict (`verdicts` by data version)."""
    rows = []
    for m in history:
        v = verdicts.get(m["data_version"])
        by_metric = v.set_index("metric") if v is not None and len(v) else None
        for metric, value in sorted(m["values"].items()):
            hit = by_metric is not None and metric in by_metric.index
            cols = ("delta", "ci95_lo_boot_category", "ci95_hi_boot_category")
            delta, lo, hi = (float(by_metric.at[metric, c]) if hit else float("nan") for c in cols)
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
                    "delta": delta,
                    "delta_ci_low": lo,
                    "delta_ci_high": hi,
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
    """A watched metric as text: 'previous -> value (delta, [lo, hi])', or less when not compared."""
    if pd.isna(delta):
        return f"{value:.1f}"
    if pd.isna(lo):
        return f"{previous:.1f} -> {value:.1f} ({delta:+.1f})"
    return f"{previous:.1f} -> {value:.1f} ({delta:+.1f}, [{lo:+.1f}, {hi:+.1f}])"


@dataclass(frozen=True)
class WatchOutcome:
    """The watch's verdict on one materialization, or `not_comparable` (why, with the fix)."""

    table: pd.DataFrame
    previous: str
    message: str
    test: str
    figures: dict[str, str]
    not_comparable: str = ""  # why no verdict could be given (a damaged snapshot, named with the fix)


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
    archived_by: str = "",
) -> WatchOutcome:
    """Compare `model`'s snapshot at `data_version` with its latest of another data version on the same task
    hash (paired test, or the plain difference under `not_paired`); a damaged snapshot makes the outcome
    `not_comparable`, never a pass."""
    asset = archived_by or f"{family}_history"
    snaps, damaged = read_archive(storage_root, family, model)
    current = next((s for s in reversed(snaps) if s["data_version"] == data_version), None)
    if current is None:
        why = f" ({damaged[data_version]})" if data_version in damaged else ""
        raise FileNotFoundError(
            f"no archived {family} snapshot of {model!r} at data version {data_version} under "
            f"{archive_dir(storage_root, family, model)}{why}: materialize its results first ({asset})"
        )
    prev = previous_snapshot(snaps, data_version, current["task_hash"])
    verdicts, message, not_comparable = {}, "", ""
    test = f"not paired-testable: {not_paired}"
    if not not_paired:
        test = f"paired difference per sample, {level:.0%} bootstrap interval over categories ({reduction} "
        test += "reduction, as `soco compare`)"
    others = {v: why for v, why in sorted(damaged.items()) if v != data_version}
    if others:
        not_comparable = (
            f"not comparable: {len(others)} other snapshot(s) of {model} cannot be read, so the one to compare "
            "with is unknown: "
            + "; ".join(f"{why}: {damaged_advice(family, model, v, asset)}" for v, why in others.items())
        )
        prev = None
    if prev is not None:
        if not_paired:
            verdict = unpaired_difference(current["values"], prev["values"])
        else:
            metrics = sorted(current["values"])
            try:
                version = prev["data_version"]
                fix = damaged_advice(family, model, version, asset)
                old = snapshot_scores(storage_root, family, model, version, fix)
                version = data_version
                fix = f"re-materialize {asset} for {model}, which archives this data version's snapshot again"
                new = snapshot_scores(storage_root, family, model, version, fix)
            except (OSError, ValueError) as e:  # a damaged or vanished scores file (TableIntegrityError ...)
                not_comparable = f"not comparable: the snapshot of data version {version} is damaged: {e}"
                verdict = None
            else:
                # archived while the family stored aggregates only: nothing to pair
                if old.empty or new.empty:
                    which = prev["data_version"] if old.empty else data_version
                    test = f"not paired-testable: the snapshot of data version {which} holds no per-sample scores"
                    verdict = unpaired_difference(current["values"], prev["values"])
                else:
                    verdict = regression_test(
                        new, old, metrics, level, n_boot=n_boot, seed=seed, reduction=reduction
                    )
                    message = regression_message(model, family, verdict, prev["data_version"], data_version)
        if verdict is not None:
            verdicts[data_version] = verdict
            current["previous_data_version"] = prev["data_version"]
    if not_comparable:
        log.warning("history: %s", not_comparable)
        test = not_comparable
    table = history_table(snaps, verdicts, level)
    now = table[table["data_version"] == data_version]
    before = prev["values"] if prev and verdicts else {}
    figures = {
        r.metric: figure_text(
            r.value, before.get(r.metric, float("nan")), r.delta, r.delta_ci_low, r.delta_ci_high
        )
        for r in now.itertuples()
    }
    compared = prev["data_version"] if prev and verdicts else ""
    return WatchOutcome(table, compared, message, test, figures, not_comparable)


def notify(message: str, url: str | None = None, timeout_s: float = 5.0) -> str:
    """Log a regression and POST it to `url` (never logged); returns what happened, never raises."""
    log.warning("regression: %s", message)
    if not url:
        return "logged"
    import requests

    try:
        r = requests.post(url, json={"text": message}, timeout=timeout_s)
        return f"logged; webhook answered HTTP {r.status_code}"
    except requests.RequestException as e:
        return f"logged; webhook failed ({type(e).__name__})"
