"""MMVMBench object matching, the Dagster layer (declarations only; the domain core is tasks/mmvm).

mmvm_cases / mmvm_images / mmvm_objects (one generation step) -> mmvm_items -> mmvm_predictions[b]
(backbones partitions, through the shared feature cache) and mmvm_answers[m] (lvlms partitions, through
the LVLM harness) -> mmvm_backbone_metrics[b] / mmvm_lvlm_metrics[m] -> mmvm_leaderboard. The data are
SIMULATED (the embedded renderer); every table says so in its data_source column.
"""

import dagster as dg
import pandas as pd

from soco_pipeline.defs.lvlm.assets import lvlm_spec_for
from soco_pipeline.defs.shared.checks import schema_check
from soco_pipeline.defs.shared.executors import GPU_STEP_TAGS
from soco_pipeline.defs.shared.partitions import backbones_partitions, lvlms_partitions
from soco_pipeline.defs.shared.resources import SocoSettings
from soco_pipeline.tasks.mmvm import schemas
from soco_pipeline.tasks.mmvm.config import MmvmConfig

GROUP = "mmvm"
EAGER = dg.AutomationCondition.eager()
CODE_VERSION = "mmvm-1"
ALL_PARTITIONS = {"allow_missing_partitions": True}


def mmvm_config(soco: SocoSettings) -> MmvmConfig:
    """The family config (assets/mmvm.yaml unless the resource names another)."""
    from soco_pipeline.tasks.mmvm.config import load_config

    return load_config(soco.mmvm_config_path)


def mmvm_root(soco: SocoSettings) -> str:
    """Where the family's generated frames, label maps and marked frames live."""
    from soco_pipeline.storage import join

    return join(soco.storage_root, "mmvm")


def _partitions(loaded) -> list[pd.DataFrame]:
    """The tables of a partitioned input: the IO manager gives {partition: table}, or the table itself when
    only one partition exists."""
    if loaded is None:
        return []
    return list(loaded.values()) if isinstance(loaded, dict) else [loaded]


def _check(name: str) -> dg.AssetCheckSpec:
    return dg.AssetCheckSpec("schema", asset=name, blocking=True)


@dg.multi_asset(
    group_name=GROUP,
    outs={n: dg.AssetOut(automation_condition=EAGER, code_version=CODE_VERSION, kinds={"pandas"}, description=d)
          for n, d in (("mmvm_cases", "Generated cases (SIMULATED): cue codes, query presence, candidate total."),
                       ("mmvm_images", "The unmarked frames (feature-cache input) and their instance label maps."),
                       ("mmvm_objects", "Every object of every frame: role, identity and the attributes the cues "
                                        "compare."))},
    check_specs=[_check(n) for n in ("mmvm_cases", "mmvm_images", "mmvm_objects")],
)
def mmvm_scenes(context: dg.AssetExecutionContext, soco: SocoSettings):
    """Two-frame scenes (SIMULATED): cases with their cue codes, the unmarked frames with label maps, and
    every object with the attributes the cues compare."""
    from soco_pipeline.storage import join
    from soco_pipeline.tasks.mmvm.generator import generate

    cfg = mmvm_config(soco)
    t = generate(cfg, join(mmvm_root(soco), "generated"))
    meta = {"config_hash": cfg.version_hash(), "simulated": True}
    yield dg.Output(t["cases"], "mmvm_cases", metadata={"rows": len(t["cases"]), **meta})
    yield dg.Output(t["images"], "mmvm_images", metadata={"rows": len(t["images"]), **meta})
    yield dg.Output(t["objects"], "mmvm_objects", metadata={"rows": len(t["objects"]), **meta})
    yield schema_check(t["cases"], schemas.CaseSchema, "mmvm_cases")
    yield schema_check(t["images"], schemas.ImageSchema, "mmvm_images")
    yield schema_check(t["objects"], schemas.ObjectSchema, "mmvm_objects")


@dg.asset(group_name=GROUP, automation_condition=EAGER, code_version=CODE_VERSION, kinds={"pandas"},
          check_specs=[_check("mmvm_items")])
def mmvm_items(context: dg.AssetExecutionContext, soco: SocoSettings, mmvm_cases: pd.DataFrame,
               mmvm_objects: pd.DataFrame, mmvm_images: pd.DataFrame):
    """The questions: one per (case, candidate count 4/8/12/all), with the published marks and options."""
    from soco_pipeline.storage import join
    from soco_pipeline.tasks.mmvm.prompt import build_items

    items = build_items(mmvm_cases, mmvm_objects, mmvm_images, mmvm_config(soco), join(mmvm_root(soco), "marked"))
    yield dg.Output(items, metadata={"rows": len(items), "test": int((items["split"] == "test").sum())})
    yield schema_check(items, schemas.ItemSchema, "mmvm_items")


@dg.asset(group_name=GROUP, partitions_def=backbones_partitions, pool="gpu", op_tags=GPU_STEP_TAGS,
          automation_condition=EAGER, code_version=CODE_VERSION, kinds={"pytorch"},
          check_specs=[_check("mmvm_predictions")])
