"""The backbones group's job and spec-folder sensor."""

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
# What a changed spec re-runs, in every started family; a job of its own so that a backfill of
# `evaluate_backbone` still runs SOCO's four steps only.
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
