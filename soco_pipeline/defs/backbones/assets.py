"""The backbones group (a partition per spec file): spec -> features -> predictions -> metrics -> board."""

import dagster as dg
import pandas as pd

from soco_pipeline import schemas
from soco_pipeline.backbones.spec import FEATURE_CODE_VERSION
from soco_pipeline.defs.shared.automation import REEVALUATE_CRON, REEVALUATED, observation, observe_on_cron
from soco_pipeline.defs.shared.checks import (
    TableResult,
    fan_in_table,
    observable_source,
    partition_rows,
    partition_table,
)
from soco_pipeline.defs.shared.executors import GPU_STEP_TAGS
from soco_pipeline.defs.shared.launchers import StepLauncher
from soco_pipeline.defs.shared.partitions import backbones_partitions
from soco_pipeline.defs.shared.resources import SocoSettings
from soco_pipeline.defs.shared.run_configs import EvalRunConfig, recorded_subset
from soco_pipeline.defs.shared.specs import (  # noqa: F401 - spec_path, spec_version: kept importable here
    feature_store,
    global_policy,
    run_taxonomy,
    spec_for,
    spec_path,
    spec_version,
)
from soco_pipeline.features.policy import GLOBAL_CODE_VERSION
from soco_pipeline.tasks.core import SOCO

GROUP = "backbones"
# Dagster's code version of each per-backbone asset (the cache's spec hash uses FEATURE_CODE_VERSION too).
CODE_VERSIONS = {
    "feature_manifest": FEATURE_CODE_VERSION,
    "global_feature_manifest": GLOBAL_CODE_VERSION,
    "predictions": "2",
    "four_choice_predictions": "2",
    "metrics": "2",
}


def matching_device(soco: SocoSettings) -> str:
    """The torch device for matching: CUDA when present and asked for (auto), else CPU."""
    from soco_pipeline.runtime.device import resolve_device

    return str(resolve_device(soco.device))


def protocol_observation(soco: SocoSettings):
    """The run's protocol, and the observation of `evaluation_protocol` at its version (the reader logs it)."""
    protocol = soco.protocol()
    return protocol, observation("evaluation_protocol", protocol.version_hash())


@observable_source(
    group_name=GROUP,
    partitions_def=backbones_partitions,
    description="A backbone's spec file (assets/backbones/<name>.yaml); data version: its hash.",
)
def backbone_spec(context: dg.AssetExecutionContext, soco: SocoSettings) -> dg.DataVersionsByPartition:
    """Observed by the spec sensor on a change, and by feature_manifest when it reads it."""
    from soco_pipeline.backbones.spec_files import scan_specs

    current, _ = scan_specs(soco.backbones_dir)
    known = set(context.instance.get_dynamic_partitions(backbones_partitions.name))
    return dg.DataVersionsByPartition({name: h for name, h in current.items() if name in known})


@observable_source(
    group_name=GROUP,
    automation_condition=observe_on_cron(REEVALUATE_CRON),
    description="The evaluation protocol (assets/protocol.yaml); data version: its version_hash.",
)
def evaluation_protocol(soco: SocoSettings) -> dg.DataVersion:
    """Observed after each weekly re-evaluation tick (an edited file makes the backbones stale)."""
    return dg.DataVersion(soco.protocol().version_hash())


def cache_table(name: str, **kwargs):
    """Decorator of a per-backbone feature-cache output (gpu pool, reads the spec)."""
    return partition_table(
        backbones_partitions,
        group_name=GROUP,
        deps=[backbone_spec],
        pool="gpu",
        op_tags=GPU_STEP_TAGS,
        kinds={"pytorch"},
        code_version=CODE_VERSIONS[name],
        automation_condition=REEVALUATED,
        **kwargs,
    )


def _cache_payload(context, soco: SocoSettings, launcher: StepLauncher, payload: str, images, **extra):
    """Fill the feature cache for the partition's backbone with `payload`, through the step launcher."""
    spec_file = str(spec_path(soco, context.partition_key))
    # the BackboneContext: the embedded data root (oracles); the backbone runs on soco.device, or on the
    # spec's device when that is auto
    device = {"embedded_root": soco.embedded_root, "device": soco.device}
    inputs = {"spec_file": spec_file, "images": images, "cache_root": soco.features_root, **extra}
    result = launcher.run(context, payload, {**inputs, "backbone_context": device})
    return TableResult(result.table, {**result.metadata, "launcher": launcher.resolved_kind()})


@cache_table("feature_manifest", schema=schemas.FeatureManifestSchema, validate=False)
def feature_manifest(
    context: dg.AssetExecutionContext, soco: SocoSettings, launcher: StepLauncher, image_set: pd.DataFrame
) -> TableResult:
    """Dense features of every image for one backbone: fp16 C×h×w tensors in the cache, and their manifest."""
    backbone = context.partition_key
    context.log_event(observation("backbone_spec", spec_version(soco, backbone), backbone))
    return _cache_payload(context, soco, launcher, "features", image_set)


