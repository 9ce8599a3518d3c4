"""FG-BMK (fine-grained recognition), the Dagster layer: declarations only; the work is tasks/fgbmk."""

import dagster as dg
import pandas as pd

from soco_pipeline.defs.shared.checks import TableResult, partition_rows
from soco_pipeline.defs.shared.family import Family
from soco_pipeline.defs.shared.launchers import StepLauncher
from soco_pipeline.defs.shared.partitions import backbones_partitions, lvlms_partitions
from soco_pipeline.defs.shared.resources import SocoSettings
from soco_pipeline.defs.shared.specs import lvlm_spec_for
from soco_pipeline.tasks import fgbmk
from soco_pipeline.tasks.fgbmk import schemas


def fgbmk_reads(spec, cfg) -> dict:
    """The spec fields FG-BMK reads: `input` only where a dense-only backbone runs at it."""
    from soco_pipeline.backbones.reads import computation
    from soco_pipeline.features.policy import global_reads

    return global_reads(computation(spec), spec.kind, cfg.global_features)


# 5: each accuracy's 95% CI. Global features from any kind (the oracles read the embedded set's part maps).
FAMILY = Family.of(fgbmk.SPEC, "fgbmk-5", needs=frozenset({"global_features"}), reads=fgbmk_reads)
GROUP, CODE_VERSION = FAMILY.name, FAMILY.code_version


def fgbmk_root(soco: SocoSettings, cfg) -> str:
    """Where the embedded fine-grained set lives: <storage>/fgbmk/embedded/<scale>-seed<seed>."""
    return soco.task_root(GROUP, "embedded", f"{cfg.scale}-seed{cfg.seed}")


# No automation condition on the root, so the eager daemon never starts a family nobody asked for.
@FAMILY.table(schema=schemas.FgbmkItemSchema, automation_condition=None)
def fgbmk_items(context: dg.AssetExecutionContext, soco: SocoSettings) -> TableResult:
    """The simulated fine-grained set in FG-BMK's layout, or the config's `dataset` (a published folder)."""
    from soco_pipeline.tasks.fgbmk.embedded import ensure_embedded
    from soco_pipeline.tasks.fgbmk.readers import items_from_dataset, read_machine_dataset

    cfg = FAMILY.config(soco)
    if cfg.dataset is not None:
        items = items_from_dataset(read_machine_dataset(cfg.dataset.folder, cfg.dataset.image_root))
        root = cfg.dataset.folder
    else:
        subs = list(cfg.embedded.subclasses) if cfg.embedded.subclasses else None
        root = fgbmk_root(soco, cfg)
        items = ensure_embedded(root, cfg.embedded, cfg.seed, subs)
    return TableResult(
        items,
        {
            "rows": len(items),
            "subclasses": int(items.subclass.nunique()),
            "root": root,
            "simulated": bool(items.simulated.all()),
        },
    )


@FAMILY.table(schema=schemas.FgbmkQuestionSchema)
def fgbmk_questions(
    context: dg.AssetExecutionContext, soco: SocoSettings, fgbmk_items: pd.DataFrame
) -> TableResult:
    """Choice / true-false / short-answer questions per level, attributes and knowledge bias; choice
    questions in every rotation (circular evaluation)."""
    from soco_pipeline.tasks.fgbmk.questions import questions_for

    q = questions_for(fgbmk_items, FAMILY.config(soco))
    return TableResult(q, {"rows": len(q), **{f"rows/{k}": int(v) for k, v in q.task.value_counts().items()}})


def _context(soco: SocoSettings, cfg) -> dict:
    return {"data_root": fgbmk_root(soco, cfg), "device": soco.device}


@FAMILY.table(backbones_partitions, schema=schemas.FgbmkGlobalFeatureSchema, kinds={"pytorch"}, pool="gpu")
def fgbmk_global_features(
    context: dg.AssetExecutionContext, soco: SocoSettings, spec, fgbmk_items: pd.DataFrame
) -> TableResult:
    """CLS of the last two blocks and the patch mean per image, from the shared cache's global output."""
    from soco_pipeline.features import cached_global

    cfg = FAMILY.config(soco)
    feats, folder = cached_global(
        spec, fgbmk_items, soco.features_root, cfg.global_features, _context(soco, cfg), context.log.info
    )
    # relative: a copied root reads its own
    table = feats.table(context.partition_key, folder, soco.features_root)
    return TableResult(
        table, {"rows": len(feats), "folder": folder, "dims": str(table.iloc[0, -3:].tolist())}
    )


@FAMILY.tables(
    {
        "fgbmk_metrics": FAMILY.partition_out(
            backbones_partitions,
            schemas.FgbmkMetricSchema,
            "Linear-probe top-1/top-5 and retrieval recall@1/mAP at each level, across and within superclasses.",
            kinds=("pytorch",),
        ),
        "fgbmk_probe_predictions": FAMILY.partition_out(
            backbones_partitions,
            schemas.FgbmkProbePredictionSchema,
            "The best probe head's class on every test image, per level across superclasses (the regression "
            "watch's per-sample outcomes; the mean of `correct` is fgbmk_metrics' top-1).",
        ),
    },
    partitions_def=backbones_partitions,
)
def fgbmk_metrics(
    context: dg.AssetExecutionContext,
    soco: SocoSettings,
    launcher: StepLauncher,
    fgbmk_items: pd.DataFrame,
    fgbmk_global_features: pd.DataFrame,
) -> dict[str, TableResult]:
    """Linear-probe top-1/top-5 and retrieval recall@1/mAP at each level, across and within superclasses, and
    the best probe head's prediction per test image; the training is the `fgbmk_probe` payload."""
    from soco_pipeline.features import resolve_folder

    result = launcher.run(
        context,
        "fgbmk_probe",
        {
            "backbone": context.partition_key,
            "items": fgbmk_items,
            "folder": resolve_folder(fgbmk_global_features.folder.iloc[0], soco.features_root),
            "config": FAMILY.config(soco).model_dump_json(),
        },
    )
    predictions = result.extra["fgbmk_probe_predictions"]
    meta = {**result.metadata, "launcher": launcher.resolved_kind()}
    return {
        "fgbmk_metrics": TableResult(result.table, meta),
        "fgbmk_probe_predictions": TableResult(predictions, {"rows": len(predictions)}),
    }


