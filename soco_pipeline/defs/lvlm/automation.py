"""The LVLM group's job and spec-folder sensor (assets/lvlms/, treated as the backbone sensor treats
assets/backbones/: a new file adds a partition, a changed file re-runs that model, a deleted one keeps
its results marked `spec_present = false`; an empty folder is fine)."""

from pathlib import Path

import dagster as dg

from soco_pipeline.defs.shared.automation import spec_folder_result
from soco_pipeline.defs.shared.partitions import lvlms_partitions
from soco_pipeline.defs.shared.resources import SocoSettings

LVLM_ASSETS = ["lvlm_answers", "lvlm_metrics"]

lvlm_job = dg.define_asset_job(
    "evaluate_lvlm",
    selection=dg.AssetSelection.assets(*LVLM_ASSETS),
    description="Answers and metrics of one LVLM partition.",
)


@dg.sensor(job=lvlm_job, minimum_interval_seconds=15, default_status=dg.DefaultSensorStatus.RUNNING)
def lvlm_specs_sensor(context: dg.SensorEvaluationContext, soco: SocoSettings) -> dg.SensorResult:
    """Watch the LVLM spec folder: add a partition per new spec, re-run a model whose spec changed."""
    from soco_pipeline.lvlm.specs import scan_specs

    return spec_folder_result(
        context, Path(soco.lvlms_dir), scan_specs, lvlms_partitions, LVLM_ASSETS, "LVLM", "lvlm_spec"
    )
