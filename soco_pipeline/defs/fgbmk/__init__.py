"""FG-BMK (fine-grained recognition), the Dagster layer: declarations only; the work is soco_pipeline.tasks.fgbmk.

fgbmk_items (the simulated set, or a user's FG-BMK layout later) -> fgbmk_questions;
backbones[b]: fgbmk_global_features[b] (pool gpu) -> fgbmk_metrics[b], fgbmk_robustness[b] (pool gpu);
lvlms[m]: fgbmk_answers[m] -> fgbmk_lvlm_metrics[m]; all -> fgbmk_leaderboard.
The config is assets/fgbmk.yaml (or $SOCO_FGBMK_CONFIG) at the scale of SocoSettings.dataset_size.
"""

import os

import dagster as dg
import pandas as pd

from soco_pipeline.defs.backbones.assets import spec_for
from soco_pipeline.defs.lvlm.assets import lvlm_spec_for
from soco_pipeline.defs.shared.checks import schema_check
from soco_pipeline.defs.shared.partitions import backbones_partitions, lvlms_partitions
from soco_pipeline.defs.shared.resources import SocoSettings

GROUP = "fgbmk"
EAGER = dg.AutomationCondition.eager()


def fgbmk_config(soco: SocoSettings):
    """The FG-BMK config: $SOCO_FGBMK_CONFIG or assets/fgbmk.yaml, at scale demo | full (dataset_size)."""
    from soco_pipeline.tasks.fgbmk.config import load_config

    scale = soco.dataset_size if soco.dataset_size in ("demo", "full") else None
    return load_config(os.environ.get("SOCO_FGBMK_CONFIG") or None, scale)


def fgbmk_root(soco: SocoSettings, cfg) -> str:
    """Where the embedded fine-grained set lives: <storage>/fgbmk/embedded/<scale>-seed<seed>."""
    from soco_pipeline.storage import join

    return join(soco.storage_root, "fgbmk", "embedded", f"{cfg.scale}-seed{cfg.seed}")


# No automation condition on the root: it is materialized on request (the demo, the UI), so that the eager
# daemon never starts a family nobody asked for; everything below it then follows eagerly.
@dg.asset(group_name=GROUP, kinds={"pandas"},
          check_specs=[dg.AssetCheckSpec("schema", asset="fgbmk_items", blocking=True)])
def fgbmk_items(context: dg.AssetExecutionContext, soco: SocoSettings):
    """The simulated fine-grained set (superclass -> class -> subclass, attributes), in FG-BMK's layout; or
    the config's `dataset` (a published machine-oriented folder)."""
    from soco_pipeline.tasks.fgbmk.embedded import ensure_embedded
    from soco_pipeline.tasks.fgbmk.readers import items_from_dataset, read_machine_dataset
    from soco_pipeline.tasks.fgbmk.schemas import FgbmkItemSchema

    cfg = fgbmk_config(soco)
    if cfg.dataset is not None:
        items = items_from_dataset(read_machine_dataset(cfg.dataset.folder, cfg.dataset.image_root))
        root = cfg.dataset.folder
    else:
        subs = list(cfg.embedded.subclasses) if cfg.embedded.subclasses else None
        root = fgbmk_root(soco, cfg)
        items = ensure_embedded(root, cfg.embedded, cfg.seed, subs)
    yield dg.Output(items, metadata={"rows": len(items), "subclasses": int(items.subclass.nunique()),
                                     "root": root, "simulated": bool(items.simulated.all())})
    yield schema_check(items, FgbmkItemSchema, "fgbmk_items")


@dg.asset(group_name=GROUP, automation_condition=EAGER, kinds={"pandas"},
          check_specs=[dg.AssetCheckSpec("schema", asset="fgbmk_questions", blocking=True)])
