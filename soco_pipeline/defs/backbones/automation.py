"""The backbones group's job and spec-folder sensor; the weekly re-evaluation is an automation condition.

- New spec file in assets/backbones/: the sensor adds a `backbones` partition (and observes its spec); the
  automation condition of the per-backbone assets then materializes that partition only.
- Changed spec file: the sensor observes the new version and requests a run of that backbone's partition
  of every per-model table, SOCO's and every started family's (its feature cache key changes, so the
  features are recomputed; no other partition is touched); the boards then refresh on those updates.
- Deleted spec file: its partition is deleted and `model_specs` observed, so every board refreshes without
  its rows (its Parquet files stay; re-adding the spec brings the rows back).
- Weekly ($SOCO_REEVALUATE_CRON, shared/automation.REEVALUATED on the per-backbone assets): after the tick,
  each backbone partition whose code version or upstream data version (tables, its spec file, the protocol,
  observed on the same cron) moved since it last ran is requested once; the others are not.
"""

import dagster as dg

from soco_pipeline.backbones.spec_files import scan_specs
from soco_pipeline.defs.backbones.assets import (
    feature_manifest,
    four_choice_predictions,
    metrics,
    predictions,
)
from soco_pipeline.defs.shared.automation import per_model_selection, spec_folder_sensor
from soco_pipeline.defs.shared.partitions import backbones_partitions

PER_BACKBONE = [feature_manifest, predictions, four_choice_predictions, metrics]
BACKBONE_ASSETS = [a.key.to_user_string() for a in PER_BACKBONE]

backbone_job = dg.define_asset_job(
    "evaluate_backbone",
    selection=dg.AssetSelection.assets(*BACKBONE_ASSETS),
    description="Features, predictions and metrics of one backbone partition (what a backfill runs).",
)
# What a changed spec re-runs: SOCO's per-backbone assets and every family's per-model tables
# (shared/automation.per_model_assets picks those of the families that have started). A job of its own, so
# that a backfill of `evaluate_backbone` still runs SOCO's four steps per partition only.
backbone_change_job = dg.define_asset_job(
    "rerun_changed_backbone",
    selection=dg.AssetSelection.assets(*BACKBONE_ASSETS) | per_model_selection("backbones"),
    description="A changed backbone spec's partition of SOCO's and every started family's per-model tables.",
)

backbone_specs_sensor = spec_folder_sensor(
    "backbone_specs_sensor",
    backbone_change_job,
    lambda soco: soco.backbones_dir,
    scan_specs,
    backbones_partitions,
    BACKBONE_ASSETS,
    "backbone",
    "backbone_spec",
)
