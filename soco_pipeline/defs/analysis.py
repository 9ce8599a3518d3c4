"""Analysis assets: global-feature metrics and the linear probe per backbone partition (from the feature
cache, no backbone runs), and the correlation study over the leaderboard, user tables and OmniProbe."""

import base64

import dagster as dg
import pandas as pd

from soco_pipeline.defs.backbone_assets import feature_store, protocol
from soco_pipeline.defs.partitions import backbones_partitions
from soco_pipeline.defs.resources import SocoSettings
from soco_pipeline.taxonomy import load_taxonomy

GROUP = "analysis"


class GlobalMetricsConfig(dg.Config):
    """Split and kNN settings of global_metrics (the seed is the SocoSettings seed)."""

    train_fraction: float = 0.5
    temperature: float = 0.07


@dg.asset(
    group_name=GROUP,
    partitions_def=backbones_partitions,
    automation_condition=dg.AutomationCondition.eager(),
    kinds={"pytorch"},
)
def global_metrics(
    context: dg.AssetExecutionContext, soco: SocoSettings, config: GlobalMetricsConfig,
    feature_manifest: pd.DataFrame, image_set: pd.DataFrame,
) -> pd.DataFrame:
    """kNN top-1/top-5 (k = 20, 100, 200; T = 0.07) and retrieval mAP of mean-pooled maps and class tokens,
    on the category and fine-grained (category within family) tracks; read from the feature cache."""
    from soco_pipeline.analysis.global_metrics import global_metrics as compute

    taxonomy = load_taxonomy()
    images = image_set[image_set["image_id"].isin(feature_manifest["image_id"])]
    df = compute(
        feature_store(soco, feature_manifest), images, context.partition_key, family_of=taxonomy.family,
        seed=soco.seed, train_fraction=config.train_fraction, temperature=config.temperature, log=context.log.info,
    )
    head = df[df["headline"]]
    context.add_output_metadata(
        {"rows": len(df), "features": ", ".join(sorted(set(df["feature"]))),
         **{f"{r.metric}{'' if pd.isna(r.k) else '@' + str(int(r.k))}": round(float(r.value), 2)
            for r in head.itertuples()}}
    )
    return df


class ProbeAssetConfig(dg.Config):
    """Linear-probe settings (the seed is the SocoSettings seed)."""

    train_fraction: float = 0.5
    steps: int = 200
    lr: float = 5e-3
    temperature: float = 0.07
    targets_per_step: int = 8


@dg.asset(group_name=GROUP, partitions_def=backbones_partitions, kinds={"pytorch"})
def probe_metrics(
    context: dg.AssetExecutionContext, soco: SocoSettings, config: ProbeAssetConfig,
    feature_manifest: pd.DataFrame, image_pairs: pd.DataFrame, correspondences: pd.DataFrame,
    keypoints: pd.DataFrame, image_set: pd.DataFrame,
) -> pd.DataFrame:
    """SOCO linear probe (soco_lp): a linear map trained with InfoNCE over the target grid on the train
    split's cached features, then CC/SOC/SOC-geo/Cross-SOC on the test pairs, beside zero-shot."""
    from soco_pipeline.analysis.linear_probe import ProbeConfig
    from soco_pipeline.analysis.linear_probe import probe_metrics as compute

    cfg = ProbeConfig(seed=soco.seed, train_fraction=config.train_fraction, steps=config.steps, lr=config.lr,
                      temperature=config.temperature, targets_per_step=config.targets_per_step)
    df = compute(
        feature_store(soco, feature_manifest), image_pairs, correspondences, keypoints, image_set, load_taxonomy(),
        protocol(soco), context.partition_key, cfg, log=context.log.info,
    )
    head = df[(df["alpha"] - 0.1).abs() < 1e-9]
    context.add_output_metadata(
        {"rows": len(df), **{f"{r.method}_{r.metric}": round(float(r.value), 2) for r in head.itertuples()}}
    )
    return df


class CorrelationConfig(dg.Config):
    """Where the correlation study reads its settings and tables (defaults: assets/)."""

    config_path: str | None = None  # assets/analysis.yaml
    seed: int | None = None  # overrides the config's seed
    n_resamples: int | None = None
    omniprobe_path: str | None = None  # assets/reference/omniprobe_results.csv
    downstream_dir: str | None = None  # assets/downstream
    name_map_path: str | None = None  # assets/reference/name_map.csv


@dg.asset(group_name=GROUP, deps=[dg.AssetKey("leaderboard")], kinds={"pandas", "duckdb"})
def correlation(
    context: dg.AssetExecutionContext, soco: SocoSettings, config: CorrelationConfig
) -> dg.MaterializeResult:
    """Pearson r / Spearman rho of each benchmark score (SOC, CC, ImageNet kNN; our leaderboard's columns)
    with each downstream task and metric, seeded 10,000-resample bootstrap CIs, paired delta r; the
    Fig. 4-like figure in the metadata and as PNG/SVG under <storage>/figures/. Writes
    <tables>/correlation.parquet itself and refreshes the DuckDB views (correlation, global_metrics,
    probe_metrics)."""
    from soco_pipeline.analysis import reference as ref
    from soco_pipeline.analysis.correlation import (
        ANALYSIS_CONFIG,
        correlation_table,
        headline_markdown,
        load_analysis_config,
    )
    from soco_pipeline.analysis.figure import save_correlation_figure
    from soco_pipeline.results_db import refresh_views
    from soco_pipeline.storage import exists, join, read_parquet, write_parquet_atomic

    settings = soco.settings()
    cfg = load_analysis_config(config.config_path or ANALYSIS_CONFIG, seed=config.seed,
                               n_resamples=config.n_resamples)
    board_path = join(settings.tables_root, "leaderboard.parquet")
    board = read_parquet(board_path) if exists(board_path) else None
    columns = [m for task, m in cfg.benchmarks.values() if task == ref.PIPELINE_TASK]
    map_path = config.name_map_path or str(ref.NAME_MAP)
    scores = ref.combine_scores(
        ref.load_omniprobe(config.omniprobe_path or ref.OMNIPROBE_TABLE),
        ref.load_downstream(config.downstream_dir or ref.DOWNSTREAM_DIR),
        ref.leaderboard_scores(board, columns, board_path) if board is not None else None,
        name_map=ref.load_name_map(map_path), map_source=map_path,
    )
    table = correlation_table(scores, cfg)
    meta: dict = {"rows": len(table), "models": int(scores["model"].nunique()), "seed": cfg.seed,
                  "n_resamples": cfg.n_resamples}
    for subset in cfg.subsets:
        stem = join(settings.storage_root, "figures", f"correlation_{subset}")
        try:
            figs = save_correlation_figure(table, stem, subset)
        except ValueError as e:  # no headline rows for this subset
            context.log.warning(str(e))
            continue
        img = base64.b64encode(figs["png"]).decode()
        meta[f"figure_{subset}"] = dg.MetadataValue.md(f"![correlation {subset}](data:image/png;base64,{img})")
        meta[f"table_{subset}"] = dg.MetadataValue.md(headline_markdown(table, subset))
        meta[f"png_{subset}"] = dg.MetadataValue.path(f"{stem}.png")
        meta[f"svg_{subset}"] = dg.MetadataValue.path(f"{stem}.svg")
    path = join(settings.tables_root, "correlation.parquet")
    write_parquet_atomic(table, path)
    meta["path"] = dg.MetadataValue.path(path)
    meta["views"] = ", ".join(refresh_views(settings.duckdb_path, settings.tables_root))
    return dg.MaterializeResult(metadata=meta)
