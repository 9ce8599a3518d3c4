"""A per-model table reused from a stored partition of the same reads version (docs/results.md)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import dagster as dg
import pandas as pd

from soco_pipeline.defs.shared.automation import DATA_VERSION_TAG

READS_VERSION = "reads_version"
REUSED_FROM = "reused_from"
SCAN_LIMIT = 5000  # materialization records read per table when looking for a reusable partition


def _meta(record, key: str) -> Any:
    value = record.asset_materialization.metadata.get(key)
    return getattr(value, "value", value)


def _latest(instance: dg.DagsterInstance, key: dg.AssetKey, partition: str | None = None):
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=key, asset_partitions=[partition] if partition else None), limit=1
    ).records
    return records[0].event_log_entry if records else None


def upstream_versions(context: dg.AssetExecutionContext) -> dict[str, str]:
    """{input: version} of the step's inputs: data version, or a per-model table's reads version."""
    out = {}
    for name, key in sorted(context.assets_def.keys_by_input_name.items()):
        entry = _latest(context.instance, key)
        if entry is None:
            continue
        if entry.asset_materialization.partition is not None:  # a per-model table: this model's partition
            entry = _latest(context.instance, key, context.partition_key)
            if entry is None:
                continue
        reads = _meta(entry, READS_VERSION)
        out[name] = str(reads) if reads else str(entry.asset_materialization.tags.get(DATA_VERSION_TAG, "?"))
    return out


def reusable_partition(
    context: dg.AssetExecutionContext, keys: list[dg.AssetKey], version: str, exists: Any
) -> str | None:
    """A partition whose every table in `keys` has reads version `version` and exists: this one first."""
    candidates: set[str] | None = None
    for key in keys:
        records = context.instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=key), limit=SCAN_LIMIT
        ).records  # newest first
        latest: dict[str, Any] = {}
        for r in records:
            latest.setdefault(r.partition_key, r.event_log_entry)
        match = {p for p, e in latest.items() if p is not None and _meta(e, READS_VERSION) == version}
        candidates = match if candidates is None else candidates & match
    ordered = sorted(candidates or (), key=lambda p: (p != context.partition_key, p))
    return next((p for p in ordered if all(exists(k, p) for k in keys)), None)


def step_reads_version(context: dg.AssetExecutionContext, fields: Mapping[str, Any], **inputs: Any) -> str:
    """The reads version of a step's tables: `reads_version` of the spec `fields` it reads and `inputs`, with
    its upstream tables' versions and the computing libraries' versions."""
    from soco_pipeline.backbones.reads import COMPUTE_LIBRARIES, reads_version
    from soco_pipeline.trust.provenance import package_versions

    return reads_version(
        fields, **inputs, inputs=upstream_versions(context), libraries=package_versions(COMPUTE_LIBRARIES)
    )


def reused_tables(
    context: dg.AssetExecutionContext, tables_root: str, features_root: str, version: str
) -> dict[str, Any] | None:
    """The step's tables ({name: TableResult}) from a stored partition of reads version `version`, relabelled
    to this partition's model and logged; None when no partition has them, or when a feature table among them
    lists cache files under `features_root` that are gone (the step then extracts again)."""
    from soco_pipeline.defs.shared.checks import TableResult
    from soco_pipeline.features.intact import cached_rows_intact
    from soco_pipeline.stored_tables import stored_as, stored_exists

    keys = sorted(context.selected_asset_keys, key=lambda k: k.to_user_string())

    def exists(key: dg.AssetKey, partition: str) -> bool:
        return stored_exists(tables_root, key.path[-1], partition)

    source = reusable_partition(context, keys, version, exists)
    if source is None:
        return None
    out = {}
    for key in keys:
        table = stored_as(tables_root, key.path[-1], source, context.partition_key)
        if not cached_rows_intact(table, features_root):
            context.log.info(
                f"{key.path[-1]}: the rows of {source} read the same, but what they point at is gone"
            )
            return None
        out[key.path[-1]] = TableResult(table, dict(reuse_metadata(source, version, table)))
    where = "its stored rows (nothing it reads changed)" if source == context.partition_key else source
    context.log.info(f"{', '.join(out)}: reused from {where}, reads version {version}")
    return out


def reuse_metadata(source: str, version: str, table: pd.DataFrame) -> Mapping[str, Any]:
    """The metadata of a table reused from `source`'s stored rows."""
    return {"rows": len(table), REUSED_FROM: source, READS_VERSION: version}


def reused_sources(instance: dg.DagsterInstance, key: dg.AssetKey) -> dict[str, str]:
    """{partition: the model its latest `key` was reused from}, for rows that came from another model."""
    records = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=key), limit=SCAN_LIMIT).records
    latest: dict[str, Any] = {}
    for r in records:
        latest.setdefault(r.partition_key, r.event_log_entry)
    out = {}
    for partition, entry in latest.items():
        source = _meta(entry, REUSED_FROM)
        if partition is not None and source and source != partition:
            out[partition] = str(source)
    return out


def reuse_note(instance: dg.DagsterInstance, tables: list[str]) -> str:
    """A board's markdown note naming each model whose rows of `tables` were reused from another model."""
    lines = [
        f"- `{table}` of **{model}**: reused from **{source}** (same reads version)"
        for table in tables
        for model, source in sorted(reused_sources(instance, dg.AssetKey(table)).items())
    ]
    return "\n".join(lines)
