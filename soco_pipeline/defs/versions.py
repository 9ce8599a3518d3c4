"""Code versions of the per-backbone assets, and a backbone's input fingerprint as seen from the instance.

Dagster's `code_version` of each asset is the one place a code change is declared: bump it when the code
changes what the asset computes. The feature cache's own spec hash reuses FEATURE_CODE_VERSION, because its
files outlive Dagster's metadata.
"""

from pathlib import Path

import dagster as dg

from soco_pipeline.backbones.fingerprint import DATA_ASSETS, fingerprint
from soco_pipeline.backbones.spec import FEATURE_CODE_VERSION
from soco_pipeline.defs.resources import SocoSettings
from soco_pipeline.evaluation.protocol import load_protocol

BACKBONE_CODE_VERSIONS = {
    "feature_manifest": FEATURE_CODE_VERSION,
    "predictions": "1",
    "four_choice_predictions": "1",
    "metrics": "1",
}


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
    protocol = load_protocol(soco.protocol_path).version_hash()
    return fingerprint(path, data_versions(instance), protocol, BACKBONE_CODE_VERSIONS)


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