@FAMILY.table(backbones_partitions, schema=schemas.FgbmkRobustnessSchema, kinds={"pytorch"}, pool="gpu")
def fgbmk_robustness(
    context: dg.AssetExecutionContext,
    soco: SocoSettings,
    spec,
    fgbmk_items: pd.DataFrame,
    fgbmk_global_features: pd.DataFrame,
) -> TableResult:
    """Probe accuracy under FGSM / PGD (L-inf eps/255) and Gaussian noise, fine (subclass) vs coarse level."""
    from soco_pipeline.backbones.kinds import capabilities
    from soco_pipeline.features import resolve_folder
    from soco_pipeline.features.global_extractors import build_global_extractor
    from soco_pipeline.tasks.fgbmk.robustness import robustness_for_backbone

    cfg = FAMILY.config(soco)
    # the attacks differentiate through it
    ex = build_global_extractor(spec, cfg.global_features, _context(soco, cfg))
    df = robustness_for_backbone(
        context.partition_key,
        ex,
        resolve_folder(fgbmk_global_features.folder.iloc[0], soco.features_root),
        fgbmk_items,
        cfg,
        reads_pixels="pixels" in capabilities(spec.kind),
    )
    return TableResult(df, {"rows": len(df)})


@FAMILY.table(lvlms_partitions, schema=schemas.FgbmkAnswerSchema, kinds={"python"}, pool="gpu")
def fgbmk_answers(
    context: dg.AssetExecutionContext, soco: SocoSettings, fgbmk_questions: pd.DataFrame
) -> TableResult:
    """One LVLM's answers to the FG-BMK questions, scored by the written-down rules (cached by request)."""
    from soco_pipeline.lvlm.backends import build_backend
    from soco_pipeline.lvlm.cache import AnswerCache
    from soco_pipeline.tasks.fgbmk.answers import ask

    spec = lvlm_spec_for(soco, context.partition_key)
    cache = AnswerCache(soco.lvlm_cache_root)
    df = ask(fgbmk_questions, spec, build_backend(spec), cache, context.log.info)
    return TableResult(df, {"rows": len(df), "errors": int((df.error != "").sum())})


@FAMILY.table(lvlms_partitions, schema=schemas.FgbmkLvlmMetricSchema)
def fgbmk_lvlm_metrics(
    context: dg.AssetExecutionContext, soco: SocoSettings, fgbmk_answers: pd.DataFrame
) -> TableResult:
    """Accuracy per task/level/form (95% CI), circular accuracy and knowledge-bias spread of one LVLM."""
    from soco_pipeline.tasks.fgbmk.leaderboard import lvlm_metrics

    df = lvlm_metrics(fgbmk_answers, FAMILY.config(soco).seed)
    return TableResult(df, {"rows": len(df)})


@FAMILY.board(
    partitioned=["fgbmk_metrics", "fgbmk_robustness", "fgbmk_lvlm_metrics"],
    schema=schemas.FgbmkLeaderboardSchema,
)
def fgbmk_leaderboard(
    context: dg.AssetExecutionContext,
    fgbmk_metrics: dict[str, pd.DataFrame],
    fgbmk_robustness: dict[str, pd.DataFrame],
    fgbmk_lvlm_metrics: dict[str, pd.DataFrame],
) -> TableResult:
    """Every backbone (probe / retrieval per level, robustness) and LVLM (accuracy, circular, bias) so far."""
    from soco_pipeline.analysis.leaderboard import leaderboard_markdown
    from soco_pipeline.tasks.fgbmk.leaderboard import fgbmk_leaderboard as build

    board = build(
        partition_rows(fgbmk_metrics), partition_rows(fgbmk_robustness), partition_rows(fgbmk_lvlm_metrics)
    )
    return TableResult(
        board,
        {
            "rows": len(board),
            "leaderboard": dg.MetadataValue.md(
                leaderboard_markdown(board) if len(board) else "no results yet"
            ),
        },
    )


@FAMILY.board(
    partitioned=["fgbmk_metrics", "fgbmk_robustness", "fgbmk_lvlm_metrics"], schema=schemas.FgbmkFindingSchema
)
def fgbmk_findings(
    context: dg.AssetExecutionContext,
    soco: SocoSettings,
    fgbmk_metrics: dict[str, pd.DataFrame],
    fgbmk_robustness: dict[str, pd.DataFrame],
    fgbmk_lvlm_metrics: dict[str, pd.DataFrame],
) -> TableResult:
    """The paper's five findings on our tables: its figure, ours, whether it holds (or why untestable)."""
    from soco_pipeline.tasks.fgbmk.findings import check_findings, findings_markdown

    robustness, lvlm = partition_rows(fgbmk_robustness), partition_rows(fgbmk_lvlm_metrics)
    df = check_findings(
        partition_rows(fgbmk_metrics),
        robustness if len(robustness) else None,
        FAMILY.config(soco).findings,
        lvlm if len(lvlm) else None,
    )
    return TableResult(df, {"rows": len(df), "summary": dg.MetadataValue.md(findings_markdown(df))})
