"""Results records of a correspondence backbone and of a four-choice LVLM, re-derived from the stored tables
for `provenance.build_record` (SOCO's and SOCO-LVLM's `rebuild`, tasks/core.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pandas as pd

from soco_pipeline.evaluation import stats
from soco_pipeline.evaluation.protocol import ProtocolConfig
from soco_pipeline.evaluation.subsets import SubsetRule, apply_item_subset, apply_pair_subset
from soco_pipeline.settings import Settings
from soco_pipeline.trust import hashes
from soco_pipeline.trust.provenance import REBUILT, build_record, read_record


def subset_block(rule: SubsetRule) -> dict[str, Any]:
    """The record's `subset`: partial flag, the rule and its short description."""
    return {"partial": not rule.is_full, "rule": rule.model_dump(mode="json"), "description": rule.describe()}


def input_block(spec, manifest: pd.DataFrame) -> dict[str, Any]:
    """Requested (spec) and effective (feature manifest) input size, grid, layer and normalisation."""
    opts = dict(spec.options)
    layer = opts.get("layer")
    sizes = manifest["input_size"].unique() if len(manifest) else []
    grid = manifest[["grid_h", "grid_w"]].drop_duplicates() if len(manifest) else pd.DataFrame()
    return {
        "input_policy": {spec.input.policy: spec.input.value},
        "requested_image_size": int(spec.input.value) if spec.input.policy == "nearest_multiple" else None,
        "effective_image_size": int(sizes[0]) if len(sizes) == 1 else None,
        "grid": [int(grid.iloc[0, 0]), int(grid.iloc[0, 1])] if len(grid) == 1 else None,
        "stride": float(manifest["stride"].iloc[0]) if len(manifest) else None,
        # The extractor refuses a layer it cannot take, so the effective layer is the requested one.
        "requested_layer": layer,
        "effective_layer": layer,
        "requested_normalisation": spec.normalisation,
        "effective_normalisation": spec.normalisation,
    }


def backbone_scores(
    tables: dict[str, pd.DataFrame], rule: SubsetRule, protocol: ProtocolConfig
) -> pd.DataFrame:
    """A backbone record's per-sample scores: every PCK level at the headline alpha and 4-choice."""
    return stats.backbone_scores(*scoring_tables(tables, rule), protocol)


def scoring_tables(tables: dict[str, pd.DataFrame], rule: SubsetRule) -> tuple[pd.DataFrame | None, ...]:
    """The stored tables scoring reads, in `metrics.scored_elements`' order, pairs cut to `rule`."""
    pred, corr, kp, images = (tables[n] for n in ("predictions", "correspondences", "keypoints", "image_set"))
    pairs = apply_pair_subset(tables["image_pairs"], rule)
    return pred, tables.get("four_choice_predictions"), corr, kp, images, pairs


def stored_pair_hashes(stored: pd.DataFrame | None, pair_ids: pd.Series) -> pd.DataFrame | None:
    """The rows of `stored` (per-pair hashes) of `pair_ids`, or None when it lacks any of them."""
    if stored is None:
        return None
    rows = stored[stored["pair_id"].isin(pair_ids)]
    return rows.reset_index(drop=True) if set(rows["pair_id"]) == set(pair_ids) else None


def backbone_record(
    *,
    backbone: str,
    family: str,
    spec,
    spec_hash: str,
    protocol: ProtocolConfig,
    tables: dict[str, pd.DataFrame],
    rule: SubsetRule,
    device: str,
    timing: dict[str, Any] | None = None,
    n_boot: int = 2000,
    scores: pd.DataFrame | None = None,
    pair_hashes: pd.DataFrame | None = None,
) -> dict[str, Any]:
    """One backbone's record from its `tables`; `scores` and `pair_hashes` spare recomputing."""
    pairs_full = tables["image_pairs"]
    pairs = apply_pair_subset(pairs_full, rule)
    ev = pairs[pairs["evaluated"].astype(bool)]
    corr = tables["correspondences"]
    ph = stored_pair_hashes(pair_hashes, ev["pair_id"])
    if ph is None:
        ph = hashes.pair_hashes(ev, corr, tables["keypoints"], tables["image_set"], protocol.matching_hash())
    fc = tables["four_choice"]
    fc = fc[fc["pair_id"].isin(ev["pair_id"])]
    fh = hashes.four_choice_hashes(fc, ph)
    fh_ids = fh["pair_id"] + "/" + fh["src_keypoint"]
    if scores is None:
        scores = backbone_scores(tables, rule, protocol)
    ci = stats.intervals(scores, n_boot=n_boot, seed=0)
    soc = corr[corr["kind"] == "soc"]
    full_ids = pairs_full.loc[pairs_full["evaluated"].astype(bool), "pair_id"]
    n_samples = {
        "pairs": {"requested": int(len(full_ids)), "evaluated": int(len(ev))},
        "soc_keypoints": {
            "requested": int(soc["pair_id"].isin(full_ids).sum()),
            "evaluated": int(soc["pair_id"].isin(ev["pair_id"]).sum()),
        },
        "four_choice_items": {
            "requested": int(tables["four_choice"]["pair_id"].isin(full_ids).sum()),
            "evaluated": int(len(fc)),
        },
    }
    return build_record(
        model=backbone,
        family=family,
        spec=spec.to_dict(),
        spec_hash=spec_hash,
        protocol=protocol.as_dict(),
        protocol_hash=protocol.version_hash(),
        matching_hash=protocol.matching_hash(),
        intervals=ci[ci["model"] == backbone],
        n_samples=n_samples,
        subset=subset_block(rule),
        sample_hashes={
            "pairs": dict(zip(ph["pair_id"], ph["pair_hash"], strict=True)),
            "four_choice": dict(zip(fh_ids, fh["item_hash"], strict=True)),
        },
        task_hashes={
            "pairs": hashes.task_hash(ph["pair_id"], ph["pair_hash"]),
            "four_choice": hashes.task_hash(fh_ids, fh["item_hash"]),
        },
        device=device,
        input_policy=input_block(spec, tables["feature_manifest"]),
        timing=timing,
    )


