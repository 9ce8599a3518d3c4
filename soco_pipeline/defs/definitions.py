"""The code location: each folder of defs/ but `shared/` is one asset group."""

import importlib
import pkgutil
import warnings
from types import ModuleType

import dagster as dg
from dagster_duckdb import DuckDBResource

import soco_pipeline.defs as defs_package
from soco_pipeline.defs.recovery import dead_run_sensor, executor_for_profile, lost_worker_sensor
from soco_pipeline.defs.shared.automation import OBSERVED_ON_CRON, daemon_minimum_interval_s
from soco_pipeline.defs.shared.executors import profile
from soco_pipeline.defs.shared.family import Family, declared_families
from soco_pipeline.defs.shared.io_manager import ParquetIOManager
from soco_pipeline.defs.shared.launchers import launcher_for_profile
from soco_pipeline.defs.shared.resources import SocoSettings
from soco_pipeline.storage import is_remote
from soco_pipeline.trust.family_watch import FamilyWatch

NOT_A_GROUP = {"shared"}  # folders of helpers, no definitions


def group_folders(package: ModuleType = defs_package) -> list[ModuleType]:
    """The sub-packages (folders) of `package` that hold an asset group, in name order."""
    names = sorted(
        m.name for m in pkgutil.iter_modules(package.__path__) if m.ispkg and m.name not in NOT_A_GROUP
    )
    return [importlib.import_module(f"{package.__name__}.{name}") for name in names]


def load_group_folders(package: ModuleType = defs_package) -> dg.Definitions:
    """Every group folder of `package` loaded by Dagster's package loading, merged into one Definitions."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.PreviewWarning)  # the module loaders are "preview" in Dagster 1.13
        return dg.Definitions.merge(
            *(dg.load_definitions_from_package_module(f) for f in group_folders(package))
        )


def over_families(families: list[Family]) -> dg.Definitions:
    """The assets over the declared families' boards: summaries, `results_database` and every watch."""
    from soco_pipeline.defs.results.assets import results_database_asset
    from soco_pipeline.defs.shared.watch import family_history, regression_sensor_on
    from soco_pipeline.defs.summary.assets import summary_assets

    watched = watch_pairs(families)
    return dg.Definitions(
        assets=[
            *summary_assets(families),
            results_database_asset(families),
            *(family_history(w, f) for w, f in watched),
        ],
        sensors=[regression_sensor_on(w.sensor, w.history) for w, _ in watched],
    )


def watch_pairs(families: list[Family]) -> list[tuple[FamilyWatch, Family | None]]:
    """Every regression watch of the registry with the `Family` whose tables it reads (None for SOCO's)."""
    from soco_pipeline.tasks.core import all_specs

    core = [(s.watch, None) for s in all_specs().values() if s.watch is not None and s.watch.archived]
    own = [
        (f.spec.watch, f)
        for f in families
        if f.spec is not None and f.spec.watch is not None and not f.spec.watch.archived and f.spec.parts
    ]
    return [*core, *own]


def build_definitions(**overrides) -> dg.Definitions:
    """Definitions with the SocoSettings resource from the environment plus `overrides` (tests' folders)."""
    soco = SocoSettings(**overrides)
    location = dg.Definitions(
        sensors=[
            dead_run_sensor,
            *([lost_worker_sensor] if profile() == "distributed" else []),
            dg.AutomationConditionSensorDefinition(
                "default_automation_condition_sensor",
                # and the sources observed on the weekly re-evaluation's cron (the protocol)
                target=dg.AssetSelection.all() | dg.AssetSelection.assets(*OBSERVED_ON_CRON),
                minimum_interval_seconds=daemon_minimum_interval_s(),
                default_status=dg.DefaultSensorStatus.RUNNING,
            ),
        ],
        executor=executor_for_profile(),  # SOCO_PROFILE: local (default) | distributed (Celery)
        resources={
            "soco": soco,
            "launcher": launcher_for_profile(soco.storage_root),
            "io_manager": ParquetIOManager(base_path=soco.tables_root, storage_root=soco.storage_root),
            # The one writer of storage/results.duckdb; views name their files relative to the storage root.
            "duckdb": DuckDBResource(
                database=soco.duckdb_path,
                connection_config={}
                if is_remote(soco.storage_root)
                else {"file_search_path": soco.storage_root},
            ),
        },
    )
    folders = load_group_folders()
    return dg.Definitions.merge(folders, over_families(declared_families(group_folders())), location)


defs = build_definitions()
