"""The backbone's results record (issue 26): JSON validated against assets/results_record.schema.json."""

import dagster as dg
import pandas as pd

from soco_pipeline.defs.backbones.assets import GROUP, matching_device, spec_for, spec_version
from soco_pipeline.defs.shared.automation import EAGER
from soco_pipeline.defs.shared.partitions import backbones_partitions
from soco_pipeline.defs.shared.resources import SocoSettings
from soco_pipeline.defs.shared.run_configs import recorded_subset, stage_timing
from soco_pipeline.tasks.core import SOCO

PER_BACKBONE_STAGES = ("feature_manifest", "predictions", "four_choice_predictions", "metrics")


def stored_matching_hash(instance: dg.DagsterInstance) -> str | None:
    """The matching hash the latest `sample_hashes` were made with (its metadata; None before it had one)."""
    from soco_pipeline.trust.hashes import MATCHING_HASH

    event = instance.get_latest_materialization_event(dg.AssetKey("sample_hashes"))
    value = event.asset_materialization.metadata.get(MATCHING_HASH) if event else None
    return getattr(value, "value", None)


@dg.asset(
    group_name=GROUP,
    partitions_def=backbones_partitions,
    automation_condition=EAGER,
    deps=["metrics"],
    kinds={"json"},
)
def results_record(
    context: dg.AssetExecutionContext,
    soco: SocoSettings,
    image_set: pd.DataFrame,
    keypoints: pd.DataFrame,
    image_pairs: pd.DataFrame,
    correspondences: pd.DataFrame,
    four_choice: pd.DataFrame,
    feature_manifest: pd.DataFrame,
    predictions: pd.DataFrame,
    four_choice_predictions: pd.DataFrame,
    sample_hashes: pd.DataFrame,
) -> dg.MaterializeResult:
    """The backbone's results record: spec, protocol, input sizes, versions, timings, counts, CIs and hashes."""
    from soco_pipeline.backbones import spec_hash
    from soco_pipeline.trust import history
    from soco_pipeline.trust.provenance import write_named_record
    from soco_pipeline.trust.records import backbone_record, backbone_scores, results_markdown

    backbone = context.partition_key
    spec = spec_for(soco, backbone)
    tables = {
        "image_set": image_set,
        "keypoints": keypoints,
        "image_pairs": image_pairs,
        "correspondences": correspondences,
        "four_choice": four_choice,
        "feature_manifest": feature_manifest,
        "predictions": predictions,
        "four_choice_predictions": four_choice_predictions,
    }
    rule, protocol = recorded_subset(context.instance, backbone), soco.protocol()
    scores = backbone_scores(tables, rule, protocol)
    rec = backbone_record(
        backbone=backbone,
        family=SOCO.record_name,
        spec=spec,
        spec_hash=spec_hash(spec),
        protocol=protocol,
        tables=tables,
        rule=rule,
        device=matching_device(soco),
        timing=stage_timing(context.instance, backbone, PER_BACKBONE_STAGES),
        scores=scores,
        pair_hashes=sample_hashes
        if stored_matching_hash(context.instance) == protocol.matching_hash()
        else None,
    )
    path = write_named_record(rec, soco.records_root, backbone)
    # the regression watch's snapshot (tasks/core.py)
    watched = {m: r["value"] for m, r in rec["results"].items() if SOCO.watch.watches(m)}
    history.write_snapshot(
        soco.storage_root,
        SOCO.watch.family,
        backbone,
        spec_version(soco, backbone),
        rec["task_hashes"]["pairs"],
        scores[scores["metric"].isin(list(watched))],
        watched,
    )
    return dg.MaterializeResult(
        metadata={
            "path": dg.MetadataValue.path(path),
            "task_hash/pairs": rec["task_hashes"]["pairs"],
            "partial": rec["subset"]["partial"],
            "pairs_evaluated": rec["n-samples"]["pairs"]["evaluated"],
            "results": dg.MetadataValue.md(results_markdown(rec)),
        }
    )