def fgbmk_questions(context: dg.AssetExecutionContext, soco: SocoSettings, fgbmk_items: pd.DataFrame):
    """Choice / true-false / short-answer questions per level, attributes and knowledge bias; choice
    questions in every rotation (circular evaluation)."""
    from soco_pipeline.tasks.fgbmk.embedded import hierarchy
    from soco_pipeline.tasks.fgbmk.questions import build_questions, circular
    from soco_pipeline.tasks.fgbmk.schemas import FgbmkQuestionSchema

    cfg = fgbmk_config(soco)
    h = hierarchy(subclasses=sorted(fgbmk_items.subclass.unique()))
    q = circular(build_questions(fgbmk_items, h, cfg.questions, cfg.seed), cfg.questions)
    yield dg.Output(q, metadata={"rows": len(q), **{f"rows/{k}": int(v) for k, v in q.task.value_counts().items()}})
    yield schema_check(q, FgbmkQuestionSchema, "fgbmk_questions")


def _extractor(soco: SocoSettings, backbone: str, cfg, items: pd.DataFrame):
    from soco_pipeline.tasks.fgbmk.global_features import build_extractor

    spec = spec_for(soco, backbone)
    return spec, build_extractor(spec, cfg.global_features, {"data_root": fgbmk_root(soco, cfg), "device": soco.device})


@dg.asset(group_name=GROUP, partitions_def=backbones_partitions, pool="gpu", automation_condition=EAGER,
          kinds={"pytorch"})
def fgbmk_global_features(context: dg.AssetExecutionContext, soco: SocoSettings,
                          fgbmk_items: pd.DataFrame) -> pd.DataFrame:
    """CLS of the last two blocks and the patch mean per image, cached beside the dense cache; the table
    lists each image's cache folder and the part sizes."""
    from soco_pipeline.tasks.fgbmk.global_features import extract_global

    cfg = fgbmk_config(soco)
    _spec, ex = _extractor(soco, context.partition_key, cfg, fgbmk_items)
    feats = extract_global(ex, fgbmk_items, soco.settings().features_root, cfg.global_features, context.log.info)
    folder = ex.cache_folder(soco.settings().features_root, cfg.global_features)
    context.add_output_metadata({"rows": len(feats), "folder": folder, "dims": str([feats.cls_prev.shape[1],
                                 feats.cls_last.shape[1], feats.patch_mean.shape[1]])})
    return pd.DataFrame({"backbone": context.partition_key, "image_id": feats.image_ids.astype(str),
                         "folder": folder, "dim_cls_prev": feats.cls_prev.shape[1],
                         "dim_cls_last": feats.cls_last.shape[1], "dim_patch_mean": feats.patch_mean.shape[1]})


@dg.asset(group_name=GROUP, partitions_def=backbones_partitions, automation_condition=EAGER, kinds={"pytorch"},
          check_specs=[dg.AssetCheckSpec("schema", asset="fgbmk_metrics", blocking=True)])
def fgbmk_metrics(context: dg.AssetExecutionContext, soco: SocoSettings, fgbmk_items: pd.DataFrame,
                  fgbmk_global_features: pd.DataFrame):
    """Linear-probe top-1/top-5 and retrieval recall@1/mAP at each level, across and within superclasses."""
    from soco_pipeline.tasks.fgbmk.global_features import read_global
    from soco_pipeline.tasks.fgbmk.machine_eval import evaluate_backbone
    from soco_pipeline.tasks.fgbmk.schemas import FgbmkMetricSchema

    cfg = fgbmk_config(soco)
    feats = read_global(fgbmk_global_features.folder.iloc[0], fgbmk_items.image_id)
    df, _ = evaluate_backbone(context.partition_key, feats, fgbmk_items, cfg, bool(fgbmk_items.simulated.all()))
    across = df[df.scope == "across"].set_index("level")
    yield dg.Output(df, metadata={"rows": len(df), **{f"top1/{lv}": round(float(v), 2)
                                                      for lv, v in across.top1.items()}})
    yield schema_check(df, FgbmkMetricSchema, "fgbmk_metrics")


@dg.asset(group_name=GROUP, partitions_def=backbones_partitions, pool="gpu", automation_condition=EAGER,
          kinds={"pytorch"}, check_specs=[dg.AssetCheckSpec("schema", asset="fgbmk_robustness", blocking=True)])
