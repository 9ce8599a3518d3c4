"""Per-backbone assets (dynamic partitions): feature cache -> predictions -> metrics; the leaderboard."""

from pathlib import Path

import dagster as dg
import pandas as pd
from dagster_duckdb import DuckDBResource

from soco_pipeline import schemas
from soco_pipeline.defs.checks import columns_of
from soco_pipeline.defs.data_assets import run_taxonomy
from soco_pipeline.defs.executors import GPU_STEP_TAGS
from soco_pipeline.defs.partitions import backbones_partitions, partition_spec_file
from soco_pipeline.defs.resources import SocoSettings
from soco_pipeline.defs.run_configs import EvalRunConfig, recorded_subset
from soco_pipeline.defs.versions import BACKBONE_CODE_VERSIONS, current_fingerprint

EAGER = dg.AutomationCondition.eager()


def spec_for(soco: SocoSettings, backbone: str):
    """Load the spec file of a backbone partition (a clear error if its file is gone or malformed)."""
    from soco_pipeline.backbones.validate import checked_spec

    return checked_spec(partition_spec_file(soco.backbones_dir, backbone, "backbone", "recomputed"))


def matching_device(soco: SocoSettings) -> str:
    """The torch device for matching: CUDA when present and asked for (auto), else CPU."""
    from soco_pipeline.device import resolve_device

    return str(resolve_device(soco.device))


def feature_store(soco: SocoSettings, manifest: pd.DataFrame):
    """Read access to a backbone's cached feature maps, as listed by its manifest."""
    from soco_pipeline.features import FeatureStore

    return FeatureStore.from_manifest(soco.settings().features_root, manifest)


def protocol(soco: SocoSettings):
    """The evaluation protocol config (assets/protocol.yaml unless the resource names another)."""
    from soco_pipeline.evaluation.protocol import load_protocol

    return load_protocol(soco.protocol_path)


@dg.asset(
    group_name="features",
    partitions_def=backbones_partitions,
    pool="gpu",
    op_tags=GPU_STEP_TAGS,
    automation_condition=EAGER,
    kinds={"pytorch"},
    code_version=BACKBONE_CODE_VERSIONS["feature_manifest"],
    metadata=columns_of(schemas.FeatureManifestSchema),
)
def feature_manifest(
    context: dg.AssetExecutionContext, soco: SocoSettings, image_set: pd.DataFrame
) -> dg.Output:
    """Dense features of every image for one backbone: fp16 C×h×w tensors in the cache, and their manifest.

    Resumable: images already in the cache for this spec are not recomputed.
    """
    from soco_pipeline.backbones import spec_hash
    from soco_pipeline.features import extract_features

    backbone = context.partition_key
    spec = spec_for(soco, backbone)
    settings = soco.settings()
    manifest = extract_features(
        spec,
        image_set,
        settings.features_root,
        context={"embedded_root": settings.embedded_root, "device": soco.device},
        log=context.log.info,
    )
    return dg.Output(
        manifest,
        metadata={"rows": len(manifest), "spec_hash": spec_hash(spec), "kind": spec.kind},
    )


