"""Results records of the task families (mmvm, fgbmk, tpips), in the schema of SOCO's (provenance.build_record).

Rebuilt from the stored tables (no model runs), for a feature backbone or an LVLM:
- `results`: per metric its value (0-100) and 95% CIs. Where the family stores one row per scored sample
  (MMVM predictions and answers, FG-BMK answers) the CIs come from `stats.intervals` (pooled: the mean over
  samples; "category" = the family's breakdown: MMVM's cue combination, FG-BMK's level; "cluster" = the
  samples that share an input: an MMVM case, an FG-BMK question group). Where it stores aggregates only
  (FG-BMK's probe top-1, TPIPS's agreements) the value is the stored one; TPIPS's `agreement_err` (2 SE over
  its samples) gives `se_cluster_image` (cluster = one sample) and the logit interval; FG-BMK's probe has no CI.
- `sample_hashes` / `task_hashes`: a hash of every evaluated sample's defining fields (MMVM items, FG-BMK test
  images or questions, TPIPS OOO (triplet, aspect) rows and 2AFC items) and the task hash over them.
- `n-samples`: the samples the family asks (requested) and the ones the stored tables scored (evaluated).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from soco_pipeline.evaluation import hashes, stats
from soco_pipeline.evaluation.provenance import build_record

FAMILIES = ("mmvm", "fgbmk", "tpips")
NO_SUBSET = {"partial": False, "rule": {}, "description": "every sample of the family's test split"}


class NotApplicableError(ValueError):
    """The model's stored tables of a family hold no score (its not-applicable rows): nothing to report."""


@dataclass(frozen=True)
class FamilyTables:
    """Where a family's record reads: its sample tables, and its per-backbone / per-LVLM result tables."""

    samples: tuple[str, ...]
    backbone: tuple[str, ...]
    lvlm: tuple[str, ...]


TABLES = {
    "mmvm": FamilyTables(("mmvm_items",), ("mmvm_predictions",), ("mmvm_answers",)),
    "fgbmk": FamilyTables(("fgbmk_items", "fgbmk_questions"), ("fgbmk_metrics",), ("fgbmk_answers",)),
    "tpips": FamilyTables(
        ("tpips_ooo", "tpips_afc"), ("tpips_baseline_scores", "tpips_learned"), ("tpips_lvlm_answers",)
    ),
}


def config_hash(config: Any) -> str:
    """The hash of a family config (a pydantic model): its JSON dump, keys sorted."""
    return hashes.sha(json.dumps(config.model_dump(mode="json"), sort_keys=True, default=str))


def row_hashes(df: pd.DataFrame, columns: list[str]) -> np.ndarray:
    """A hash per row of the values of `columns` (their text form joined by a unit separator)."""
    text = df[columns].astype(str).agg("\x1f".join, axis=1)
    return text.map(hashes.sha).to_numpy(dtype=object)


def _hash_block(name: str, ids: pd.Series, h: np.ndarray) -> tuple[dict, dict]:
    ids = ids.astype(str).to_numpy()
    return {name: dict(zip(ids, h, strict=True))}, {name: hashes.task_hash(ids, h)}


def _scores(model: str, metric: pd.Series, group, unit, cluster, correct) -> pd.DataFrame:
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


def _intervals(scores: pd.DataFrame, n_boot: int) -> pd.DataFrame:
    if scores.empty:
        raise ValueError("no scored samples in the stored tables: nothing to report")
    return stats.intervals(scores, reduction="pooled", n_boot=n_boot, seed=0)


def _aggregate_rows(model: str, metric, value, se=None, n_units=None, n_categories=None) -> pd.DataFrame:
    """Interval rows (stats.INTERVAL_COLUMNS) for stored aggregates: the value, and when `se` is given the
    logit interval from it; the bootstrap over categories does not exist for these."""
    value = np.asarray(value, float)
    se = np.full(len(value), np.nan) if se is None else np.asarray(se, float)
    n_units = np.asarray(n_units if n_units is not None else np.zeros(len(value)), int)
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
            "n_categories": np.asarray(
                n_categories if n_categories is not None else np.zeros(len(value)), int
            ),
            "n_clusters": n_units,
        }
    )


# ----------------------------------------------------------------------------- per family
def mmvm_parts(model: str, kind: str, t: dict[str, pd.DataFrame], n_boot: int) -> dict[str, Any]:
    """MMVM: accuracy (per method for a backbone) on the test items, CIs over items clustered by case (the
    per-sample scores of family_watch.MMVM_PAIRED, the regression watch's)."""
    from soco_pipeline.evaluation.family_watch import MMVM_PAIRED

    items = t["mmvm_items"]
    test = items[items["split"] == "test"]
    if kind == "backbone":
        rows = t["mmvm_predictions"]
        if (rows["status"] != "ok").all():
            raise NotApplicableError(
                f"{model!r} is not applicable to MMVM: {rows['reason'].iat[0] if 'reason' in rows else ''}"
            )
        paired = MMVM_PAIRED
    else:
        rows = t["mmvm_answers"]
        paired = dataclasses.replace(MMVM_PAIRED, table="mmvm_answers", method=None)
    scores = paired.scores(model, t)
    cols = ["item_id", "case_id", "n_candidates", "match_type", "query_absent", "question", "answer"]
    samples, tasks = _hash_block("items", test["item_id"], row_hashes(test, cols))
    return {
        "intervals": _intervals(scores, n_boot),
        "n_samples": {"items": {"requested": len(test), "evaluated": int(scores["unit"].nunique())}},
        "sample_hashes": samples,
        "task_hashes": tasks,
    }


