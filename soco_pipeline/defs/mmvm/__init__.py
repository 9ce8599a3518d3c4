"""MMVMBench object matching, the Dagster layer (declarations only; the domain core is tasks/mmvm)."""

import dagster as dg
import pandas as pd

from soco_pipeline.defs.shared.automation import EAGER
from soco_pipeline.defs.shared.checks import TableResult, TableSpec, table_out
from soco_pipeline.defs.shared.family import Family
from soco_pipeline.defs.shared.partitions import backbones_partitions, lvlms_partitions
from soco_pipeline.defs.shared.resources import SocoSettings
from soco_pipeline.defs.shared.specs import lvlm_spec_for
from soco_pipeline.tasks import mmvm
from soco_pipeline.tasks.mmvm import schemas


def not_applicable_predictions(model: str, reason: str, inputs) -> pd.DataFrame:
    """The family's not-applicable rows: one per item, no scores, the reason."""
    from soco_pipeline.tasks.mmvm.scoring import not_applicable

    return not_applicable(inputs["mmvm_items"], model, reason)


# 2: answers' extraction/judge columns, the recorded None rule
FAMILY = Family.of(mmvm.SPEC, "mmvm-2", needs=frozenset({"pixels", "dense_maps"}))
GROUP, CODE_VERSION = FAMILY.name, FAMILY.code_version


def _out(schema, description: str) -> tuple[TableSpec, dg.AssetOut]:
    return table_out(
        schema, description, automation_condition=EAGER, code_version=CODE_VERSION, kinds={"pandas"}
    )


@FAMILY.tables(
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
    """Two-frame scenes (SIMULATED): cases, unmarked frames with label maps, every object's attributes."""
    from soco_pipeline.tasks.mmvm.source import load_scenes

    cfg = FAMILY.config(soco)
    t = load_scenes(cfg, soco.task_root(GROUP, "generated"), log=context.log.warning)
    meta = {"config_hash": cfg.version_hash(), "simulated": cfg.source.kind == "generated"}
    return {
        f"mmvm_{name}": TableResult(t[name], {"rows": len(t[name]), **meta})
        for name in ("cases", "images", "objects")
    }


@FAMILY.table(schema=schemas.ItemSchema)
def mmvm_items(
    context: dg.AssetExecutionContext,
    soco: SocoSettings,
    mmvm_cases: pd.DataFrame,
    mmvm_objects: pd.DataFrame,
    mmvm_images: pd.DataFrame,
) -> TableResult:
    """The questions: one per (case, candidate count 4/8/12/all), with the published marks and options."""
    from soco_pipeline.tasks.mmvm.source import source_items

    cfg = FAMILY.config(soco)
    items = source_items(
        cfg,
        mmvm_cases,
        mmvm_objects,
        mmvm_images,
        soco.task_root(GROUP, "marked"),
        soco.task_root(GROUP, "generated"),
    )
    return TableResult(items, {"rows": len(items), "test": int((items["split"] == "test").sum())})


@FAMILY.features_table(schemas.FeatureSchema)
def mmvm_features(
    context: dg.AssetExecutionContext, soco: SocoSettings, spec, mmvm_images: pd.DataFrame
) -> TableResult:
    """The shared feature cache filled for the unmarked frames (one extraction per backbone and input
    policy, whichever family asked first); its manifest."""
    from soco_pipeline.tasks.mmvm.backbone_eval import extract_frames

    manifest = extract_frames(spec, mmvm_images, soco.features_root, soco.device, context.log.info)
    return TableResult(manifest, {"rows": len(manifest)})


@FAMILY.table(
    backbones_partitions,
    schema=schemas.PredictionSchema,
    not_applicable=not_applicable_predictions,
)
def mmvm_predictions(
    context: dg.AssetExecutionContext,
    soco: SocoSettings,
    spec,
    mmvm_features: pd.DataFrame,
    mmvm_items: pd.DataFrame,
    mmvm_cases: pd.DataFrame,
    mmvm_objects: pd.DataFrame,
    mmvm_images: pd.DataFrame,
) -> TableResult:
    """One backbone's answers: mask-pooled descriptors, cosine argmax, a None threshold by the config's
    none_rule; zero-shot and with the contrastive head."""
    from soco_pipeline.tasks.mmvm.backbone_eval import backbone_predictions

    tables = {"items": mmvm_items, "cases": mmvm_cases, "objects": mmvm_objects, "images": mmvm_images}
    pred, manifest = backbone_predictions(
        spec,
        tables,
        soco.features_root,
        device=soco.device,
        log=context.log.info,
        none_rule=FAMILY.config(soco).none_rule,
        manifest=mmvm_features,
    )
    return TableResult(
        pred,
        {
            "rows": len(pred),
            "status": str(pred["status"].iat[0]),
            "cached_maps": 0 if manifest is None else len(manifest),
        },
    )


@FAMILY.table(lvlms_partitions, schema=schemas.AnswerSchema, kinds={"python"}, pool="gpu")
def mmvm_answers(
    context: dg.AssetExecutionContext, soco: SocoSettings, mmvm_items: pd.DataFrame
) -> TableResult:
    """One LVLM's answers to the test items: raw text, parsed letter, extraction method (exact matching, or
    the config's judge), through the harness's cache and retries."""
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
        judge=judge_from_config(FAMILY.config(soco), cache),
        log=context.log.info,
    )
    return TableResult(rows, {"rows": len(rows), "errors": int((rows["error"] != "").sum())})


@FAMILY.table(backbones_partitions, schema=schemas.MetricSchema)
def mmvm_backbone_metrics(context: dg.AssetExecutionContext, mmvm_predictions: pd.DataFrame) -> TableResult:
    """Accuracy per method overall, per cue, per candidate count and per query presence (test split), each
    beside a random chooser's expectation."""
    from soco_pipeline.tasks.mmvm.metrics import method_metrics

    m = method_metrics(mmvm_predictions, "backbone")
    return TableResult(m, {"rows": len(m)})


@FAMILY.table(lvlms_partitions, schema=schemas.MetricSchema)
def mmvm_lvlm_metrics(context: dg.AssetExecutionContext, mmvm_answers: pd.DataFrame) -> TableResult:
    """An LVLM's accuracy overall, per cue, per candidate count and per query presence, beside chance."""
    from soco_pipeline.tasks.mmvm.metrics import method_metrics

    m = method_metrics(mmvm_answers, "lvlm")
    return TableResult(m, {"rows": len(m)})


@FAMILY.board(partitioned=["mmvm_backbone_metrics", "mmvm_lvlm_metrics"], schema=schemas.LeaderboardSchema)
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
