"""A backbone's input fingerprint as seen from the Dagster instance (for the schedule and metrics)."""

from pathlib import Path

import dagster as dg

from soco_pipeline.backbones.fingerprint import DATA_ASSETS, fingerprint
from soco_pipeline.defs.resources import SocoSettings


def data_versions(instance: dg.DagsterInstance) -> dict[str, str]:
    """The storage id of the latest materialization of each data table a backbone reads."""
    out = {}
    for name in DATA_ASSETS:
        records = instance.fetch_materializations(dg.AssetKey(name), limit=1).records
        out[name] = str(records[0].storage_id) if records else "missing"
    return out


def current_fingerprint(instance: dg.DagsterInstance, soco: SocoSettings, backbone: str) -> str | None:
    """The fingerprint a fresh evaluation of `backbone` would record (None when its spec is gone)."""
    path = Path(soco.backbones_dir) / f"{backbone}.yaml"
    if not path.exists():
        return None
    return fingerprint(path, data_versions(instance), soco.protocol_path)


def recorded_fingerprint(instance: dg.DagsterInstance, backbone: str) -> str | None:
    """The fingerprint the latest metrics materialization of `backbone` recorded."""
    result = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey("metrics"), asset_partitions=[backbone]), limit=1
    )
    if not result.records:
        return None
    mat = result.records[0].asset_materialization
    value = mat.metadata.get("input_fingerprint") if mat is not None else None
    return value.value if value is not None else None