def fgbmk_parts(model: str, kind: str, t: dict[str, pd.DataFrame], n_boot: int) -> dict[str, Any]:
    """FG-BMK: a backbone's probe top-1/top-5 per level (stored aggregates, test images); an LVLM's accuracy
    per task and form, CIs over questions clustered by question group (its rotations)."""
    items = t["fgbmk_items"]
    test = items[items["split"] == "test"]
    if kind == "backbone":
        m = t["fgbmk_metrics"]
        across = m[m["scope"] == "across"]
        n_cat = across["level"].map(lambda lv: int(test[f"{lv}_id"].nunique()))
        parts = [
            _aggregate_rows(
                model,
                f"{k}/" + across["level"],
                across[k],
                n_units=np.full(len(across), len(test)),
                n_categories=n_cat,
            )
            for k in ("top1", "top5")
        ]
        cols = ["image_id", "path", "split", "superclass_id", "class_id", "subclass_id"]
        samples, tasks = _hash_block("test_images", test["image_id"], row_hashes(test, cols))
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
    scores = _scores(
        model, a["task"] + "/" + a["form"], a["level"], a["question_id"], a["group_id"], a["correct"]
    )
    cols = ["question_id", "group_id", "rotation", "task", "level", "form", "image_id", "text"]
    samples, tasks = _hash_block("questions", q["question_id"], row_hashes(q, cols))
    return {
        "intervals": _intervals(scores, n_boot),
        "n_samples": {"questions": {"requested": len(q), "evaluated": int(a["question_id"].nunique())}},
        "sample_hashes": samples,
        "task_hashes": tasks,
    }


def tpips_parts(model: str, kind: str, t: dict[str, pd.DataFrame], n_boot: int) -> dict[str, Any]:
    """TPIPS: agreement per method on the OOO test split and each 2AFC source (stored aggregates, their
    2 SE as the interval); hashes of the OOO (triplet, aspect) rows and 2AFC items."""
    names = TABLES["tpips"].backbone if kind == "backbone" else TABLES["tpips"].lvlm
    s = pd.concat([t[n] for n in names if n in t], ignore_index=True)
    s = s[(s["method"] != "n/a") & (s["aspect"] == "all")]
    if s.empty:
        raise NotApplicableError(f"{model!r} has no TPIPS score (not applicable, or not materialized)")
    per_aspect = t["tpips_ooo"]["aspect"].nunique()
    intervals = _aggregate_rows(
        model,
        s["eval"] + "/" + s["method"],
        s["agreement"],
        se=s["agreement_err"] / 2,
        n_units=s["n"],
        n_categories=np.where(s["eval"] == "ooo", per_aspect, 1),
    )
    ooo = t["tpips_ooo"][t["tpips_ooo"]["split"] == "test"]
    afc = t["tpips_afc"]
    ooo_ids = ooo["triplet_id"].astype(str) + "/" + ooo["aspect"].astype(str)
    o_s, o_t = _hash_block(
        "ooo", ooo_ids, row_hashes(ooo, ["triplet_id", "image_0", "image_1", "image_2", "aspect", "votes"])
    )
    a_s, a_t = _hash_block(
        "afc", afc["item_id"], row_hashes(afc, ["item_id", "ref", "x0", "x1", "aspect", "votes"])
    )
    first = s.groupby("eval")["n"].max()
    return {
        "intervals": intervals,
        "n_samples": {
            "ooo": {"requested": len(ooo), "evaluated": int(first.get("ooo", 0))},
            "afc": {"requested": len(afc), "evaluated": int(first.get("afc:all", 0))},
        },
        "sample_hashes": {**o_s, **a_s},
        "task_hashes": {**o_t, **a_t},
    }


PARTS = {"mmvm": mmvm_parts, "fgbmk": fgbmk_parts, "tpips": tpips_parts}


def family_record(
    *,
    family: str,
    model: str,
    kind: str,
    tables: dict[str, pd.DataFrame],
    spec: dict[str, Any],
    spec_hash: str,
    config: dict[str, Any],
    config_hash: str,
    device: str = "cpu",
    n_boot: int = 2000,
) -> dict[str, Any]:
    """The results record of `model` (kind backbone | lvlm) in task family `family`, validated."""
    if family not in PARTS:
        raise ValueError(f"family {family!r}: use one of {FAMILIES}")
    p = PARTS[family](model, kind, tables, n_boot)
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
        device=device,
        timing={"stages": {}, "source": "not recorded (rebuilt by soco export-results)"},
    )


def load_family_tables(tables_root: str, family: str, model: str) -> tuple[str, dict[str, pd.DataFrame]]:
    """(kind, tables): the family's sample tables and `model`'s stored result tables, kind 'backbone' when its
    backbone tables exist, else 'lvlm'; a clear error naming what to materialize."""
    from soco_pipeline.storage import exists, read_parquet
    from soco_pipeline.tables import table_for

    spec = TABLES[family]
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
