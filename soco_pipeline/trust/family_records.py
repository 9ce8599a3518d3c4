"""Results records of the task families in SOCO's record schema, rebuilt from the stored tables: the helpers a
family's `parts` builds from (CIs from per-sample scores or stored aggregates, per-sample and task hashes)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from soco_pipeline.evaluation import stats
from soco_pipeline.trust import hashes
from soco_pipeline.trust.provenance import REBUILT, build_record

NO_SUBSET = {"partial": False, "rule": {}, "description": "every sample of the family's test split"}


class NotApplicableError(ValueError):
    """The model's stored tables of a family hold no score (its not-applicable rows): nothing to report."""


@dataclass(frozen=True)
class FamilyTables:
    """Where a family's record reads: its sample tables, and its per-backbone / per-LVLM result tables."""

    samples: tuple[str, ...]
    backbone: tuple[str, ...]
    lvlm: tuple[str, ...]


def config_hash(config: Any) -> str:
    """The hash of a family config (a pydantic model): its JSON dump, keys sorted."""
    return hashes.sha(json.dumps(config.model_dump(mode="json"), sort_keys=True, default=str))


def row_hashes(df: pd.DataFrame, columns: list[str]) -> np.ndarray:
    """A hash per row of the values of `columns` (their text form joined by a unit separator)."""
    text = df[columns].astype(str).agg("\x1f".join, axis=1)
    return text.map(hashes.sha).to_numpy(dtype=object)


def hash_block(name: str, ids: pd.Series, h: np.ndarray) -> tuple[dict, dict]:
    ids = ids.astype(str).to_numpy()
    return {name: dict(zip(ids, h, strict=True))}, {name: hashes.task_hash(ids, h)}


def sample_scores(model: str, metric: pd.Series, group, unit, cluster, correct) -> pd.DataFrame:
    n = len(metric)
    return pd.DataFrame(
        {
            "model": np.full(n, model, dtype=object),
            "metric": np.asarray(metric, dtype=object),
            "group": np.asarray(group).astype(str),
            "unit": np.asarray(unit).astype(str),
            "element": np.full(n, "", dtype=object),
            "cluster": np.asarray(cluster).astype(str),
            "score": np.asarray(correct, dtype=bool).astype(np.float64),
        }
    )


def intervals_of(scores: pd.DataFrame, n_boot: int) -> pd.DataFrame:
    if scores.empty:
        raise ValueError("no scored samples in the stored tables: nothing to report")
    return stats.intervals(scores, reduction="pooled", n_boot=n_boot, seed=0)


def aggregate_rows(model: str, metric, value, se=None, n_units=None, n_categories=None) -> pd.DataFrame:
    """Interval rows (stats.INTERVAL_COLUMNS) of stored aggregates, with the logit interval from `se`."""
    value = np.asarray(value, float)
    se = np.full(len(value), np.nan) if se is None else np.asarray(se, float)
    zeros = np.zeros(len(value))
    n_units = np.asarray(zeros if n_units is None else n_units, int)
    bounds = [
        stats.logit_interval(v / 100, s / 100, int(n)) if np.isfinite(s) and n > 1 else (np.nan, np.nan)
        for v, s, n in zip(value, se, n_units, strict=True)
    ]
    lo, hi = (np.array(b, float) * 100 for b in zip(*bounds, strict=True)) if bounds else ([], [])
    return pd.DataFrame(
        {
            "model": model,
            "metric": list(metric),
            "value": value,
            "ci95_lo_boot_category": np.nan,
            "ci95_hi_boot_category": np.nan,
            "se_cluster_image": se,
            "ci95_lo_cluster_image_logit": lo,
            "ci95_hi_cluster_image_logit": hi,
            "n_units": n_units,
            "n_categories": np.asarray(zeros if n_categories is None else n_categories, int),
            "n_clusters": n_units,
        }
    )


def family_record(
    *,
    family: str,
    parts: Callable[[str, str, dict, int], dict[str, Any]],
    model: str,
    kind: str,
    tables: dict[str, pd.DataFrame],
    spec: dict[str, Any],
    spec_hash: str,
    config: dict[str, Any],
    config_hash: str,
) -> dict[str, Any]:
    """The results record of `model` (kind backbone | lvlm) in task family `family` (its record `parts`)."""
    p = parts(model, kind, tables, 2000)  # 2000 bootstrap resamples
    return build_record(
        model=model,
        family=family,
        spec=spec,
        spec_hash=spec_hash,
        protocol=config,
        protocol_hash=config_hash,
        intervals=p["intervals"],
        n_samples=p["n_samples"],
        subset=NO_SUBSET,
        sample_hashes=p["sample_hashes"],
        task_hashes=p["task_hashes"],
        device="cpu",
        timing=REBUILT,
    )


def load_family_tables(
    tables_root: str, family: str, spec: FamilyTables, model: str
) -> tuple[str, dict[str, pd.DataFrame]]:
    """(kind, tables) of `model` in the family: 'backbone' when its backbone tables exist, else 'lvlm'."""
    from soco_pipeline.storage import exists, read_parquet
    from soco_pipeline.tables import table_for

    out = {}
    for name in spec.samples:
        path = table_for(name).path(tables_root)
        if not exists(path):
            raise FileNotFoundError(f"no {name} at {path}: materialize the {family} family first (make demo)")
        out[name] = read_parquet(path)
    for kind, names in (("backbone", spec.backbone), ("lvlm", spec.lvlm)):
        found = {n: table_for(n).path(tables_root, model) for n in names}
        found = {n: p for n, p in found.items() if exists(p)}
        if found:
            return kind, {**out, **{n: read_parquet(p) for n, p in found.items()}}
    raise FileNotFoundError(
        f"no {family} results of {model!r} under {tables_root}: materialize its partition of "
        f"{' / '.join((*spec.backbone, *spec.lvlm))} first"
    )
