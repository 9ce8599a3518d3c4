"""LVLM evaluation (SOCO-LVLM), the Dagster layer: one `lvlms` partition per spec file in assets/lvlms/.

lvlm_items (unpartitioned: the questions of every setting, images marked once) -> lvlm_answers[m] ->
lvlm_metrics[m] -> lvlm_leaderboard. The sensor treats the spec folder as the backbone sensor treats
assets/backbones/: a new file adds a partition (eager automation then evaluates that model only), a
changed file re-runs that model (answers already cached for unchanged requests are not asked again),
a deleted file keeps its results, marked `spec_present = false`. An empty folder is fine.
"""

from pathlib import Path

import dagster as dg
import pandas as pd

from soco_pipeline.defs.checks import schema_check
from soco_pipeline.defs.partitions import partition_spec_file
from soco_pipeline.defs.resources import SocoSettings
from soco_pipeline.defs.run_configs import LvlmRunConfig, recorded_lvlm_subset
from soco_pipeline.lvlm.schemas import LvlmAnswerSchema, LvlmItemSchema

GROUP = "lvlm"
EAGER = dg.AutomationCondition.eager()
LVLM_ASSETS = ["lvlm_answers", "lvlm_metrics"]

lvlms_partitions = dg.DynamicPartitionsDefinition(name="lvlms")


def lvlm_spec_for(soco: SocoSettings, model: str):
    """The spec of an `lvlms` partition (a clear error when its file is gone or malformed)."""
    from soco_pipeline.lvlm.specs import load_spec

    return load_spec(partition_spec_file(soco.lvlms_dir, model, "LVLM", "re-asked"))


def lvlm_protocol(soco: SocoSettings):
    """The SOCO-LVLM item protocol (assets/lvlm_protocol.yaml unless the resource names another)."""
    from soco_pipeline.lvlm.protocol import load_lvlm_protocol

    return load_lvlm_protocol(soco.lvlm_protocol_path)


@dg.asset(
    group_name=GROUP,
    automation_condition=EAGER,
    check_specs=[dg.AssetCheckSpec("schema", asset="lvlm_items", blocking=True)],
    kinds={"pandas"},
)
def lvlm_items(
    context: dg.AssetExecutionContext,
    soco: SocoSettings,
    four_choice: pd.DataFrame,
    image_pairs: pd.DataFrame,
    keypoints: pd.DataFrame,
    descriptions: pd.DataFrame,
    image_set: pd.DataFrame,
):
    """SOCO-LVLM questions: four-choice items x settings (vis, vis_desc, desc) x 4 rotations of the options,
    with the marked source/target images rendered once under storage/lvlm/images."""
    from soco_pipeline.lvlm.items import build_items
    from soco_pipeline.storage import join

    proto = lvlm_protocol(soco)
    settings = soco.settings()
    items = build_items(four_choice, image_pairs, keypoints, descriptions, image_set, proto,
                        join(settings.lvlm_root, "images"), seed=soco.seed)
    per_setting = items.groupby("setting").size().to_dict() if len(items) else {}
    yield dg.Output(items, metadata={
        "rows": len(items), "items": int(items["g_index"].nunique()) if len(items) else 0,
        "protocol_hash": proto.version_hash(), **{f"rows/{k}": int(v) for k, v in per_setting.items()},
    })
    yield schema_check(items, LvlmItemSchema, "lvlm_items")


@dg.asset(
    group_name=GROUP,
    partitions_def=lvlms_partitions,
    automation_condition=EAGER,
    pool="gpu",
    check_specs=[dg.AssetCheckSpec("schema", asset="lvlm_answers", blocking=True)],
    kinds={"python"},
)
def lvlm_answers(context: dg.AssetExecutionContext, soco: SocoSettings, config: LvlmRunConfig,
                 lvlm_items: pd.DataFrame):
    """One model's answers: raw text, parsed letter (official parser), correctness, latency, attempts, error.

    Cached by request hash: a rerun asks only what is not answered yet. `pool="gpu"` keeps a local
    model (or a server sharing the GPU) from running beside feature extraction.
    """
    from soco_pipeline.lvlm.backends import build_backend
    from soco_pipeline.lvlm.cache import AnswerCache
    from soco_pipeline.lvlm.run import run_model
    from soco_pipeline.lvlm.specs import spec_hash
    from soco_pipeline.storage import join

    spec = lvlm_spec_for(soco, context.partition_key)
    backend = build_backend(spec)
    cache = AnswerCache(join(soco.settings().lvlm_root, "cache"))
    from soco_pipeline.evaluation.subsets import apply_item_subset

    rule = config.rule()  # a partial run (items_per_setting / item_ids) asks its subset only
    result = run_model(apply_item_subset(lvlm_items, rule), spec, backend, cache, log=context.log.info)
    yield dg.Output(result.answers, metadata={
        "rows": len(result.answers), "sent": result.sent, "cached": result.cached, "errors": result.errors,
        "subset": rule.to_json(), "partial": not rule.is_full,
        "backend": spec.backend, "model": spec.model, "spec_hash": spec_hash(spec),
    })
    yield schema_check(result.answers, LvlmAnswerSchema, "lvlm_answers")