def lvlm_record(
    *,
    model: str,
    family: str,
    spec,
    spec_hash: str,
    protocol,
    items: pd.DataFrame,
    answers: pd.DataFrame,
    rule: SubsetRule,
    timing: dict[str, Any] | None = None,
    n_boot: int = 2000,
) -> dict[str, Any]:
    """The record of one LVLM: accuracies with CIs, item hashes, counts (items of its settings)."""
    asked = items[items["setting"].isin(spec.settings)]
    sub = apply_item_subset(asked, rule)
    ih = hashes.lvlm_item_hashes(sub)
    ids = ih["setting"] + "/" + ih["index"].astype(str)
    scores = stats.lvlm_scores(answers)
    ci = stats.intervals(scores, reduction="pooled", n_boot=n_boot, seed=0)
    n_samples = {
        "item_rows": {"requested": int(len(asked)), "evaluated": int(len(answers))},
        "item_groups": {
            "requested": int(asked[["setting", "g_index"]].drop_duplicates().shape[0]),
            "evaluated": int(answers[["setting", "g_index"]].drop_duplicates().shape[0]),
        },
    }
    return build_record(
        model=model,
        family=family,
        spec=spec.to_dict(),
        spec_hash=spec_hash,
        protocol=protocol.as_dict() if hasattr(protocol, "as_dict") else dataclasses.asdict(protocol),
        protocol_hash=protocol.version_hash(),
        intervals=ci[ci["model"] == model],
        n_samples=n_samples,
        subset=subset_block(rule),
        sample_hashes={"lvlm_items": dict(zip(ids, ih["item_hash"], strict=True))},
        task_hashes={"lvlm_items": hashes.task_hash(ids, ih["item_hash"])},
        device=spec.device if spec.backend != "openai" else f"remote:{spec.backend}",
        timing=timing,
    )


PREDICTION_TABLES = ("predictions", "four_choice_predictions", "lvlm_answers")  # scores are read from these


def read_prediction_table(path: str, asset: str, partition: str) -> pd.DataFrame:
    """A stored prediction table, refused unless it matches the content checksum written with it."""
    from soco_pipeline.storage import exists, read_parquet

    if not exists(path):
        raise FileNotFoundError(
            f"no {asset} of {partition!r} at {path}: materialize it first (make demo, or its asset)"
        )
    return read_parquet(
        path,
        require_checksum=True,
        fix=f"re-materialize {asset}[{partition}] (no model output is trusted unverified)",
    )


def rebuild_backbone_record(
    settings: Settings, name: str, model: str, protocol_path: str | None = None
) -> dict:
    """A backbone's stored record, else (or with `protocol_path`) one rebuilt from its tables."""
    from soco_pipeline.backbones import load_spec, spec_hash
    from soco_pipeline.storage import exists, join
    from soco_pipeline.trust.protocol_check import checked_protocol

    stored = join(settings.records_root, f"{model}.json")
    if protocol_path is None and exists(stored):
        return read_record(stored)
    tables = load_backbone_tables(settings.tables_root, model)
    spec = load_spec(Path(settings.backbones_dir) / f"{model}.yaml")
    protocol = checked_protocol(settings, model, protocol_path)
    rule = stored_subset(tables["metrics"])
    return backbone_record(
        backbone=model,
        family=name,
        spec=spec,
        spec_hash=spec_hash(spec),
        protocol=protocol,
        tables=tables,
        rule=rule,
        device="cpu",
        timing=REBUILT,
    )


