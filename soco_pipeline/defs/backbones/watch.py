"""The regression watch of a backbone: `model_history[b]` archives each materialization's per-sample scores
by the spec's data version (the spec file and its local weights) and compares the newest with the previous
data version on the same task hash; its non-blocking `no_regression` check fails on a significant drop, and
`regression_sensor` reports it (a log line; a POST to $SOCO_REGRESSION_WEBHOOK when set)."""

import os

import dagster as dg
import pandas as pd

from soco_pipeline import schemas
from soco_pipeline.defs.backbones.assets import GROUP, spec_version
from soco_pipeline.defs.shared.automation import EAGER
from soco_pipeline.defs.shared.partitions import backbones_partitions
from soco_pipeline.defs.shared.resources import SocoSettings
from soco_pipeline.defs.shared.run_configs import recorded_subset

FAMILY = "soco"
# the headline metrics the watch tests (the SOCO board's levels and the 4-choice accuracy)
WATCHED = ("cc", "soc", "soc_geo", "cross_soc", "four_choice")
LEVEL = 0.95


@dg.asset(
    group_name=GROUP,
    partitions_def=backbones_partitions,
    automation_condition=EAGER,
    deps=["results_record"],
    kinds={"pandas"},
    code_version="1",
    check_specs=[dg.AssetCheckSpec("no_regression", asset="model_history", blocking=False)],
)
def model_history(
    context: dg.AssetExecutionContext,
    soco: SocoSettings,
    image_set: pd.DataFrame,
    keypoints: pd.DataFrame,
    image_pairs: pd.DataFrame,
    correspondences: pd.DataFrame,
    predictions: pd.DataFrame,
    four_choice_predictions: pd.DataFrame,
):
    """Every materialization of this backbone by data version and date, with the paired test of the newest
    against the previous data version on the same task hash (the `no_regression` check)."""
    from soco_pipeline.evaluation import history, stats
    from soco_pipeline.evaluation.provenance import read_named_record
    from soco_pipeline.evaluation.subsets import apply_pair_subset

    backbone = context.partition_key
    version = spec_version(soco, backbone)
    record = read_named_record(soco.records_root, backbone)
    task_hash = record["task_hashes"]["pairs"]
    pairs = apply_pair_subset(image_pairs, recorded_subset(context.instance, backbone))
    pairs = pairs[pairs["evaluated"].astype(bool)]
    scores = stats.backbone_scores(
        predictions, four_choice_predictions, correspondences, keypoints, image_set, pairs, soco.protocol()
    )
    scores = scores[scores["metric"].isin(WATCHED)]
    values = stats.intervals(scores, n_boot=200, seed=soco.seed).set_index("metric")["value"].to_dict()
    root = soco.storage_root
    history.write_snapshot(root, FAMILY, backbone, version, task_hash, scores, values)
    snaps = history.snapshots(root, FAMILY, backbone)
    prev = history.previous_snapshot(snaps, version, task_hash)
    verdicts, message = {}, ""
    if prev is not None:
        old = history.snapshot_scores(root, FAMILY, backbone, prev["data_version"])
        verdict = history.regression_test(scores, old, list(WATCHED), LEVEL, seed=soco.seed)
        verdicts[version] = verdict
        for s in snaps:
            if s["data_version"] == version:
                s["previous_data_version"] = prev["data_version"]
        message = history.regression_message(backbone, FAMILY, verdict, prev["data_version"], version)
    table = schemas.validate(
        history.history_table(snaps, verdicts, LEVEL), schemas.ModelHistorySchema, "model_history"
    )
    regressed = bool(message)
    current = table[table["data_version"] == version]
    figures = {
        r.metric: f"{r.value:.1f}"
        + ("" if pd.isna(r.delta) else f" ({r.delta:+.1f}, [{r.delta_ci_low:+.1f}, {r.delta_ci_high:+.1f}])")
        for r in current.itertuples()
    }
    yield dg.Output(
        table,
        metadata={
            "data_version": version,
            "previous_data_version": prev["data_version"] if prev else "",
            "snapshots": len(snaps),
            "regression": regressed,
            "message": message,
        },
    )
    yield dg.AssetCheckResult(
        check_name="no_regression",
        passed=not regressed,
        metadata={
            "compared_with": prev["data_version"] if prev else "nothing (no earlier data version)",
            "level": LEVEL,
            **figures,
            **({"regression": message} if regressed else {}),
        },
    )


@dg.asset_sensor(asset_key=dg.AssetKey("model_history"), minimum_interval_seconds=30)
def regression_sensor(context: dg.SensorEvaluationContext, asset_event: dg.EventLogEntry):
    """Report a regression found by `model_history`: a log line, and a POST to the URL in
    $SOCO_REGRESSION_WEBHOOK when that is set (the URL is never logged)."""
    from soco_pipeline.evaluation.history import WEBHOOK_ENV, notify

    meta = asset_event.asset_materialization.metadata if asset_event.asset_materialization else {}
    flagged = meta.get("regression")
    if flagged is None or not flagged.value:
        return dg.SkipReason("no regression in the latest model_history materialization")
    outcome = notify(str(meta["message"].value), os.environ.get(WEBHOOK_ENV))
    context.log.warning(f"regression reported ({outcome}): {meta['message'].value}")
    return dg.SkipReason(f"regression reported: {outcome}")