@cache_table("global_feature_manifest")
def global_feature_manifest(
    context: dg.AssetExecutionContext, soco: SocoSettings, launcher: StepLauncher, image_set: pd.DataFrame
) -> TableResult:
    """Global features of every image for one backbone at the run's input policy, for global_metrics; the
    stored rows of a model whose global features read the same (a copy with only its `layer` changed)."""
    from soco_pipeline.defs.shared.reuse import READS_VERSION, reused_tables

    policy, backbone = global_policy(soco), context.partition_key
    version = global_reads_version(context, soco, policy)
    reused = reused_tables(context, soco.tables_root, soco.features_root, version)
    if reused is not None:
        return reused["global_feature_manifest"]
    dumped = policy.model_dump(mode="json")
    result = _cache_payload(
        context, soco, launcher, "global_features", image_set, policy=dumped, backbone=backbone
    )
    result.metadata[READS_VERSION] = version
    return result


def global_reads_version(context: dg.AssetExecutionContext, soco: SocoSettings, policy) -> str:
    """The reads version of a backbone's global features (defs/shared/reuse.py): the spec fields the
    extraction reads under `policy` (features/policy.global_reads), the policy, code and library versions."""
    from soco_pipeline.backbones.reads import computation
    from soco_pipeline.defs.shared.reuse import step_reads_version
    from soco_pipeline.features.policy import global_reads

    spec = spec_for(soco, context.partition_key)
    return step_reads_version(
        context,
        global_reads(computation(spec), spec.kind, policy),
        table="global_feature_manifest",
        code=CODE_VERSIONS["global_feature_manifest"],
        policy=policy.cache_key(),
    )


def backbone_table(name: str, kinds: set[str] | None = None, **kwargs):
    """Decorator of a per-backbone evaluation table with the protocol as a dependency."""
    return partition_table(
        backbones_partitions,
        group_name=GROUP,
        deps=[evaluation_protocol],
        kinds=kinds or {"pytorch"},
        code_version=CODE_VERSIONS[name],
        automation_condition=REEVALUATED,
        **kwargs,
    )


@backbone_table("predictions", schema=schemas.PredictionSchema, validate=False)
def predictions(
    context: dg.AssetExecutionContext,
    soco: SocoSettings,
    config: EvalRunConfig,
    feature_manifest: pd.DataFrame,
    image_pairs: pd.DataFrame,
    correspondences: pd.DataFrame,
    keypoints: pd.DataFrame,
    image_set: pd.DataFrame,
) -> TableResult:
    """Zero-shot nearest-neighbour predictions (free and SOC-geo) in target-image pixels."""
    from soco_pipeline.evaluation.matching import predict
    from soco_pipeline.evaluation.subsets import apply_pair_subset
    from soco_pipeline.runtime.gpu_time import gpu_timer

    backbone = context.partition_key
    protocol, seen = protocol_observation(soco)
    context.log_event(seen)
    store = feature_store(soco, feature_manifest)
    rule = config.rule()  # a partial run (limit / pair_ids) predicts its subset only
    image_pairs = apply_pair_subset(image_pairs, rule)
    device = matching_device(soco)
    with gpu_timer(device) as gpu:
        df = predict(
            image_pairs, correspondences, keypoints, image_set, store, protocol, backbone, device=device
        )
    meta = {"rows": len(df), "subset": rule.to_json(), "partial": not rule.is_full, **gpu.metadata()}
    if config.panels:  # what the model did: seeded panels under storage/report/panels/<backbone>/
        from soco_pipeline.report.panels import panels_dir, panels_markdown, sample_panels

        tables, where = (image_pairs, correspondences, df, keypoints, image_set), panels_dir(soco, backbone)
        panels = sample_panels(*tables, store, protocol, config.panels, soco.seed, where)
        meta["panels"] = dg.MetadataValue.md(panels_markdown(panels))
    return TableResult(df, meta)


@backbone_table("four_choice_predictions")
def four_choice_predictions(
    context: dg.AssetExecutionContext,
    soco: SocoSettings,
    config: EvalRunConfig,
    feature_manifest: pd.DataFrame,
    four_choice: pd.DataFrame,
    keypoints: pd.DataFrame,
    image_set: pd.DataFrame,
    image_pairs: pd.DataFrame,
) -> TableResult:
    """The backbone's pick among the four options of each item, for every rotation of the options."""
    from soco_pipeline.evaluation.four_choice_matching import predict_four_choice
    from soco_pipeline.evaluation.subsets import apply_pair_subset
    from soco_pipeline.runtime.gpu_time import gpu_timer

    rule = config.rule()
    if not rule.is_full:  # a partial run asks the items of its pairs only
        sub = apply_pair_subset(image_pairs, rule)
        four_choice = four_choice[
            four_choice["pair_id"].isin(sub.loc[sub["evaluated"].astype(bool), "pair_id"])
        ]
    with gpu_timer(matching_device(soco)) as gpu:
        df = predict_four_choice(
            four_choice,
            keypoints,
            image_set,
            feature_store(soco, feature_manifest),
            soco.protocol(),
            context.partition_key,
            device=matching_device(soco),
            image_pairs=image_pairs,
        )
    return TableResult(df, {"rows": len(df), **gpu.metadata()})


