"""MMVMBench object matching, the Dagster layer (declarations only; the domain core is tasks/mmvm).

mmvm_cases / mmvm_images / mmvm_objects (one generation step) -> mmvm_items -> mmvm_predictions[b]
(backbones partitions, through the shared feature cache) and mmvm_answers[m] (lvlms partitions, through
the LVLM harness) -> mmvm_backbone_metrics[b] / mmvm_lvlm_metrics[m] -> mmvm_leaderboard. The data are
SIMULATED (the embedded renderer); every table says so in its data_source column.
"""

import dagster as dg
import pandas as pd

from soco_pipeline.defs.lvlm.assets import lvlm_spec_for
from soco_pipeline.defs.shared.checks import (
    TableResult,
    TableSpec,
    columns_of,
    fan_in_table,
    partition_table,
    table_asset,
    table_multi_asset,
)
from soco_pipeline.defs.shared.executors import GPU_STEP_TAGS
from soco_pipeline.defs.shared.partitions import backbones_partitions, lvlms_partitions
from soco_pipeline.defs.shared.resources import SocoSettings
from soco_pipeline.tasks.mmvm import schemas
from soco_pipeline.tasks.mmvm.config import MmvmConfig

GROUP = "mmvm"
EAGER = dg.AutomationCondition.eager()
CODE_VERSION = "mmvm-2"  # 2: answers' extraction/judge columns, the recorded None rule


def mmvm_config(soco: SocoSettings) -> MmvmConfig:
    """The family config (assets/mmvm.yaml unless the resource names another)."""
    from soco_pipeline.tasks.mmvm.config import load_config

    return load_config(soco.mmvm_config_path)


def _out(schema, description: str) -> tuple[TableSpec, dg.AssetOut]:
    return TableSpec(schema), dg.AssetOut(
        automation_condition=EAGER,
        code_version=CODE_VERSION,
        kinds={"pandas"},
        description=description,
        metadata=columns_of(schema),
    )


@table_multi_asset(
    group_name=GROUP,
    outs={
        "mmvm_cases": _out(
            schemas.CaseSchema, "Generated cases (SIMULATED): cue codes, query presence, candidate total."
        ),
        "mmvm_images": _out(
            schemas.ImageSchema, "The unmarked frames (feature-cache input) and their instance label maps."
        ),
        "mmvm_objects": _out(
            schemas.ObjectSchema,
            "Every object of every frame: role, identity and the attributes the cues compare.",
        ),
    },
)
def mmvm_scenes(context: dg.AssetExecutionContext, soco: SocoSettings) -> dict[str, TableResult]:
    """Two-frame scenes (SIMULATED): cases with their cue codes, the unmarked frames with label maps, and
    every object with the attributes the cues compare; the frames go under <storage>/mmvm/generated."""
    from soco_pipeline.tasks.mmvm.source import load_scenes

    cfg = mmvm_config(soco)
    t = load_scenes(cfg, soco.task_root(GROUP, "generated"), log=context.log.warning)
    meta = {"config_hash": cfg.version_hash(), "simulated": cfg.source.kind == "generated"}
    return {
        f"mmvm_{name}": TableResult(t[name], {"rows": len(t[name]), **meta})
        for name in ("cases", "images", "objects")
    }


@table_asset(
    schema=schemas.ItemSchema,
    group_name=GROUP,
    automation_condition=EAGER,
    code_version=CODE_VERSION,
    kinds={"pandas"},
)
def mmvm_items(
    context: dg.AssetExecutionContext,
    soco: SocoSettings,
    mmvm_cases: pd.DataFrame,
    mmvm_objects: pd.DataFrame,
    mmvm_images: pd.DataFrame,
) -> TableResult:
    """The questions: one per (case, candidate count 4/8/12/all), with the published marks and options (the
    marked frames go under <storage>/mmvm/marked)."""
    from soco_pipeline.tasks.mmvm.source import source_items

    cfg = mmvm_config(soco)
    items = source_items(
        cfg,
        mmvm_cases,
        mmvm_objects,
        mmvm_images,
        soco.task_root(GROUP, "marked"),
        soco.task_root(GROUP, "generated"),
    )
    return TableResult(items, {"rows": len(items), "test": int((items["split"] == "test").sum())})


def mmvm_table(partitions_def: dg.PartitionsDefinition, schema, kinds: set[str], **kwargs):
    """Decorator of a per-backbone or per-LVLM table of the family (eager, its code version, its schema)."""
    return partition_table(
        partitions_def,
        schema=schema,
        group_name=GROUP,
        automation_condition=EAGER,
        code_version=CODE_VERSION,
        kinds=kinds,
        **kwargs,
    )


