"""Automation shared by the group folders: the conditions, one tick of a spec-folder sensor, and why a
partition is due for re-evaluation according to Dagster's own version records.

- `ON_CHANGE` materializes a partition that is new (newly missing), whose code version changed, or one of
  whose upstream tables got a new *data version*. Tables carry their content hash as data version
  (shared/checks.py), so re-materializing unchanged data requests nothing downstream (Dagster's `eager`
  would re-run every backbone on any upstream materialization).
- `reevaluation_reasons` is the weekly schedule's test: a partition is re-run when Dagster's records say
  its inputs moved since its last run (code versions, data versions of its upstream tables, the data
  version of its spec file and of the protocol, both observable source assets).
"""

import json
from collections.abc import Callable, Iterable
from typing import Any

import dagster as dg

from soco_pipeline.defs.shared.resources import SocoSettings

AC = dg.AutomationCondition
EAGER = AC.eager()
# The observable source assets (spec files, protocol): their changes are handled by the spec sensors' run
# requests and the weekly schedule; an unobserved spec (a partition the sensor has just added) must not
# hold its partition back as a "missing" dependency.
SOURCES = dg.AssetSelection.assets("backbone_spec", "lvlm_spec", "evaluation_protocol")
ON_CHANGE = (
    AC.in_latest_time_window()
    & (AC.newly_missing() | AC.code_version_changed()
       | AC.any_deps_match(AC.data_version_changed()).ignore(SOURCES)).since_last_handled()
    & ~AC.any_deps_missing().ignore(SOURCES)
    & ~AC.any_deps_in_progress()
    & ~AC.in_progress()
).with_label("on_change")



def eager_allowing_missing(*optional: str) -> dg.AutomationCondition:
    """Dagster's eager condition, except that the upstream assets named in `optional` (inputs read with
    `allow_missing`, summaries not every deployment has) do not hold the asset back while missing."""
    return (
        AC.in_latest_time_window()
        & (AC.newly_missing() | AC.any_deps_updated()).since_last_handled()
        & ~AC.any_deps_missing().ignore(dg.AssetSelection.assets(*optional))
        & ~AC.any_deps_in_progress()
        & ~AC.in_progress()
    ).with_label(f"eager (may miss {', '.join(optional)})")


DATA_VERSION_TAG = "dagster/data_version"


def observation(asset: str, version: str, partition: str | None = None) -> dg.AssetObservation:
    """An observation of a source asset (a spec file, the protocol) at data version `version`."""
    return dg.AssetObservation(asset, partition=partition, tags={DATA_VERSION_TAG: version})


def spec_folder_result(
    context: dg.SensorEvaluationContext,
    folder: str,
    scan: Callable[[str], tuple[dict[str, str], dict[str, str]]],
    partitions: dg.DynamicPartitionsDefinition,
    assets: list[str],
    label: str,
    source_asset: str,
) -> dg.SensorResult:
    """One tick of a spec-folder sensor: a partition per new valid spec, a run of `assets` for each spec whose
    file changed since the cursor (a {name: content hash} map), an observation of `source_asset` (its data
    version: the file hash) for each new or changed spec, a warning per invalid spec."""
    seen: dict[str, str] = json.loads(context.cursor) if context.cursor else {}
    current, invalid = scan(folder)
    for name, err in invalid.items():
        context.log.warning(f"{label} spec {name!r} is invalid and was not added: {err}")
    existing = set(context.instance.get_dynamic_partitions(partitions.name))
    new = sorted(n for n in current if n not in existing)
    changed = sorted(n for n, h in current.items() if n in existing and n in seen and seen[n] != h)
    requests = [
        dg.RunRequest(run_key=f"{n}:{current[n]}", partition_key=n, asset_selection=[dg.AssetKey(a) for a in assets])
        for n in changed
    ]
    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=[partitions.build_add_request(new)] if new else [],
        asset_events=[observation(source_asset, current[n], n) for n in [*new, *changed]],
        cursor=json.dumps({**seen, **current}, sort_keys=True),
    )


