"""Results you can trust (issue 26), the Dagster layer: subset run config, results records, the report page.

- `EvalRunConfig` is the run config of `predictions` / `four_choice_predictions`: `limit` pairs per
  category and/or explicit `pair_ids` (a partial run), and how many prediction panels to draw.
  The rule is recorded in the predictions' metadata; `metrics` reads it back from there, so a metrics
  run started by automation scores the same subset.
- `results_record[b]` / `lvlm_results_record[m]`: the results record JSON beside the metrics
  (storage/results/records/), validated against assets/results_record.schema.json.
- `results_report`: the static HTML page under storage/report/.
"""

import dagster as dg
import pandas as pd

from soco_pipeline.defs.lvlm import lvlms_partitions
from soco_pipeline.defs.partitions import backbones_partitions
from soco_pipeline.defs.resources import SocoSettings
from soco_pipeline.defs.run_configs import latest_materialization, recorded_lvlm_subset, recorded_subset

EAGER = dg.AutomationCondition.eager()
PER_BACKBONE_STAGES = ("feature_manifest", "predictions", "four_choice_predictions", "metrics")
PER_LVLM_STAGES = ("lvlm_answers", "lvlm_metrics")


def stage_timing(instance: dg.DagsterInstance, partition: str, stages) -> dict:
    """Wall time of each stage's latest step (Dagster's step stats); GPU time is not measured separately."""
    out = {}
    for asset in stages:
        rec = latest_materialization(instance, asset, partition)
        if rec is None:
            continue
        stats = instance.get_run_step_stats(rec.run_id, step_keys=[asset])
        wall = (stats[0].end_time - stats[0].start_time) if stats and stats[0].end_time else None
        out[asset] = {"wall_s": wall, "gpu_s": None, "run_id": rec.run_id}
    return {"stages": out, "source": "dagster step stats (latest materialization of each stage)"}


@dg.asset(group_name="evaluation", partitions_def=backbones_partitions, automation_condition=EAGER,
          deps=["metrics"], kinds={"json"})
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
) -> dg.MaterializeResult:
    """The backbone's results record: spec, protocol, input sizes, versions, timings, counts, CIs and hashes."""
    from soco_pipeline.backbones import spec_hash
    from soco_pipeline.defs.backbone_assets import matching_device, protocol, spec_for
    from soco_pipeline.evaluation.provenance import write_record
    from soco_pipeline.evaluation.records import backbone_record
    from soco_pipeline.storage import join

    backbone = context.partition_key
    spec = spec_for(soco, backbone)
    rule = recorded_subset(context.instance, backbone)
    tables = {"image_set": image_set, "keypoints": keypoints, "image_pairs": image_pairs,
              "correspondences": correspondences, "four_choice": four_choice, "feature_manifest": feature_manifest,
              "predictions": predictions, "four_choice_predictions": four_choice_predictions}
    rec = backbone_record(backbone=backbone, spec=spec, spec_hash=spec_hash(spec), protocol=protocol(soco),
                          tables=tables, rule=rule, device=matching_device(soco),
                          timing=stage_timing(context.instance, backbone, PER_BACKBONE_STAGES))
    path = write_record(rec, join(soco.settings().storage_root, "results", "records", f"{backbone}.json"))
    return dg.MaterializeResult(metadata={
        "path": dg.MetadataValue.path(path), "task_hash/pairs": rec["task_hashes"]["pairs"],
        "partial": rec["subset"]["partial"], "pairs_evaluated": rec["n-samples"]["pairs"]["evaluated"],
        "results": dg.MetadataValue.md(_results_md(rec)),
    })


def _results_md(rec: dict) -> str:
    rows = ["| metric | value | 95% CI (bootstrap over categories) | SE (cluster: image) |", "|---|---|---|---|"]
    for m, r in rec["results"].items():
        lo, hi = r["ci95_boot_category"]
        rows.append(f"| {m} | {_f(r['value'])} | [{_f(lo)}, {_f(hi)}] | {_f(r['se_cluster_image'])} |")
    return "\n".join(rows) + "\n"