@mmvm_table(backbones_partitions, schemas.PredictionSchema, {"pytorch"}, pool="gpu", op_tags=GPU_STEP_TAGS)
def mmvm_predictions(
    context: dg.AssetExecutionContext,
    soco: SocoSettings,
    mmvm_items: pd.DataFrame,
    mmvm_cases: pd.DataFrame,
    mmvm_objects: pd.DataFrame,
    mmvm_images: pd.DataFrame,
) -> TableResult:
    """One backbone's answers: mask-pooled descriptors from the shared feature cache, cosine argmax, a None
    threshold chosen by the config's none_rule; zero-shot and with the contrastive head. SOCO oracles: not
    applicable."""
    from soco_pipeline.defs.backbones.assets import spec_for
    from soco_pipeline.tasks.mmvm.backbone_eval import backbone_predictions

    spec = spec_for(soco, context.partition_key)
    tables = {"items": mmvm_items, "cases": mmvm_cases, "objects": mmvm_objects, "images": mmvm_images}
    pred, manifest = backbone_predictions(
        spec,
        tables,
        soco.features_root,
        device=soco.device,
        log=context.log.info,
        none_rule=mmvm_config(soco).none_rule,
    )
    return TableResult(
        pred,
        {
            "rows": len(pred),
            "status": str(pred["status"].iat[0]),
            "cached_maps": 0 if manifest is None else len(manifest),
        },
    )


@mmvm_table(lvlms_partitions, schemas.AnswerSchema, {"python"}, pool="gpu")
def mmvm_answers(
    context: dg.AssetExecutionContext, soco: SocoSettings, mmvm_items: pd.DataFrame
) -> TableResult:
    """One LVLM's answers to the test items (both marked frames and the question): raw text, parsed letter,
    extraction method (exact matching; the config's judge when it names one), through the harness's cache and
    retries."""
    from soco_pipeline.lvlm.backends import build_backend
    from soco_pipeline.lvlm.cache import AnswerCache
    from soco_pipeline.tasks.mmvm.answers import judge_from_config, run_lvlm

    spec = lvlm_spec_for(soco, context.partition_key)
    test = mmvm_items[mmvm_items["split"] == "test"]
    cache = AnswerCache(soco.lvlm_cache_root)
    rows = run_lvlm(
        test,
        spec,
        build_backend(spec),
        cache,
        judge=judge_from_config(mmvm_config(soco), cache),
        log=context.log.info,
    )
    return TableResult(rows, {"rows": len(rows), "errors": int((rows["error"] != "").sum())})


@mmvm_table(backbones_partitions, schemas.MetricSchema, {"pandas"})
def mmvm_backbone_metrics(context: dg.AssetExecutionContext, mmvm_predictions: pd.DataFrame) -> TableResult:
    """Accuracy per method overall, per cue, per candidate count and per query presence (test split), each
    beside a random chooser's expectation."""
    from soco_pipeline.tasks.mmvm.metrics import method_metrics

    m = method_metrics(mmvm_predictions, "backbone")
    return TableResult(m, {"rows": len(m)})


@mmvm_table(lvlms_partitions, schemas.MetricSchema, {"pandas"})
def mmvm_lvlm_metrics(context: dg.AssetExecutionContext, mmvm_answers: pd.DataFrame) -> TableResult:
    """An LVLM's accuracy overall, per cue, per candidate count and per query presence, beside chance."""
    from soco_pipeline.tasks.mmvm.metrics import method_metrics

    m = method_metrics(mmvm_answers, "lvlm")
    return TableResult(m, {"rows": len(m)})


@fan_in_table(
    group_name=GROUP,
    partitioned=["mmvm_backbone_metrics", "mmvm_lvlm_metrics"],
    code_version=CODE_VERSION,
    kinds={"pandas"},
)
def mmvm_leaderboard(
    context: dg.AssetExecutionContext,
    mmvm_backbone_metrics: dict[str, pd.DataFrame],
    mmvm_lvlm_metrics: dict[str, pd.DataFrame],
    mmvm_items: pd.DataFrame,
    mmvm_cases: pd.DataFrame,
    mmvm_objects: pd.DataFrame,
) -> TableResult:
    """Every backbone (zero-shot and contrastive head) and LVLM, plus the instance-identity oracle (a check:
    100), overall and per cue / candidate count / query presence, each with a random chooser's accuracy."""
    from soco_pipeline.analysis.leaderboard import leaderboard_markdown
    from soco_pipeline.tasks.mmvm.backbone_eval import oracle_predictions
    from soco_pipeline.tasks.mmvm.metrics import leaderboard, method_metrics

    oracle = oracle_predictions({"items": mmvm_items, "cases": mmvm_cases, "objects": mmvm_objects})
    frames = [method_metrics(oracle, "oracle"), *mmvm_backbone_metrics.values(), *mmvm_lvlm_metrics.values()]
    board = leaderboard(pd.concat(frames, ignore_index=True))
    source = str(mmvm_cases["data_source"].iat[0]) if len(mmvm_cases) else ""
    board.insert(0, "data_source", source)
    shown = board.drop(columns=["data_source", "reason", "none_rule"], errors="ignore")
    return TableResult(
        board,
        {
            "rows": len(board),
            "leaderboard": dg.MetadataValue.md(f"data: {source}\n\n{leaderboard_markdown(shown)}"),
        },
    )