@backbone_table("metrics", kinds={"pandas"})
def metrics(
    context: dg.AssetExecutionContext,
    soco: SocoSettings,
    predictions: pd.DataFrame,
    four_choice_predictions: pd.DataFrame,
    correspondences: pd.DataFrame,
    keypoints: pd.DataFrame,
    image_set: pd.DataFrame,
    image_pairs: pd.DataFrame,
    taxonomy: pd.DataFrame,
) -> TableResult:
    """PCK@α for CC, SOC, SOC-geo and Cross-SOC (official and per-keypoint reductions) and 4-choice accuracy."""
    from soco_pipeline.evaluation.metrics import compute_metrics
    from soco_pipeline.evaluation.stats import with_intervals
    from soco_pipeline.evaluation.subsets import apply_pair_subset

    protocol, seen = protocol_observation(soco)
    context.log_event(seen)
    rule = recorded_subset(context.instance, context.partition_key)  # the subset the predictions ran on
    image_pairs = apply_pair_subset(image_pairs, rule)
    tables = (predictions, four_choice_predictions, correspondences, keypoints, image_set, image_pairs)
    df = compute_metrics(*tables, run_taxonomy(taxonomy), protocol)
    df["subset"] = rule.to_json()  # '' = the full sample; the leaderboard marks the others partial
    # 95% CIs of the headline rows: bootstrap over categories, cluster-robust by target image
    df = with_intervals(df, *tables, protocol, seed=soco.seed)
    at_headline = ((df.alpha - protocol.headline_alpha).abs() < 1e-9) | df.alpha.isna()  # 4-choice: no alpha
    headline = df[(df.scope == "all") & (df.reduction == "official") & at_headline]
    return TableResult(
        df,
        {
            "rows": len(df),
            "headline_alpha": protocol.headline_alpha,
            "partial": not rule.is_full,
            **{r.metric: round(float(r.value), 2) for r in headline.itertuples()},
        },
    )


@fan_in_table(
    group_name=GROUP,
    partitioned=["metrics", "global_metrics", "published_gap"],
    kinds={"pandas"},
    code_version="5",
)
def leaderboard(
    context: dg.AssetExecutionContext,
    soco: SocoSettings,
    metrics: dict[str, pd.DataFrame],
    global_metrics: dict[str, pd.DataFrame],
    published_gap: dict[str, pd.DataFrame],
) -> TableResult:
    """One row per backbone: CC, SOC, SOC-geo, Cross-SOC, the drops, per-super-category SOC, 4-choice, kNN and
    mAP at the headline alpha; a deleted spec's row stays, marked `spec_present = false`."""
    import base64

    from soco_pipeline.analysis.leaderboard import leaderboard as build_leaderboard
    from soco_pipeline.analysis.leaderboard import leaderboard_markdown, leaderboard_png
    from soco_pipeline.backbones.spec_files import spec_names
    from soco_pipeline.evaluation.stats import add_interval_columns, ci_display
    from soco_pipeline.evaluation.subsets import mark_partial, partial_display, subsets_of
    from soco_pipeline.trust.published import (
        board_values,
        compare_to_published,
        load_published,
        published_columns,
        spec_references,
    )
    from soco_pipeline.trust.published_gap import with_gap_notes

    if not metrics:
        raise RuntimeError("no metrics materialized yet: materialize metrics for at least one backbone")
    protocol = soco.protocol()
    all_metrics = pd.concat(metrics.values(), ignore_index=True)
    board = build_leaderboard(
        all_metrics,
        alpha=protocol.headline_alpha,
        global_metrics=pd.concat(global_metrics.values(), ignore_index=True) if global_metrics else None,
    )
    board["spec_present"] = board["backbone"].isin(spec_names(soco.backbones_dir))
    board = add_interval_columns(mark_partial(board, subsets_of(all_metrics)), all_metrics)
    # the published SOC of the model a spec names (`reference:`), the difference and the knobs that differ
    refs, knobs = spec_references(soco.backbones_dir, protocol)
    comparison = compare_to_published(board_values(board, SOCO.name), refs, knobs, load_published())
    board = published_columns(board, comparison, SOCO.name)
    board = with_gap_notes(board, partition_rows({m: t for m, t in published_gap.items() if len(t)}))
    img = base64.b64encode(leaderboard_png(board, protocol.headline_alpha)).decode()
    return TableResult(
        board,
        {
            "leaderboard": dg.MetadataValue.md(leaderboard_markdown(ci_display(partial_display(board)))),
            "plot": dg.MetadataValue.md(f"![leaderboard](data:image/png;base64,{img})"),
            "backbones": len(board),
            "headline_alpha": protocol.headline_alpha,
        },
    )
