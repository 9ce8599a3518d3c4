"""The LVLM group's job and spec-folder sensor (assets/lvlms/, treated as the backbone sensor treats
assets/backbones/: a new file adds a partition, a changed file re-runs that model, a deleted one keeps
its results marked `spec_present = false`; an empty folder is fine)."""

import dagster as dg

from soco_pipeline.defs.shared.automation import spec_folder_sensor
from soco_pipeline.defs.shared.partitions import lvlms_partitions
from soco_pipeline.lvlm.specs import scan_specs

LVLM_ASSETS = ["lvlm_answers", "lvlm_metrics"]

lvlm_job = dg.define_asset_job(
    "evaluate_lvlm",
    selection=dg.AssetSelection.assets(*LVLM_ASSETS),
    description="Answers and metrics of one LVLM partition.",
)

lvlm_specs_sensor = spec_folder_sensor(
    "lvlm_specs_sensor",
    lvlm_job,
    lambda soco: soco.lvlms_dir,
    scan_specs,
    lvlms_partitions,
    LVLM_ASSETS,
    "LVLM",
    "lvlm_spec",
)