def _f(v) -> str:
    return "" if v is None else f"{v:.1f}"


@dg.asset(group_name="lvlm", partitions_def=lvlms_partitions, automation_condition=EAGER, deps=["lvlm_metrics"],
          kinds={"json"})
def lvlm_results_record(
    context: dg.AssetExecutionContext, soco: SocoSettings, lvlm_items: pd.DataFrame, lvlm_answers: pd.DataFrame
) -> dg.MaterializeResult:
    """The LVLM's results record: spec, item protocol, versions, timings, counts, CIs and item hashes."""
    from soco_pipeline.defs.lvlm import lvlm_protocol, lvlm_spec_for
    from soco_pipeline.evaluation.provenance import write_record
    from soco_pipeline.evaluation.records import lvlm_record
    from soco_pipeline.lvlm.specs import spec_hash
    from soco_pipeline.storage import join

    model = context.partition_key
    spec = lvlm_spec_for(soco, model)
    rec = lvlm_record(model=model, spec=spec, spec_hash=spec_hash(spec), protocol=lvlm_protocol(soco),
                      items=lvlm_items, answers=lvlm_answers, rule=recorded_lvlm_subset(context.instance, model),
                      timing=stage_timing(context.instance, model, PER_LVLM_STAGES))
    path = write_record(rec, join(soco.settings().storage_root, "results", "records", "lvlm", f"{model}.json"))
    return dg.MaterializeResult(metadata={
        "path": dg.MetadataValue.path(path), "task_hash/lvlm_items": rec["task_hashes"]["lvlm_items"],
        "partial": rec["subset"]["partial"], "results": dg.MetadataValue.md(_results_md(rec)),
    })


@dg.asset(group_name="evaluation", deps=["leaderboard"], automation_condition=EAGER, kinds={"html"})
def results_report(context: dg.AssetExecutionContext, soco: SocoSettings) -> dg.MaterializeResult:
    """The static results page, storage/report/index.html: every leaderboard with CIs, the correlation figure,
    the prediction panels and LVLM examples (open it from file:// or with `soco report --serve`)."""
    import base64
    from pathlib import Path

    from soco_pipeline.report.page import build_report

    index = build_report(soco.settings())
    meta = {"path": dg.MetadataValue.path(index), "open": dg.MetadataValue.url(f"file://{index}")}
    for name in ("backbone_ci", "lvlm_ci"):  # the leaderboards' CIs as error bars, in the UI too
        png = Path(index).parent / f"{name}.png"
        if png.exists():
            meta[name] = dg.MetadataValue.md(f"![{name}](data:image/png;base64,{base64.b64encode(png.read_bytes()).decode()})")
    return dg.MaterializeResult(metadata=meta)


@dg.asset(group_name="pairs", automation_condition=EAGER, kinds={"pandas"})
def sample_hashes(
    context: dg.AssetExecutionContext,
    soco: SocoSettings,
    image_set: pd.DataFrame,
    keypoints: pd.DataFrame,
    image_pairs: pd.DataFrame,
    correspondences: pd.DataFrame,
) -> pd.DataFrame:
    """The input hash of every evaluated pair (image contents, keypoints, correspondences, the protocol's
    matching hash), as the results records carry them; the task hash over them in the metadata."""
    from soco_pipeline.defs.backbone_assets import protocol
    from soco_pipeline.evaluation.hashes import pair_hashes, task_hash

    ev = image_pairs[image_pairs["evaluated"].astype(bool)]
    df = pair_hashes(ev, correspondences, keypoints, image_set, protocol(soco).matching_hash())
    context.add_output_metadata({"rows": len(df), "task_hash/pairs": task_hash(df["pair_id"], df["pair_hash"])})
    return df