def rebuild_lvlm_record(settings: Settings, name: str, model: str, protocol_path: str | None = None) -> dict:
    """An LVLM's stored record, else one rebuilt from its stored answers and the items."""
    from soco_pipeline.lvlm.protocol import load_lvlm_protocol
    from soco_pipeline.lvlm.specs import load_spec, spec_hash
    from soco_pipeline.storage import exists, join, read_parquet

    stored = join(settings.records_root, "lvlm", f"{model}.json")
    if exists(stored):
        return read_record(stored)
    answers = load_lvlm_answers(settings.tables_root, model)
    items = read_parquet(join(settings.tables_root, "lvlm_items.parquet"))
    metrics_path = join(settings.tables_root, "lvlm_metrics", f"{model}.parquet")
    rule = stored_subset(read_parquet(metrics_path)) if exists(metrics_path) else SubsetRule()
    spec = load_spec(Path(settings.lvlms_dir) / f"{model}.yaml")
    protocol = load_lvlm_protocol()
    return lvlm_record(
        model=model,
        family=name,
        spec=spec,
        spec_hash=spec_hash(spec),
        protocol=protocol,
        items=items,
        answers=answers,
        rule=rule,
        timing=REBUILT,
    )


def stored_scores(settings: Settings, model: str, lvlm: bool = False, protocol_path: str | None = None):
    """Per-sample scores of a SOCO LVLM or backbone (re-scored from stored predictions)."""
    from soco_pipeline.trust.protocol_check import checked_protocol

    if lvlm:
        return stats.lvlm_scores(load_lvlm_answers(settings.tables_root, model))
    protocol = checked_protocol(settings, model, protocol_path)
    tables = load_backbone_tables(settings.tables_root, model)
    return backbone_scores(tables, stored_subset(tables["metrics"]), protocol)


def rescored_metrics(tables: dict[str, pd.DataFrame], protocol: ProtocolConfig) -> pd.DataFrame:
    """A backbone's metrics re-scored from its stored predictions under `protocol`."""
    from soco_pipeline.evaluation.metrics import compute_metrics
    from soco_pipeline.taxonomy import Taxonomy

    taxonomy = Taxonomy.from_table(tables["taxonomy"], source="the run's taxonomy table")
    return compute_metrics(*scoring_tables(tables, stored_subset(tables["metrics"])), taxonomy, protocol)


def load_backbone_tables(tables_root: str, backbone: str) -> dict[str, pd.DataFrame]:
    """The stored tables a backbone record needs, prediction tables checksum-verified."""
    from soco_pipeline.storage import exists, read_parquet
    from soco_pipeline.tables import table_for

    out = {}
    for asset in ("image_set", "keypoints", "image_pairs", "correspondences", "four_choice"):
        out[asset] = _read(table_for(asset).path(tables_root), asset, exists, read_parquet)
    for asset in ("feature_manifest", "predictions", "four_choice_predictions", "metrics"):
        path = table_for(asset).path(tables_root, backbone)
        if asset in PREDICTION_TABLES:
            out[asset] = read_prediction_table(path, asset, backbone)
        else:
            out[asset] = _read(path, f"{asset} of {backbone!r}", exists, read_parquet)
    return out


def load_lvlm_answers(tables_root: str, model: str) -> pd.DataFrame:
    """An LVLM's stored answers, verified against their content checksum."""
    from soco_pipeline.tables import table_for

    return read_prediction_table(table_for("lvlm_answers").path(tables_root, model), "lvlm_answers", model)


def _read(path: str, what: str, exists, read_parquet) -> pd.DataFrame:
    if not exists(path):
        raise FileNotFoundError(f"no {what} at {path}: materialize it first (make demo, or its asset)")
    return read_parquet(path)


def stored_subset(metrics: pd.DataFrame) -> SubsetRule:
    """The subset rule a metrics table was scored on (its `subset` column; full when absent)."""
    if "subset" not in metrics.columns or metrics.empty:
        return SubsetRule()
    return SubsetRule.from_json(str(metrics["subset"].iloc[0]))


def results_markdown(rec: dict) -> str:
    """A record's headline results as a Markdown table (value, bootstrap CI, cluster SE) for the UI."""

    def f(v) -> str:
        return "" if v is None else f"{v:.1f}"

    rows = [
        "| metric | value | 95% CI (bootstrap over categories) | SE (cluster: image) |",
        "|---|---|---|---|",
    ]
    for m, r in rec["results"].items():
        lo, hi = r["ci95_boot_category"]
        rows.append(f"| {m} | {f(r['value'])} | [{f(lo)}, {f(hi)}] | {f(r['se_cluster_image'])} |")
    return "\n".join(rows) + "\n"
