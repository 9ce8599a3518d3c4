"""The regression watch, its Dagster half: history assets, their `no_regression` checks and sensors."""

from collections.abc import Iterator

import dagster as dg
import pandas as pd

from soco_pipeline.defs.shared.automation import EAGER, PER_MODEL_TAG, daemon_interval
from soco_pipeline.defs.shared.checks import TableResult, TableSpec, publish_checked
from soco_pipeline.defs.shared.family import Family
from soco_pipeline.defs.shared.partitions import backbones_partitions
from soco_pipeline.defs.shared.resources import SocoSettings
from soco_pipeline.defs.shared.specs import spec_for, spec_version
from soco_pipeline.schemas import ModelHistorySchema
from soco_pipeline.settings import variable
from soco_pipeline.trust.family_watch import FamilySnapshot, FamilyWatch
from soco_pipeline.trust.history import WatchOutcome

LEVEL = 0.95  # the paired interval's level: a drop whose whole interval lies below zero is a regression
CHECK = "no_regression"


def watch_events(
    asset: str, outcome: WatchOutcome, data_version: str, level: float = LEVEL
) -> Iterator[dg.Output | dg.AssetCheckResult]:
    """The table and both checks' results; missing evidence is "not comparable" at WARN, never a pass."""
    table = outcome.table
    regressed = bool(outcome.message)
    blind = bool(outcome.not_comparable)
    output = dg.Output(
        table,
        metadata={
            "data_version": data_version,
            "previous_data_version": outcome.previous,
            "snapshots": int(table["data_version"].nunique()),
            "regression": regressed,
            "message": outcome.message,
            "paired_test": outcome.test,
            **({"not_comparable": outcome.not_comparable} if blind else {}),
        },
    )
    yield from publish_checked(
        [output], [TableSpec(ModelHistorySchema).check_result(asset, TableResult(table))]
    )
    compared = "not comparable" if blind else outcome.previous or "nothing (no earlier data version)"
    yield dg.AssetCheckResult(
        check_name=CHECK,
        passed=not regressed and not blind,
        severity=dg.AssetCheckSeverity.WARN if blind and not regressed else dg.AssetCheckSeverity.ERROR,
        description=outcome.not_comparable or None,
        metadata={
            "compared_with": compared,
            "level": level,
            "paired_test": outcome.test,
            **outcome.figures,
            **({"regression": outcome.message} if regressed else {}),
            **({"not_comparable": outcome.not_comparable} if blind else {}),
        },
    )


def watched_tables(tables_root: str, watch: FamilyWatch, partition: str) -> dict[str, pd.DataFrame]:
    """{name: table} of what `watch` reads, as stored: its per-model tables of `partition`, its sample tables."""
    from soco_pipeline.stored_tables import stored_table

    return {
        t: stored_table(tables_root, t, partition if t in watch.per_model else None) for t in watch.tables
    }


def family_history(watch: FamilyWatch, family: Family | None = None) -> dg.AssetsDefinition:
    """`watch.history[b]`; without `watch.archived` it reads `family`'s tables to archive the snapshot."""
    name, archived = watch.history, watch.archived
    if archived is None:  # a family's: registered as its tables are (SOCO's name is in tables.py)
        if family is None:
            raise ValueError(f"the watch of {watch.family!r} reads its family's tables: give its Family")
        family.register(name, partitioned=True)

    @dg.asset(
        name=name,
        group_name=archived.group if archived else family.name,
        partitions_def=backbones_partitions,
        # read in the step, and only for a backbone it scores; an archived watch reads the archive
        deps=[dg.AssetKey(t) for t in (watch.tables if archived is None else (archived.asset,))],
        automation_condition=EAGER,
        # a per-model table: a changed spec's run (rerun_changed_backbone) holds it beside the family's tables
        tags=None if archived else {PER_MODEL_TAG: backbones_partitions.name},
        kinds={"pandas"},
        code_version=archived.code_version if archived else "1",
        check_specs=[
            dg.AssetCheckSpec("schema", asset=name, blocking=True),
            dg.AssetCheckSpec(CHECK, asset=name),
        ],
        description=f"The regression watch of {watch.headline}: each data version of a backbone's spec.",
    )
    def history_asset(context: dg.AssetExecutionContext, soco: SocoSettings):
        from soco_pipeline.trust import history

        backbone, root = context.partition_key, soco.storage_root
        if archived is None:
            snap, reason = family_snapshot_of(family, soco, backbone)
            if snap is None:
                yield from not_applicable_events(name, reason)
                return
        version = spec_version(soco, backbone)
        if archived is None:
            history.write_snapshot(
                root, watch.family, backbone, version, snap.task_hash, snap.scores, snap.values
            )
        outcome = history.watch(
            root,
            watch.family,
            backbone,
            version,
            LEVEL,
            soco.seed,
            watch.reduction,
            watch.not_paired,
            archived_by=archived.asset if archived else "",
        )
        yield from watch_events(name, outcome, version)

    return history_asset


def family_snapshot_of(
    family: Family, soco: SocoSettings, backbone: str
) -> tuple[FamilySnapshot | None, str]:
    """(the family's snapshot of `backbone`, "") from its stored tables, or (None, why it does not apply)."""
    from soco_pipeline.trust.family_records import NotApplicableError
    from soco_pipeline.trust.family_watch import family_snapshot

    reason = family.not_applicable(spec_for(soco, backbone))
    if reason:
        return None, reason
    watch = family.spec.watch
    try:
        return family_snapshot(
            watch, family.spec.parts, backbone, watched_tables(soco.tables_root, watch, backbone)
        ), ""
    except NotApplicableError as e:  # e.g. MMVM items without masks: the family's not-applicable rows
        return None, str(e)


def not_applicable_events(name: str, reason: str) -> Iterator[dg.Output | dg.AssetCheckResult]:
    """A history asset's events for a backbone its family cannot score: an empty table, a passed check."""
    from soco_pipeline.trust import history

    empty = pd.DataFrame(columns=history.HISTORY_COLUMNS)
    yield from publish_checked(
        [dg.Output(empty, metadata={"not_applicable": reason})],
        [TableSpec(ModelHistorySchema).check_result(name, TableResult(empty))],
    )
    yield dg.AssetCheckResult(
        check_name=CHECK, passed=True, metadata={"compared_with": "nothing", "not_applicable": reason}
    )


def regression_sensor_on(name: str, asset: str) -> dg.SensorDefinition:
    """A sensor reporting `asset`'s latest regression: a log line and a POST to $SOCO_REGRESSION_WEBHOOK."""

    @dg.asset_sensor(name=name, asset_key=dg.AssetKey(asset), minimum_interval_seconds=daemon_interval(30))
    def sensor(context: dg.SensorEvaluationContext, asset_event: dg.EventLogEntry):
        from soco_pipeline.trust.history import WEBHOOK_ENV, notify

        meta = asset_event.asset_materialization.metadata if asset_event.asset_materialization else {}
        if "not_comparable" in meta:  # a watch without its evidence: said, never taken for "no regression"
            context.log.warning(f"regression watch of {asset}: {meta['not_comparable'].value}")
            return dg.SkipReason(f"{asset}: {meta['not_comparable'].value}")
        flagged = meta.get("regression")
        if flagged is None or not flagged.value:
            return dg.SkipReason(f"no regression in the latest {asset} materialization")
        outcome = notify(str(meta["message"].value), variable(WEBHOOK_ENV))
        context.log.warning(f"regression reported ({outcome}): {meta['message'].value}")
        return dg.SkipReason(f"regression reported: {outcome}")

    return sensor