def fgbmk_robustness(context: dg.AssetExecutionContext, soco: SocoSettings, fgbmk_items: pd.DataFrame,
                     fgbmk_global_features: pd.DataFrame):
    """Probe accuracy under FGSM / PGD (L-inf eps/255) and Gaussian noise, fine (subclass) vs coarse level."""
    from soco_pipeline.tasks.fgbmk.robustness import robustness_for_backbone
    from soco_pipeline.tasks.fgbmk.schemas import FgbmkRobustnessSchema

    cfg = fgbmk_config(soco)
    spec, ex = _extractor(soco, context.partition_key, cfg, fgbmk_items)
    df = robustness_for_backbone(context.partition_key, ex, fgbmk_global_features.folder.iloc[0], fgbmk_items, cfg,
                                 reads_pixels=spec.kind != "oracle")
    yield dg.Output(df, metadata={"rows": len(df)})
    yield schema_check(df, FgbmkRobustnessSchema, "fgbmk_robustness")


@dg.asset(group_name=GROUP, partitions_def=lvlms_partitions, pool="gpu", automation_condition=EAGER,
          kinds={"python"}, check_specs=[dg.AssetCheckSpec("schema", asset="fgbmk_answers", blocking=True)])
def fgbmk_answers(context: dg.AssetExecutionContext, soco: SocoSettings, fgbmk_questions: pd.DataFrame):
    """One LVLM's answers to the FG-BMK questions, scored by the written-down rules (cached by request)."""
    from soco_pipeline.lvlm.backends import build_backend
    from soco_pipeline.lvlm.cache import AnswerCache
    from soco_pipeline.storage import join
    from soco_pipeline.tasks.fgbmk.answers import ask
    from soco_pipeline.tasks.fgbmk.schemas import FgbmkAnswerSchema

    spec = lvlm_spec_for(soco, context.partition_key)
    cache = AnswerCache(join(soco.settings().lvlm_root, "cache"))
    df = ask(fgbmk_questions, spec.name, build_backend(spec), cache, spec.generation(), context.log.info)
    yield dg.Output(df, metadata={"rows": len(df), "errors": int((df.error != "").sum())})
    yield schema_check(df, FgbmkAnswerSchema, "fgbmk_answers")


@dg.asset(group_name=GROUP, partitions_def=lvlms_partitions, automation_condition=EAGER, kinds={"pandas"})
def fgbmk_lvlm_metrics(context: dg.AssetExecutionContext, fgbmk_answers: pd.DataFrame) -> pd.DataFrame:
    """Accuracy per task/level/form, circular accuracy and the knowledge-bias spread of one LVLM."""
    from soco_pipeline.tasks.fgbmk.leaderboard import lvlm_metrics

    return lvlm_metrics(fgbmk_answers)


def _partition_tables(context, soco: SocoSettings, asset: str, partitions) -> pd.DataFrame:
    from soco_pipeline.storage import exists, read_parquet
    from soco_pipeline.tables import table_for

    frames = []
    for key in context.instance.get_dynamic_partitions(partitions.name):
        path = table_for(asset).path(soco.settings().tables_root, key)
        if exists(path):
            frames.append(read_parquet(path))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


@dg.asset(group_name=GROUP, deps=[fgbmk_metrics, fgbmk_robustness, fgbmk_lvlm_metrics], automation_condition=EAGER,
          kinds={"pandas"})
def fgbmk_leaderboard(context: dg.AssetExecutionContext, soco: SocoSettings) -> pd.DataFrame:
    """Every backbone (probe / retrieval per level, within vs across, robustness) and LVLM (accuracy per
    level, circular, knowledge-bias spread) evaluated so far."""
    from soco_pipeline.tasks.fgbmk.leaderboard import fgbmk_leaderboard as build

    board = build(_partition_tables(context, soco, "fgbmk_metrics", backbones_partitions),
                  _partition_tables(context, soco, "fgbmk_robustness", backbones_partitions),
                  _partition_tables(context, soco, "fgbmk_lvlm_metrics", lvlms_partitions))
    context.add_output_metadata({"rows": len(board), "leaderboard": dg.MetadataValue.md(
        board.to_markdown(index=False) if len(board) else "no results yet")})
    return board
