"""Automation shared by the group folders: the conditions and one tick of a spec-folder sensor."""

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from typing import Any

import dagster as dg

from soco_pipeline.defs.shared.resources import SocoSettings
from soco_pipeline.settings import variable

AC = dg.AutomationCondition
EAGER = AC.eager()
# The observable sources: the spec sensors and REEVALUATED handle their changes; an unobserved new spec must
# not hold its partition back as "missing".
SOURCES = dg.AssetSelection.assets("backbone_spec", "lvlm_spec", "evaluation_protocol")
ON_CHANGE = (
    AC.in_latest_time_window()
    & (
        AC.newly_missing()
        | AC.code_version_changed()
        # a dep's new version from a run that also materialized this asset is already in it (as in Dagster's
        # any_deps_updated); without this a tick that saw the dep's change after this asset's update
        # requested the asset again (seen under the daemon: global_metrics twice per new backbone)
        | AC.any_deps_match(AC.data_version_changed() & ~AC.executed_with_root_target()).ignore(SOURCES)
    ).since_last_handled()
    & ~AC.any_deps_missing().ignore(SOURCES)
    & ~AC.any_deps_in_progress()
    & ~AC.in_progress()
).with_label("on_change")
REEVALUATE_CRON = variable("SOCO_REEVALUATE_CRON") or "0 3 * * 1"  # Mondays 03:00 UTC


def sensor_interval_s() -> int:
    """Seconds between two ticks of the automation and spec-folder sensors ($SOCO_SENSOR_INTERVAL_S)."""
    text = variable("SOCO_SENSOR_INTERVAL_S") or "15"
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"SOCO_SENSOR_INTERVAL_S={text!r} is not a whole number of seconds") from None
    if value < 1:
        raise ValueError(f"SOCO_SENSOR_INTERVAL_S={value} must be at least 1 second")
    return value


def daemon_interval(seconds: int) -> int:
    """A sensor's `minimum_interval_seconds`: one second less, so the daemons' 5 s loop never skips a tick."""
    return max(1, seconds - 1)


def daemon_minimum_interval_s() -> int:
    """The automation and spec-folder sensors' `minimum_interval_seconds`."""
    return daemon_interval(sensor_interval_s())


def reevaluate_on_cron(cron: str) -> dg.AutomationCondition:
    """After each tick of `cron`, request a partition once if stale (`on_cron` would re-run them all)."""
    # Two SINCE nodes: Dagster keys a SINCE node's state by its children's names only, so one OR under
    # since_last_handled shared ON_CHANGE's state: `metrics` requested twice (tests/test_automation_state.py).
    stale = (
        AC.code_version_changed().since_last_handled()
        | AC.any_deps_match(AC.data_version_changed()).since_last_handled()
    )
    return (
        AC.in_latest_time_window()
        & AC.cron_tick_passed(cron).since_last_handled()
        & stale
        & ~AC.any_deps_missing().ignore(SOURCES)
        & ~AC.any_deps_in_progress()
        & ~AC.in_progress()
    ).with_label(f"stale after cron {cron}")


# sources with observe_on_cron: the automation sensor targets them
OBSERVED_ON_CRON = ("evaluation_protocol",)


def observe_on_cron(cron: str) -> dg.AutomationCondition:
    """An observable source (the protocol file) observed once after each tick of `cron`."""
    return AC.cron_tick_passed(cron).since_last_handled().with_label(f"observe on cron {cron}")


# Weekly too, for what only the sources tell (an edited protocol, a spec changed while its sensor was off).
REEVALUATED = (ON_CHANGE | reevaluate_on_cron(REEVALUATE_CRON)).with_label("on_change or stale after cron")


MODEL_SPECS = "model_specs"  # the observable source whose data version is the set of model specs present


def board_condition(partitioned: Sequence[str] = (), optional: Sequence[str] = ()) -> dg.AutomationCondition:
    """A board's condition: Dagster's eager over what exists, one tick after a `partitioned` update."""
    specs = dg.AssetSelection.assets(MODEL_SPECS)
    return (
        AC.in_latest_time_window()
        & (
            AC.newly_missing()
            | AC.any_deps_updated()
            | AC.any_deps_match(AC.data_version_changed()).allow(specs)
        ).since_last_handled()
        & ~AC.any_deps_missing().ignore(dg.AssetSelection.assets(*partitioned, *optional, MODEL_SPECS))
        & ~AC.any_deps_match(
            AC.newly_updated() | AC.any_deps_match(AC.in_progress() | AC.newly_updated())
        ).allow(dg.AssetSelection.assets(*partitioned))
        & ~AC.any_deps_in_progress()
        & ~AC.in_progress()
    ).with_label("board: eager over what exists")