@dg.asset(
    group_name="evaluation",
    partitions_def=backbones_partitions,
    automation_condition=EAGER,
    kinds={"pytorch"},
    code_version=BACKBONE_CODE_VERSIONS["predictions"],
    metadata=columns_of(schemas.PredictionSchema),
)
def predictions(
    context: dg.AssetExecutionContext,
    soco: SocoSettings,
    config: EvalRunConfig,
    feature_manifest: pd.DataFrame,
    image_pairs: pd.DataFrame,
    correspondences: pd.DataFrame,
    keypoints: pd.DataFrame,
    image_set: pd.DataFrame,
) -> pd.DataFrame:
    """Zero-shot nearest-neighbour predictions (free and SOC-geo) in target-image pixels."""
    from soco_pipeline.evaluation.matching import predict
    from soco_pipeline.evaluation.subsets import apply_pair_subset

    backbone = context.partition_key
    store = feature_store(soco, feature_manifest)
    rule = config.rule()  # a partial run (limit / pair_ids) predicts its subset only
    image_pairs = apply_pair_subset(image_pairs, rule)
    df = predict(
        image_pairs,
        correspondences,
        keypoints,
        image_set,
        store,
        protocol(soco),
        backbone,
        device=matching_device(soco),
    )
    meta = {"rows": len(df), "subset": rule.to_json(), "partial": not rule.is_full}
    if config.panels:  # what the model did: seeded panels under storage/report/panels/<backbone>/
        from soco_pipeline.report.panels import panels_markdown, sample_panels
        from soco_pipeline.storage import join

        out_dir = join(soco.settings().storage_root, "report", "panels", backbone)
        panels = sample_panels(image_pairs, correspondences, df, keypoints, image_set, store, protocol(soco),
                               config.panels, soco.seed, out_dir)
        meta["panels"] = dg.MetadataValue.md(panels_markdown(panels))
    context.add_output_metadata(meta)
    return df


@dg.asset(
    group_name="evaluation",
    partitions_def=backbones_partitions,
    automation_condition=EAGER,
    kinds={"pytorch"},
    code_version=BACKBONE_CODE_VERSIONS["four_choice_predictions"],
)
def four_choice_predictions(
    context: dg.AssetExecutionContext,
    soco: SocoSettings,
    config: EvalRunConfig,
    feature_manifest: pd.DataFrame,
    four_choice: pd.DataFrame,
    keypoints: pd.DataFrame,
    image_set: pd.DataFrame,
    image_pairs: pd.DataFrame,
) -> pd.DataFrame:
    """The backbone's pick among the four options of each item, for every rotation of the options."""
    from soco_pipeline.evaluation.four_choice_matching import predict_four_choice
    from soco_pipeline.evaluation.subsets import apply_pair_subset

    store = feature_store(soco, feature_manifest)
    sub = apply_pair_subset(image_pairs, config.rule())
    if not config.rule().is_full:  # a partial run asks the items of its pairs only
        four_choice = four_choice[four_choice["pair_id"].isin(sub.loc[sub["evaluated"].astype(bool), "pair_id"])]
    df = predict_four_choice(
        four_choice,
        keypoints,
        image_set,
        store,
        protocol(soco),
        context.partition_key,
        device=matching_device(soco),
        image_pairs=image_pairs,
    )
    context.add_output_metadata({"rows": len(df)})
    return df


@dg.asset(
    group_name="evaluation",
    partitions_def=backbones_partitions,
    automation_condition=EAGER,
    kinds={"pandas"},
    code_version=BACKBONE_CODE_VERSIONS["metrics"],
)
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
) -> pd.DataFrame:
    """PCK@α for CC, SOC, SOC-geo and Cross-SOC (official and per-keypoint reductions) and 4-choice accuracy."""
    from soco_pipeline.evaluation.metrics import compute_metrics
    from soco_pipeline.evaluation.stats import with_intervals
    from soco_pipeline.evaluation.subsets import apply_pair_subset

    rule = recorded_subset(context.instance, context.partition_key)  # the subset the predictions ran on
    image_pairs = apply_pair_subset(image_pairs, rule)
    df = compute_metrics(
        predictions,
        four_choice_predictions,
        correspondences,
        keypoints,
        image_set,
        image_pairs,
        run_taxonomy(taxonomy),
        protocol(soco),
    )
    df["subset"] = rule.to_json()  # '' = the full sample; the leaderboard marks the others partial
    # 95% CIs of the headline rows: bootstrap over categories, cluster-robust by target image
    df = with_intervals(df, predictions, four_choice_predictions, correspondences, keypoints, image_set,
                        image_pairs, protocol(soco), seed=soco.seed)
    fp = current_fingerprint(context.instance, soco, context.partition_key)
    at_headline = ((df.alpha - 0.1).abs() < 1e-9) | df.alpha.isna()  # 4-choice rows have no alpha
    headline = df[(df.scope == "all") & (df.reduction == "official") & at_headline]
    context.add_output_metadata(
        {
            "rows": len(df),
            "input_fingerprint": fp or "",
            "partial": not rule.is_full,
            **{r.metric: round(float(r.value), 2) for r in headline.itertuples()},
        }
    )
    return df


