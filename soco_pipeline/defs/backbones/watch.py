"""The regression watch of a backbone's SOCO scores: `results_record[b]` archives each materialization's
per-sample scores by the spec's data version (the spec file and its local weights); `model_history[b]`
compares the newest with the previous data version on the same task hash (shared/watch.py, the same
machinery as every family's `<family>_history`); its non-blocking `no_regression` check fails on a
significant drop, and `regression_sensor` reports it (a log line; a POST to $SOCO_REGRESSION_WEBHOOK)."""

import dagster as dg

from soco_pipeline.defs.backbones.assets import GROUP, spec_version
from soco_pipeline.defs.backbones.records import FAMILY
from soco_pipeline.defs.shared.automation import EAGER
from soco_pipeline.defs.shared.partitions import backbones_partitions
from soco_pipeline.defs.shared.resources import SocoSettings
from soco_pipeline.defs.shared.watch import LEVEL, regression_sensor_on, watch_checks, watch_events


@dg.asset(
    group_name=GROUP,
    partitions_def=backbones_partitions,
    automation_condition=EAGER,
    deps=["results_record"],
    kinds={"pandas"},
    code_version="2",
    check_specs=watch_checks("model_history"),
)
def model_history(context: dg.AssetExecutionContext, soco: SocoSettings):
    """Every materialization of this backbone by data version and date (the snapshots `results_record`
    archives), with the paired test of the newest against the previous data version on the same task hash
    (the `no_regression` check)."""
    from soco_pipeline.trust import history

    version = spec_version(soco, context.partition_key)
    outcome = history.watch(
        soco.storage_root,
        FAMILY,
        context.partition_key,
        version,
        LEVEL,
        soco.seed,
        archived_by="results_record",
    )
    yield from watch_events("model_history", outcome, version)


regression_sensor = regression_sensor_on("regression_sensor", "model_history")