def specs_version(names: dict[str, list[str]]) -> str:
    """The data version of `model_specs`: a hash of every spec name per kind ({"backbones": [...], ...})."""
    text = json.dumps({k: sorted(v) for k, v in sorted(names.items())}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def eager_allowing_missing(*optional: str) -> dg.AutomationCondition:
    """Dagster's eager condition, except that missing `optional` upstream assets do not hold it back."""
    return (
        AC.in_latest_time_window()
        & (AC.newly_missing() | AC.any_deps_updated()).since_last_handled()
        & ~AC.any_deps_missing().ignore(dg.AssetSelection.assets(*optional))
        & ~AC.any_deps_in_progress()
        & ~AC.in_progress()
    ).with_label(f"eager (may miss {', '.join(optional)})")


DATA_VERSION_TAG = "dagster/data_version"
SPEC_PARTITIONS = ("backbones", "lvlms")  # the dynamic partitions a spec folder feeds
PER_MODEL_TAG = "soco/per_model"  # on every per-model table (shared/checks.partition_table): its partitions


def per_model_selection(partitions: str) -> dg.AssetSelection:
    """Every per-model table of `partitions` (backbones | lvlms) in every family (the PER_MODEL_TAG tag)."""
    return dg.AssetSelection.tag(PER_MODEL_TAG, partitions)


def per_model_assets(context: dg.SensorEvaluationContext, partitions: str) -> list[str]:
    """The automated per-model tables a changed spec re-runs, in every family that has started."""
    repo = context.repository_def
    if repo is None:
        return []
    graph = repo.asset_graph
    out = []
    for key in per_model_selection(partitions).resolve(graph):
        node = graph.get(key)
        if node.automation_condition is None:
            continue  # on request only (e.g. probe_metrics)
        inputs = [p for p in node.parent_keys if graph.has(p) and graph.get(p).is_materializable]
        inputs = [p for p in inputs if graph.get(p).partitions_def is None]
        if all(context.instance.get_latest_materialization_event(p) is not None for p in inputs):
            out.append(key.to_user_string())
    return sorted(out)


def observation(asset: str, version: str, partition: str | None = None) -> dg.AssetObservation:
    """An observation of a source asset (a spec file, the protocol) at data version `version`."""
    return dg.AssetObservation(asset, partition=partition, tags={DATA_VERSION_TAG: version})


class InvalidSpecError(ValueError):
    """A spec file in a watched folder is invalid: the sensor's tick fails with the file and the reason."""


def spec_folder_result(
    context: dg.SensorEvaluationContext,
    folder: str,
    scan: Callable[[str], tuple[dict[str, str], dict[str, str]]],
    partitions: dg.DynamicPartitionsDefinition,
    assets: list[str],
    label: str,
    source_asset: str,
) -> dg.SensorResult:
    """One tick of a spec-folder sensor (cursor: {name: content hash}); InvalidSpecError if all are bad."""
    seen: dict[str, str] = json.loads(context.cursor) if context.cursor else {}
    current, invalid = scan(folder)
    for name, err in invalid.items():
        context.log.warning(f"{label} spec {name!r} is invalid and was not added: {err}")
    existing = set(context.instance.get_dynamic_partitions(partitions.name))
    new = sorted(n for n in current if n not in existing)
    # removed: a spec this sensor saw (in its cursor) whose file is gone, not merely invalid; partitions added
    # another way (the demo's loopback LVLMs, whose specs live elsewhere) are not this folder's to remove
    folder_there = os.path.isdir(folder)  # a missing folder (a mount not there yet) removes nothing
    removed = sorted(
        n for n in existing if folder_there and n in seen and n not in current and n not in invalid
    )
    changed = sorted(n for n, h in current.items() if n in existing and n in seen and seen[n] != h)
    if invalid and not (new or changed or removed):
        # a failed tick shows its message in the UI's sensor page ("0 runs requested" hid it in the logs);
        # a tick with valid work applies it first, so a bad file never holds back the good ones
        raise InvalidSpecError(
            f"{len(invalid)} {label} spec(s) in {folder} invalid, not added: "
            + "; ".join(f"{name}.yaml: {err}" for name, err in sorted(invalid.items()))
            + ". Fix or remove the file (`soco add-backbone FILE` checks a spec before copying it); "
            "the valid specs are unaffected."
        )
    for name in removed:
        context.log.info(f"{label} spec {name!r} was removed: its partition and its board rows go")
    partition_requests = [
        *([partitions.build_add_request(new)] if new else []),
        *([partitions.build_delete_request(removed)] if removed else []),
    ]
    spec_events = []
    if removed:  # a new spec reaches the boards through its partitions' materializations
        names = {
            kind: context.instance.get_dynamic_partitions(kind)
            for kind in SPEC_PARTITIONS
            if kind != partitions.name
        }
        names[partitions.name] = sorted((existing | set(new)) - set(removed))
        spec_events = [observation(MODEL_SPECS, specs_version(names))]
    # a changed spec re-runs its partition of every per-model table, in every family that has started
    selected = sorted({*assets, *(per_model_assets(context, partitions.name) if changed else [])})
    requests = [
        dg.RunRequest(
            run_key=f"{n}:{current[n]}", partition_key=n, asset_selection=[dg.AssetKey(a) for a in selected]
        )
        for n in changed
    ]
    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=partition_requests,
        asset_events=[*(observation(source_asset, current[n], n) for n in [*new, *changed]), *spec_events],
        cursor=json.dumps({n: h for n, h in {**seen, **current}.items() if n not in removed}, sort_keys=True),
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
    """The sensor `name` watching the spec folder `folder(soco)` (see spec_folder_result)."""

    @dg.sensor(
        name=name,
        job=job,
        minimum_interval_seconds=daemon_minimum_interval_s(),
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=f"Watch the {label} spec folder: add a partition per new spec, re-run a changed one.",
    )
    def watch(context: dg.SensorEvaluationContext, soco: SocoSettings) -> dg.SensorResult:
        return spec_folder_result(context, folder(soco), scan, partitions, assets, label, source_asset)

    return watch
