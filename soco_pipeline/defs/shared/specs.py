"""What every group folder looks up about a run, so that no group folder imports another."""

from __future__ import annotations

import pandas as pd

from soco_pipeline.defs.shared.partitions import partition_spec_file
from soco_pipeline.defs.shared.resources import SocoSettings
from soco_pipeline.taxonomy import Taxonomy


def spec_path(soco: SocoSettings, backbone: str):
    """The spec file of a backbone partition (a clear error if it is gone)."""
    return partition_spec_file(soco.backbones_dir, backbone, "backbone", "recomputed")


def spec_version(soco: SocoSettings, backbone: str) -> str:
    """The data version of a backbone's spec: its file's content hash (and its local weights')."""
    from soco_pipeline.backbones.spec_files import spec_data_version

    return spec_data_version(spec_path(soco, backbone))


def spec_for(soco: SocoSettings, backbone: str):
    """Load the spec file of a backbone partition (a clear error if its file is gone or malformed)."""
    from soco_pipeline.backbones.validate import checked_spec

    return checked_spec(spec_path(soco, backbone))


def lvlm_spec_path(soco: SocoSettings, model: str):
    """The spec file of an `lvlms` partition (a clear error when it is gone)."""
    return partition_spec_file(soco.lvlms_dir, model, "LVLM", "re-asked")


def lvlm_spec_for(soco: SocoSettings, model: str):
    """The spec of an `lvlms` partition (a clear error when its file is gone or malformed)."""
    from soco_pipeline.lvlm.specs import load_spec

    return load_spec(lvlm_spec_path(soco, model))


def run_taxonomy(table: pd.DataFrame) -> Taxonomy:
    """The run's Taxonomy from the `taxonomy` asset's table (every stage reads it, never the YAML)."""
    return Taxonomy.from_table(table, source="the run's taxonomy asset")


def feature_store(soco: SocoSettings, manifest: pd.DataFrame):
    """Read access to a backbone's cached feature maps, as listed by its manifest."""
    from soco_pipeline.features import FeatureStore

    return FeatureStore.from_manifest(soco.features_root, manifest)


def global_policy(soco: SocoSettings):
    """The run's global-feature input policy: every family reads one cache folder per backbone."""
    from soco_pipeline.features.policy import load_global_policy

    return load_global_policy(soco.dataset_size if soco.dataset_size in ("demo", "full") else None)
