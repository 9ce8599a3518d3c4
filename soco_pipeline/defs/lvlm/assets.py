"""The lvlm group (SOCO-LVLM): one `lvlms` partition per spec file in assets/lvlms/."""

import dagster as dg
import pandas as pd

from soco_pipeline.defs.shared.automation import ON_CHANGE, observation
from soco_pipeline.defs.shared.checks import (
    TableResult,
    fan_in_table,
    observable_source,
    partition_rows,
    partition_table,
    table_asset,
)
from soco_pipeline.defs.shared.partitions import lvlms_partitions
from soco_pipeline.defs.shared.resources import SocoSettings
from soco_pipeline.defs.shared.run_configs import LvlmRunConfig, recorded_lvlm_subset
from soco_pipeline.defs.shared.specs import lvlm_spec_for, lvlm_spec_path  # noqa: F401 - kept importable here
from soco_pipeline.lvlm.schemas import LvlmAnswerSchema, LvlmItemSchema

GROUP = "lvlm"


@observable_source(
    group_name=GROUP,
    partitions_def=lvlms_partitions,
    description="An LVLM's spec file (assets/lvlms/<name>.yaml); data version: its normalised spec's hash.",
)
def lvlm_spec(context: dg.AssetExecutionContext, soco: SocoSettings) -> dg.DataVersionsByPartition:
    """Observed by the LVLM spec sensor on a change, and by lvlm_answers when it reads it."""
    from soco_pipeline.lvlm.specs import scan_specs

    current, _ = scan_specs(soco.lvlms_dir)
    known = set(context.instance.get_dynamic_partitions(lvlms_partitions.name))
    return dg.DataVersionsByPartition({name: h for name, h in current.items() if name in known})


@table_asset(
    schema=LvlmItemSchema,
    group_name=GROUP,
    automation_condition=ON_CHANGE,
    kinds={"pandas"},
    code_version="1",
)
def lvlm_items(
    context: dg.AssetExecutionContext,
    soco: SocoSettings,
    four_choice: pd.DataFrame,
    image_pairs: pd.DataFrame,
    keypoints: pd.DataFrame,
    descriptions: pd.DataFrame,
    image_set: pd.DataFrame,
) -> TableResult:
    """SOCO-LVLM questions: four-choice items x settings x 4 option rotations, marked images rendered once."""
    from soco_pipeline.lvlm.items import build_items

    proto = soco.lvlm_protocol()
    tables = (four_choice, image_pairs, keypoints, descriptions, image_set)
    items = build_items(*tables, proto, soco.lvlm_images_root, seed=soco.seed)
    per_setting = items.groupby("setting").size().to_dict() if len(items) else {}
    return TableResult(
        items,
        {
            "rows": len(items),
            "items": int(items["g_index"].nunique()) if len(items) else 0,
            "protocol_hash": proto.version_hash(),
            **{f"rows/{k}": int(v) for k, v in per_setting.items()},
        },
    )


@partition_table(
    lvlms_partitions,
    schema=LvlmAnswerSchema,
    group_name=GROUP,
    deps=[lvlm_spec],
    pool="gpu",
    kinds={"python"},
    code_version="1",
)
def lvlm_answers(
    context: dg.AssetExecutionContext, soco: SocoSettings, config: LvlmRunConfig, lvlm_items: pd.DataFrame
) -> TableResult:
    """One model's answers: raw text, parsed letter (official parser), correctness, latency, attempts, error;
    cached by request hash, in the `gpu` pool (a local model must not run beside feature extraction)."""
    from soco_pipeline.evaluation.subsets import apply_item_subset
    from soco_pipeline.lvlm.backends import build_backend
    from soco_pipeline.lvlm.cache import AnswerCache
    from soco_pipeline.lvlm.run import run_model
    from soco_pipeline.lvlm.specs import spec_hash, spec_version
    from soco_pipeline.runtime.gpu_time import gpu_timer

    model = context.partition_key
    spec = lvlm_spec_for(soco, model)
    context.log_event(observation("lvlm_spec", spec_version(spec), model))
    rule = config.rule()  # a partial run (items_per_setting / item_ids) asks its subset only
    local = spec.backend == "transformers"  # the other backends are servers: no local GPU time
    with gpu_timer(getattr(spec, "device", "auto") if local else f"remote:{spec.backend}") as gpu:
        result = run_model(
            apply_item_subset(lvlm_items, rule),
            spec,
            build_backend(spec),
            AnswerCache(soco.lvlm_cache_root),
            log=context.log.info,
            warn=context.log.warning,
        )
    return TableResult(
        result.answers,
        {
            "rows": len(result.answers),
            "sent": result.sent,
            "cached": result.cached,
            "errors": result.errors,
            "subset": rule.to_json(),
            "partial": not rule.is_full,
            "backend": spec.backend,
            "model": spec.model,
            "spec_hash": spec_hash(spec),
            **gpu.metadata(),
        },
    )


@partition_table(lvlms_partitions, group_name=GROUP, kinds={"pandas"}, code_version="3")
def lvlm_metrics(
    context: dg.AssetExecutionContext, soco: SocoSettings, lvlm_answers: pd.DataFrame
) -> TableResult:
    """Average and circular accuracy (0-100) per setting, overall, per super-category and category, CIs."""
    from soco_pipeline.lvlm.metrics import lvlm_metrics as compute

    df = compute(lvlm_answers, seed=soco.seed)
    df["subset"] = recorded_lvlm_subset(context.instance, context.partition_key).to_json()  # '' = all items
    top = df[df["scope"] == "all"]
    return TableResult(
        df,
        {"rows": len(df), **{f"{r.setting}/{r.metric}": round(float(r.value), 2) for r in top.itertuples()}},
    )


@fan_in_table(
    group_name=GROUP,
    partitioned=["lvlm_metrics"],
    optional=["leaderboard"],
    kinds={"pandas"},
    code_version="3",
)
def lvlm_leaderboard(
    context: dg.AssetExecutionContext,
    soco: SocoSettings,
    lvlm_metrics: dict[str, pd.DataFrame],
    leaderboard: pd.DataFrame | None,
) -> TableResult:
    """Every evaluated LVLM beside the reference figures, random baselines and the best backbone."""
    from soco_pipeline.analysis.leaderboard import leaderboard_markdown
    from soco_pipeline.backbones.spec_files import spec_names
    from soco_pipeline.evaluation.subsets import mark_partial, partial_display
    from soco_pipeline.lvlm.metrics import lvlm_leaderboard as build

    board = build(partition_rows(lvlm_metrics), leaderboard)
    board["spec_present"] = (board["kind"] != "evaluated") | board["model"].isin(spec_names(soco.lvlms_dir))
    models = context.instance.get_dynamic_partitions(lvlms_partitions.name)
    board = mark_partial(
        board, {m: recorded_lvlm_subset(context.instance, m).to_json() for m in models}, "model"
    )
    return TableResult(
        board,
        {
            "rows": len(board),
            "leaderboard": dg.MetadataValue.md(
                leaderboard_markdown(partial_display(board, "model").drop(columns=["source"]))
            ),
            "evaluated": int((board["kind"] == "evaluated").sum()),
        },
    )