@dg.asset(
    group_name="evaluation", deps=[metrics], automation_condition=EAGER, kinds={"pandas"}, code_version="1"
)
def leaderboard(context: dg.AssetExecutionContext, soco: SocoSettings) -> pd.DataFrame:
    """One row per backbone: CC, SOC, SOC-geo, Cross-SOC, the drops, per-super-category SOC, 4-choice.

    Backbones whose spec file was deleted keep their row, marked `spec_present = false`.
    """
    import base64
    import tempfile

    from soco_pipeline.analysis.leaderboard import leaderboard as build_leaderboard
    from soco_pipeline.analysis.leaderboard import leaderboard_markdown, leaderboard_plot
    from soco_pipeline.evaluation.stats import add_interval_columns, ci_display
    from soco_pipeline.evaluation.subsets import mark_partial, partial_display, subsets_of
    from soco_pipeline.storage import exists, read_parquet
    from soco_pipeline.tables import table_for

    settings = soco.settings()
    known = context.instance.get_dynamic_partitions(backbones_partitions.name)

    def partitions_of(asset: str) -> list[pd.DataFrame]:
        paths = [table_for(asset).path(settings.tables_root, b) for b in known]
        return [read_parquet(p) for p in paths if exists(p)]

    frames = partitions_of("metrics")
    if not frames:
        raise RuntimeError("no metrics materialized yet: materialize metrics for at least one backbone")
    # analysis: knn_top1 / retrieval_map from the global_metrics partitions materialized so far
    global_frames = partitions_of("global_metrics")
    board = build_leaderboard(
        pd.concat(frames, ignore_index=True),
        global_metrics=pd.concat(global_frames, ignore_index=True) if global_frames else None,
    )
    present = {p.stem for p in Path(soco.backbones_dir).glob("*.yaml")}
    board["spec_present"] = board["backbone"].isin(present)
    all_metrics = pd.concat(frames, ignore_index=True)
    board = add_interval_columns(mark_partial(board, subsets_of(all_metrics)), all_metrics)
    md = leaderboard_markdown(ci_display(partial_display(board)))
    with tempfile.TemporaryDirectory() as tmp:
        png = Path(tmp) / "leaderboard.png"
        leaderboard_plot(board, png)
        img = base64.b64encode(png.read_bytes()).decode()
    context.add_output_metadata(
        {
            "leaderboard": dg.MetadataValue.md(md),
            "plot": dg.MetadataValue.md(f"![leaderboard](data:image/png;base64,{img})"),
            "backbones": len(board),
        }
    )
    return board


@dg.asset(
    group_name="evaluation", deps=[leaderboard], automation_condition=EAGER, kinds={"duckdb"}, code_version="1"
)
def results_database(
    context: dg.AssetExecutionContext, soco: SocoSettings, duckdb: DuckDBResource
) -> dg.MaterializeResult:
    """storage/results.duckdb: views over every result table, for DuckDB SQL (opened read-only by readers)."""
    from soco_pipeline.results_db import create_views
    from soco_pipeline.storage import is_remote

    settings = soco.settings()
    with duckdb.get_connection() as con:
        views = create_views(con, settings.tables_root)
    # Tables in an object store: no file, readers build these views over the bucket themselves.
    where = settings.tables_root if is_remote(settings.tables_root) else settings.duckdb_path
    return dg.MaterializeResult(metadata={"path": dg.MetadataValue.path(where), "views": ", ".join(views)})