@dg.asset(group_name=GROUP, partitions_def=lvlms_partitions, automation_condition=EAGER, kinds={"pandas"})
def lvlm_metrics(context: dg.AssetExecutionContext, lvlm_answers: pd.DataFrame) -> pd.DataFrame:
    """Average and circular accuracy per setting, overall, per super-category and per category (0-100)."""
    from soco_pipeline.lvlm.metrics import lvlm_metrics as compute

    df = compute(lvlm_answers)
    df["subset"] = recorded_lvlm_subset(context.instance, context.partition_key).to_json()  # '' = all items
    top = df[df["scope"] == "all"]
    context.add_output_metadata(
        {"rows": len(df), **{f"{r.setting}/{r.metric}": round(float(r.value), 2) for r in top.itertuples()}}
    )
    return df


@dg.asset(group_name=GROUP, deps=[lvlm_metrics, dg.AssetKey("leaderboard")], automation_condition=EAGER,
          kinds={"duckdb"})
def lvlm_leaderboard(context: dg.AssetExecutionContext, soco: SocoSettings) -> dg.MaterializeResult:
    """Every evaluated LVLM beside the SOCO page's reference figures, the random baselines (25 / 0.39) and
    the best backbone's four-choice accuracy; then refreshes the DuckDB views (so it writes its own table,
    tables/lvlm_leaderboard.parquet, before the views are made)."""
    from soco_pipeline.analysis.leaderboard import leaderboard_markdown
    from soco_pipeline.lvlm.metrics import lvlm_leaderboard as build
    from soco_pipeline.results_db import refresh_views
    from soco_pipeline.storage import exists, join, read_parquet, write_parquet_atomic

    settings = soco.settings()
    frames = []
    for m in context.instance.get_dynamic_partitions(lvlms_partitions.name):
        path = join(settings.tables_root, "lvlm_metrics", f"{m}.parquet")
        if exists(path):
            frames.append(read_parquet(path))
    metrics = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    backbone_path = join(settings.tables_root, "leaderboard.parquet")
    backbones = read_parquet(backbone_path) if exists(backbone_path) else None
    board = build(metrics, backbones)
    present = {p.stem for p in Path(soco.lvlms_dir).glob("*.yaml")}
    board["spec_present"] = (board["kind"] != "evaluated") | board["model"].isin(present)
    from soco_pipeline.evaluation.subsets import mark_partial, partial_display

    models = context.instance.get_dynamic_partitions(lvlms_partitions.name)
    board = mark_partial(board, {m: recorded_lvlm_subset(context.instance, m).to_json() for m in models}, "model")
    path = join(settings.tables_root, "lvlm_leaderboard.parquet")
    write_parquet_atomic(board, path)
    views = refresh_views(settings.duckdb_path, settings.tables_root)
    return dg.MaterializeResult(metadata={
        "path": dg.MetadataValue.path(path), "rows": len(board),
        "leaderboard": dg.MetadataValue.md(leaderboard_markdown(partial_display(board, "model").drop(columns=["source"]))),
        "evaluated": int((board["kind"] == "evaluated").sum()), "views": ", ".join(views),
    })


lvlm_job = dg.define_asset_job(
    "evaluate_lvlm",
    selection=dg.AssetSelection.assets(*LVLM_ASSETS),
    description="Answers and metrics of one LVLM partition.",
)


@dg.sensor(job=lvlm_job, minimum_interval_seconds=15, default_status=dg.DefaultSensorStatus.RUNNING)
def lvlm_specs_sensor(context: dg.SensorEvaluationContext, soco: SocoSettings) -> dg.SensorResult:
    """Watch the LVLM spec folder: add a partition per new spec, re-run a model whose spec changed."""
    from soco_pipeline.defs.automation import spec_folder_result
    from soco_pipeline.lvlm.specs import scan_specs

    return spec_folder_result(context, Path(soco.lvlms_dir), scan_specs, lvlms_partitions, LVLM_ASSETS, "LVLM")
