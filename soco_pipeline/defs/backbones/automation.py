"""The backbones group's job, spec-folder sensor and weekly re-evaluation schedule.

- New spec file in assets/backbones/: the sensor adds a `backbones` partition (and observes its spec); the
  ON_CHANGE automation condition of the per-backbone assets then materializes that partition only.
- Changed spec file: the sensor observes the new version and requests a run of that backbone's assets
  (its feature cache key changes, so the features are recomputed; nothing else is touched).
- Deleted spec file: nothing is dropped; the leaderboard marks the backbone `spec_present = false`.
- The schedule (weekly; $SOCO_REEVALUATE_CRON) re-runs a backbone only when Dagster's records say an input
  moved since its last run: a code version, the data version of an upstream table (its content hash),
  its spec file or the protocol (shared/automation.reevaluation_reasons).
"""

import hashlib
import os

import dagster as dg

from soco_pipeline.backbones.spec_files import scan_specs, spec_names
from soco_pipeline.defs.backbones.assets import (
    feature_manifest,
    four_choice_predictions,
    metrics,
    predictions,
    spec_version,
)
from soco_pipeline.defs.shared.automation import reevaluation_reasons, spec_folder_sensor
from soco_pipeline.defs.shared.partitions import backbones_partitions
from soco_pipeline.defs.shared.resources import SocoSettings

PER_BACKBONE = [feature_manifest, predictions, four_choice_predictions, metrics]
BACKBONE_ASSETS = [a.key.to_user_string() for a in PER_BACKBONE]

backbone_job = dg.define_asset_job(
    "evaluate_backbone",
    selection=dg.AssetSelection.assets(*BACKBONE_ASSETS),
    description="Features, predictions and metrics of one backbone partition.",
)


backbone_specs_sensor = spec_folder_sensor(
    "backbone_specs_sensor", backbone_job, lambda soco: soco.backbones_dir, scan_specs, backbones_partitions,
    BACKBONE_ASSETS, "backbone", "backbone_spec",
)


def backbone_reevaluation_reasons(instance: dg.DagsterInstance, soco: SocoSettings, backbone: str) -> list[str]:
    """Why a backbone partition is due for re-evaluation (empty: it is up to date)."""
    sources = {
        "backbone_spec": (spec_version(soco, backbone), backbone, "feature_manifest"),
        "evaluation_protocol": (soco.protocol().version_hash(), None, "metrics"),
    }
    return reevaluation_reasons(instance, backbone, PER_BACKBONE, sources)


@dg.schedule(
    job=backbone_job,
    cron_schedule=os.environ.get("SOCO_REEVALUATE_CRON", "0 3 * * 1"),
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Weekly: re-evaluate every backbone whose spec, protocol, code or input data changed.",
)
def reevaluate_schedule(context: dg.ScheduleEvaluationContext, soco: SocoSettings):
    """Request a run for each backbone whose inputs changed since its last run; skip otherwise."""
    requests = []
    present = spec_names(soco.backbones_dir)  # a deleted spec keeps its results; nothing to re-run
    for backbone in sorted(set(context.instance.get_dynamic_partitions(backbones_partitions.name)) & present):
        reasons = backbone_reevaluation_reasons(context.instance, soco, backbone)
        if reasons:
            context.log.info(f"{backbone}: " + "; ".join(reasons))
            digest = hashlib.sha256("\n".join(reasons).encode()).hexdigest()[:16]
            requests.append(dg.RunRequest(run_key=f"{backbone}:{digest}", partition_key=backbone))
    return requests or dg.SkipReason("every backbone is up to date")