def spec_folder_sensor(
    name: str,
    job: Any,  # what dg.define_asset_job returns (its class is not exported)
    folder: Callable[[SocoSettings], str],
    scan: Callable[[str], tuple[dict[str, str], dict[str, str]]],
    partitions: dg.DynamicPartitionsDefinition,
    assets: list[str],
    label: str,
    source_asset: str,
) -> dg.SensorDefinition:
    """The sensor `name` watching the spec folder `folder(soco)`: a partition per new spec, a run of `job`'s
    `assets` for a spec whose file changed, an observation of `source_asset` (see spec_folder_result)."""

    @dg.sensor(name=name, job=job, minimum_interval_seconds=15, default_status=dg.DefaultSensorStatus.RUNNING,
               description=f"Watch the {label} spec folder: add a partition per new spec, re-run a changed one.")
    def watch(context: dg.SensorEvaluationContext, soco: SocoSettings) -> dg.SensorResult:
        return spec_folder_result(context, folder(soco), scan, partitions, assets, label, source_asset)

    return watch


def _latest(instance: dg.DagsterInstance, asset: str, partition: str | None, observed: bool = False,
            before: int | None = None):
    records_filter = dg.AssetRecordsFilter(
        asset_key=dg.AssetKey(asset), asset_partitions=[partition] if partition else None,
        before_storage_id=before,
    )
    fetch = instance.fetch_observations if observed else instance.fetch_materializations
    records = fetch(records_filter, limit=1).records
    return records[0] if records else None


def _event(record):
    return record.asset_observation if record.asset_observation is not None else record.asset_materialization


def reevaluation_reasons(
    instance: dg.DagsterInstance,
    partition: str,
    assets: Iterable[dg.AssetsDefinition],
    sources: dict[str, tuple[str, str | None, str]],
) -> list[str]:
    """Why `partition` of `assets` should be re-run, from Dagster's records (empty: it is up to date).

    Per asset: never materialized; its recorded `dagster/code_version` differs from the definition's; an
    unpartitioned upstream table's latest data version differs from the `dagster/input_data_version` that
    run recorded. Per source in `sources` ({source asset: (current data version, its partition or None,
    the asset that reads it)}): the current version differs from the one last observed before the reader's
    latest materialization (the reader observes its source while it runs; the spec sensors observe a
    changed file between runs).
    """
    reasons: list[str] = []
    latest: dict[str, object] = {}
    for asset_def in assets:
        for key in asset_def.keys:
            name = key.to_user_string()
            record = _latest(instance, name, partition)
            if record is None:
                reasons.append(f"{name} was never materialized")
                continue
            latest[name] = record
            tags = record.asset_materialization.tags or {}
            code = asset_def.code_versions_by_key.get(key)
            if code is not None and tags.get("dagster/code_version") != code:
                reasons.append(f"{name}: code version {tags.get('dagster/code_version')} -> {code}")
            for dep in asset_def.asset_deps.get(key, set()):
                recorded = tags.get(f"dagster/input_data_version/{dep.to_user_string()}")
                upstream = _latest(instance, dep.to_user_string(), None)
                if recorded is None or upstream is None or upstream.partition_key is not None:
                    continue  # a source, a partitioned or a never materialized upstream: not a table here
                now = (_event(upstream).tags or {}).get(DATA_VERSION_TAG)
                if now is not None and now != recorded:
                    reasons.append(f"{name}: input {dep.to_user_string()} changed ({recorded} -> {now})")
    for source, (version, source_partition, reader) in sources.items():
        if reader not in latest:
            continue
        seen = _latest(instance, source, source_partition, observed=True, before=latest[reader].storage_id)
        before = (_event(seen).tags or {}).get(DATA_VERSION_TAG) if seen is not None else None
        if version != before:
            reasons.append(f"{source} changed ({before} -> {version})")
    return reasons