def mmvm_predictions(context: dg.AssetExecutionContext, soco: SocoSettings, mmvm_items: pd.DataFrame,
                     mmvm_cases: pd.DataFrame, mmvm_objects: pd.DataFrame, mmvm_images: pd.DataFrame):
    """One backbone's answers: mask-pooled descriptors from the shared feature cache, cosine argmax, a None
    threshold fitted on train; zero-shot and with the contrastive head. SOCO oracles: not applicable."""
    from soco_pipeline.defs.backbones.assets import spec_for
    from soco_pipeline.tasks.mmvm.backbone_eval import backbone_predictions

    spec = spec_for(soco, context.partition_key)
    tables = {"items": mmvm_items, "cases": mmvm_cases, "objects": mmvm_objects, "images": mmvm_images}
    pred, manifest = backbone_predictions(spec, tables, soco.settings().features_root, device=soco.device,
                                          log=context.log.info)
    yield dg.Output(pred, metadata={"rows": len(pred), "status": str(pred["status"].iat[0]),
                                    "cached_maps": 0 if manifest is None else len(manifest)})
    yield schema_check(pred, schemas.PredictionSchema, "mmvm_predictions")


@dg.asset(group_name=GROUP, partitions_def=lvlms_partitions, pool="gpu", automation_condition=EAGER,
          code_version=CODE_VERSION, kinds={"python"}, check_specs=[_check("mmvm_answers")])
def mmvm_answers(context: dg.AssetExecutionContext, soco: SocoSettings, mmvm_items: pd.DataFrame):
    """One LVLM's answers to the test items (both marked frames and the question): raw text, parsed letter,
    extraction method (exact matching; no judge by default), through the harness's cache and retries."""
    from soco_pipeline.lvlm.backends import build_backend
    from soco_pipeline.lvlm.cache import AnswerCache
    from soco_pipeline.storage import join
    from soco_pipeline.tasks.mmvm.answers import run_lvlm

    spec = lvlm_spec_for(soco, context.partition_key)
    test = mmvm_items[mmvm_items["split"] == "test"]
    rows = run_lvlm(test, spec, build_backend(spec), AnswerCache(join(soco.settings().lvlm_root, "cache")),
                    log=context.log.info)
    yield dg.Output(rows, metadata={"rows": len(rows), "errors": int((rows["error"] != "").sum())})
    yield schema_check(rows, schemas.AnswerSchema, "mmvm_answers")


@dg.asset(group_name=GROUP, partitions_def=backbones_partitions, automation_condition=EAGER,
          code_version=CODE_VERSION, kinds={"pandas"}, check_specs=[_check("mmvm_backbone_metrics")])
def mmvm_backbone_metrics(context: dg.AssetExecutionContext, mmvm_predictions: pd.DataFrame):
    """Accuracy per method overall, per cue, per candidate count and per query presence (test split), each
    beside a random chooser's expectation."""
    from soco_pipeline.tasks.mmvm.metrics import method_metrics

    m = method_metrics(mmvm_predictions, "backbone")
    yield dg.Output(m, metadata={"rows": len(m)})
    yield schema_check(m, schemas.MetricSchema, "mmvm_backbone_metrics")


@dg.asset(group_name=GROUP, partitions_def=lvlms_partitions, automation_condition=EAGER,
          code_version=CODE_VERSION, kinds={"pandas"}, check_specs=[_check("mmvm_lvlm_metrics")])
def mmvm_lvlm_metrics(context: dg.AssetExecutionContext, mmvm_answers: pd.DataFrame):
    """An LVLM's accuracy overall, per cue, per candidate count and per query presence, beside chance."""
    from soco_pipeline.tasks.mmvm.metrics import method_metrics

    m = method_metrics(mmvm_answers, "lvlm")
    yield dg.Output(m, metadata={"rows": len(m)})
    yield schema_check(m, schemas.MetricSchema, "mmvm_lvlm_metrics")


@dg.asset(
    group_name=GROUP, automation_condition=EAGER, code_version=CODE_VERSION, kinds={"pandas"},
    ins={"mmvm_backbone_metrics": dg.AssetIn(metadata=ALL_PARTITIONS),
         "mmvm_lvlm_metrics": dg.AssetIn(metadata=ALL_PARTITIONS)},
)
def mmvm_leaderboard(context: dg.AssetExecutionContext, mmvm_backbone_metrics, mmvm_lvlm_metrics,
                     mmvm_items: pd.DataFrame, mmvm_cases: pd.DataFrame, mmvm_objects: pd.DataFrame) -> pd.DataFrame:
    """Every backbone (zero-shot and contrastive head) and LVLM, plus the instance-identity oracle (a check:
    100), overall and per cue / candidate count / query presence, each with a random chooser's accuracy."""
    from soco_pipeline.tasks.mmvm.backbone_eval import oracle_predictions
    from soco_pipeline.tasks.mmvm.metrics import leaderboard, method_metrics

    oracle = oracle_predictions({"items": mmvm_items, "cases": mmvm_cases, "objects": mmvm_objects})
    frames = [method_metrics(oracle, "oracle"), *_partitions(mmvm_backbone_metrics), *_partitions(mmvm_lvlm_metrics)]
    board = leaderboard(pd.concat(frames, ignore_index=True))
    board.insert(0, "data_source", str(mmvm_cases["data_source"].iat[0]) if len(mmvm_cases) else "")
    context.add_output_metadata({"rows": len(board), "preview": dg.MetadataValue.md(
        board[["model", "method", "status", "accuracy", "random_expected"]].to_markdown(index=False))})
    return board
