"""The LVLM group's job and spec-folder sensor (assets/lvlms/; an empty folder is fine)."""

import dagster as dg

from soco_pipeline.defs.shared.automation import per_model_selection, spec_folder_sensor
from soco_pipeline.defs.shared.partitions import lvlms_partitions
from soco_pipeline.lvlm.specs import scan_specs

LVLM_ASSETS = ["lvlm_answers", "lvlm_metrics"]

lvlm_job = dg.define_asset_job(
    "evaluate_lvlm",
    # and every family's per-model tables, which a changed spec re-runs (shared/automation.per_model_assets)
    selection=dg.AssetSelection.assets(*LVLM_ASSETS) | per_model_selection("lvlms"),
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
