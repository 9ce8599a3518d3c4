"""The new-backbone sensor and the re-evaluation schedule.

- New spec file in assets/backbones/: the sensor adds a `backbones` partition; the eager automation
  condition of the per-backbone assets then materializes that partition only.
- Changed spec file: the sensor requests a run of that backbone's assets (its cache key changes, so
  the features are recomputed; nothing else is touched).
- Deleted spec file: nothing is dropped; the leaderboard marks the backbone `spec_present = false`.
- The schedule re-runs a backbone only when its fingerprint (spec, protocol, code version and the
  versions of the data tables it reads) differs from the one its last metrics recorded.
"""

import json
import os
from collections.abc import Callable
from pathlib import Path

import dagster as dg

from soco_pipeline.backbones.fingerprint import scan_specs
from soco_pipeline.defs.partitions import backbones_partitions
from soco_pipeline.defs.resources import SocoSettings
from soco_pipeline.defs.versions import current_fingerprint, recorded_fingerprint

BACKBONE_ASSETS = ["feature_manifest", "predictions", "four_choice_predictions", "metrics"]

backbone_job = dg.define_asset_job(
    "evaluate_backbone",
    selection=dg.AssetSelection.assets(*BACKBONE_ASSETS),
    description="Features, predictions and metrics of one backbone partition.",
)


def spec_folder_result(
    context: dg.SensorEvaluationContext,
    folder: Path,
    scan: Callable[[Path], tuple[dict[str, str], dict[str, str]]],
    partitions: dg.DynamicPartitionsDefinition,
    assets: list[str],
    label: str,
) -> dg.SensorResult:
    """One tick of a spec-folder sensor: a partition per new valid spec, a run of `assets` for each spec whose
    file changed since the cursor (a {name: content hash} map), a warning per invalid spec."""
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
        cursor=json.dumps({**seen, **current}, sort_keys=True),
    )


@dg.sensor(job=backbone_job, minimum_interval_seconds=15, default_status=dg.DefaultSensorStatus.RUNNING)
def backbone_specs_sensor(context: dg.SensorEvaluationContext, soco: SocoSettings) -> dg.SensorResult:
    """Watch the backbone spec folder: add a partition per new spec, re-run a backbone whose spec changed."""
    return spec_folder_result(
        context, Path(soco.backbones_dir), scan_specs, backbones_partitions, BACKBONE_ASSETS, "backbone"
    )


@dg.schedule(
    job=backbone_job,
    cron_schedule=os.environ.get("SOCO_REEVALUATE_CRON", "0 3 * * 1"),
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Weekly: re-evaluate every backbone whose spec, protocol, code or input data changed.",
)
def reevaluate_schedule(context: dg.ScheduleEvaluationContext, soco: SocoSettings):
    """Request a run for each backbone whose inputs changed since its last metrics; skip otherwise."""
    requests = []
    for backbone in sorted(context.instance.get_dynamic_partitions(backbones_partitions.name)):
        now = current_fingerprint(context.instance, soco, backbone)
        if now is not None and now != recorded_fingerprint(context.instance, backbone):
            requests.append(dg.RunRequest(run_key=f"{backbone}:{now}", partition_key=backbone))
    return requests or dg.SkipReason("every backbone is up to date")
