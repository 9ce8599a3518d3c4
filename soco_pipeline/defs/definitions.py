"""The code location: every asset, check, sensor, schedule and resource of the SOCO pipeline."""

import dagster as dg
from dagster_duckdb import DuckDBResource

from soco_pipeline.defs import (
    analysis,
    automation,
    backbone_assets,
    data_assets,
    fgbmk,
    lvlm,
    mmvm,
    pair_assets,
    tpips,
    trust,
)
from soco_pipeline.defs.executors import executor_for_profile, profile
from soco_pipeline.defs.io_managers import ParquetIOManager
from soco_pipeline.defs.recovery import dead_run_sensor, lost_worker_sensor
from soco_pipeline.defs.resources import SocoSettings
from soco_pipeline.settings import Settings
from soco_pipeline.storage import is_remote


def build_definitions(**overrides) -> dg.Definitions:
    """Definitions with the SocoSettings resource built from the environment plus `overrides`.

    Tests pass e.g. storage_root / backbones_dir / categories to run on a temporary folder.
    """
    soco = SocoSettings(**overrides)
    settings: Settings = soco.settings()
    return dg.Definitions(
        assets=dg.load_assets_from_modules(
            [data_assets, pair_assets, backbone_assets, lvlm, analysis, mmvm, fgbmk, tpips, trust]
        ),
        asset_checks=dg.load_asset_checks_from_modules([data_assets, pair_assets, backbone_assets, lvlm, fgbmk, tpips]),
        jobs=[automation.backbone_job, lvlm.lvlm_job],
        sensors=[
            automation.backbone_specs_sensor,
            lvlm.lvlm_specs_sensor,
            dead_run_sensor,
            *([lost_worker_sensor] if profile() == "distributed" else []),
            dg.AutomationConditionSensorDefinition(
                "default_automation_condition_sensor",
                target=dg.AssetSelection.all(),
                minimum_interval_seconds=15,
                default_status=dg.DefaultSensorStatus.RUNNING,
            ),
        ],
        schedules=[automation.reevaluate_schedule],
        executor=executor_for_profile(),  # SOCO_PROFILE: local (default) | distributed (Celery)
        resources={
            "soco": soco,
            "io_manager": ParquetIOManager(base_path=settings.tables_root),
            # The one writer of storage/results.duckdb (the results_database asset); readers such as
            # `soco sql` open the file read-only on their own. The views name their Parquet files relative
            # to the storage root (portable copies), so connections resolve them from there.
            "duckdb": DuckDBResource(
                database=settings.duckdb_path,
                connection_config={} if is_remote(settings.storage_root)
                else {"file_search_path": settings.storage_root},
            ),
        },
    )


defs = build_definitions()
