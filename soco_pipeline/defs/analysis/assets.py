"""Analysis assets: global-feature metrics and the linear probe per backbone, and the correlation study."""

import base64

import dagster as dg
import pandas as pd

from soco_pipeline.defs.shared.checks import TableResult, fan_in_table, partition_table
from soco_pipeline.defs.shared.partitions import backbones_partitions
from soco_pipeline.defs.shared.resources import SocoSettings
from soco_pipeline.defs.shared.specs import feature_store, run_taxonomy

GROUP = "analysis"


class GlobalMetricsConfig(dg.Config):
    """Split and kNN settings of global_metrics (the seed is the SocoSettings seed)."""

    train_fraction: float = 0.5
    temperature: float = 0.07


# code version 2: the `global` kind
@partition_table(backbones_partitions, group_name=GROUP, kinds={"pytorch"}, code_version="2")
def global_metrics(
    context: dg.AssetExecutionContext,
    soco: SocoSettings,
    config: GlobalMetricsConfig,
    feature_manifest: pd.DataFrame,
    global_feature_manifest: pd.DataFrame,
    image_set: pd.DataFrame,
    taxonomy: pd.DataFrame,
) -> TableResult:
    """kNN top-1/top-5 and retrieval mAP of pooled maps, class tokens and global features, from the cache."""
    from soco_pipeline.analysis.global_metrics import global_metrics as compute
    from soco_pipeline.features import read_global, resolve_folder

    images = image_set[
        image_set["image_id"].isin(feature_manifest["image_id"])
        & image_set["image_id"].isin(global_feature_manifest["image_id"])
    ]
    df = compute(
        feature_store(soco, feature_manifest),
        images,
        context.partition_key,
        family_of=run_taxonomy(taxonomy).family,
        seed=soco.seed,
        **config.model_dump(),  # train_fraction, temperature
        log=context.log.info,
        global_features=read_global(
            resolve_folder(global_feature_manifest.folder.iloc[0], soco.features_root), images.image_id
        ),
    )
    head = df[df["headline"]]
    return TableResult(
        df,
        {
            "rows": len(df),
            "features": ", ".join(sorted(set(df["feature"]))),
            **{
                f"{r.metric}{'' if pd.isna(r.k) else '@' + str(int(r.k))}": round(float(r.value), 2)
                for r in head.itertuples()
            },
        },
    )


class ProbeAssetConfig(dg.Config):
    """Linear-probe settings (the seed is the SocoSettings seed)."""

    train_fraction: float = 0.5
    steps: int = 200
    lr: float = 5e-3
    temperature: float = 0.07
    targets_per_step: int = 8


@partition_table(
    backbones_partitions,
    group_name=GROUP,
    deps=[dg.AssetKey("evaluation_protocol")],
    kinds={"pytorch"},
    code_version="1",
    automation_condition=None,
)
def probe_metrics(
    context: dg.AssetExecutionContext,
    soco: SocoSettings,
    config: ProbeAssetConfig,
    feature_manifest: pd.DataFrame,
    image_pairs: pd.DataFrame,
    correspondences: pd.DataFrame,
    keypoints: pd.DataFrame,
    image_set: pd.DataFrame,
    taxonomy: pd.DataFrame,
) -> TableResult:
    """SOCO linear probe (soco_lp): a linear map trained with InfoNCE over the target grid on the train
    split's cached features, then CC/SOC/SOC-geo/Cross-SOC on the test pairs, beside zero-shot."""
    from soco_pipeline.analysis.linear_probe import ProbeConfig
    from soco_pipeline.analysis.linear_probe import probe_metrics as compute

    cfg = ProbeConfig(seed=soco.seed, **config.model_dump())  # ProbeAssetConfig's fields are ProbeConfig's
    protocol = soco.protocol()
    store, tax = feature_store(soco, feature_manifest), run_taxonomy(taxonomy)
    pairs = (image_pairs, correspondences, keypoints, image_set)
    df = compute(store, *pairs, tax, protocol, context.partition_key, cfg, log=context.log.info)
    head = df[(df["alpha"] - protocol.headline_alpha).abs() < 1e-9]
    return TableResult(
        df,
        {"rows": len(df), **{f"{r.method}_{r.metric}": round(float(r.value), 2) for r in head.itertuples()}},
    )


class CorrelationConfig(dg.Config):
    """Where the correlation study reads its settings and tables (defaults: assets/)."""

    config_path: str | None = None  # assets/analysis.yaml
    seed: int | None = None  # overrides the config's seed
    n_resamples: int | None = None
    omniprobe_path: str | None = None  # assets/reference/omniprobe_results.csv
    downstream_dir: str | None = None  # assets/downstream
    name_map_path: str | None = None  # assets/reference/name_map.csv


@fan_in_table(
    group_name=GROUP,
    optional=["leaderboard", "fgbmk_leaderboard"],
    kinds={"pandas"},
    code_version="3",  # 3: the inputs_sha column, stored rows and figures reused
    automation_condition=None,
)
def correlation(
    context: dg.AssetExecutionContext,
    soco: SocoSettings,
    config: CorrelationConfig,
    leaderboard: pd.DataFrame | None,
    fgbmk_leaderboard: pd.DataFrame | None,
) -> TableResult:
    """Pearson r / Spearman rho of each benchmark score with each downstream metric, bootstrap CIs, Fig. 4."""
    from soco_pipeline.analysis import reference as ref
    from soco_pipeline.analysis.correlation import (
        ANALYSIS_CONFIG,
        correlation_table,
        headline_markdown,
        load_analysis_config,
        rows_reused,
        stored_correlation,
        task_markdown,
    )
    from soco_pipeline.analysis.figure import (
        FORMATS,
        file_sha,
        headline_sha,
        save_correlation_figure,
        stored_figure,
    )
    from soco_pipeline.tasks.fgbmk.leaderboard import correlation_scores

    cfg = load_analysis_config(
        config.config_path or ANALYSIS_CONFIG, seed=config.seed, n_resamples=config.n_resamples
    )
    board = leaderboard
    columns = [m for task, m in cfg.benchmarks.values() if task == ref.PIPELINE_TASK]
    map_path = config.name_map_path or str(ref.NAME_MAP)
    scores = ref.combine_scores(
        ref.load_omniprobe(config.omniprobe_path or ref.OMNIPROBE_TABLE),
        ref.load_downstream(config.downstream_dir or ref.DOWNSTREAM_DIR),
        ref.leaderboard_scores(board, columns, "the leaderboard asset") if board is not None else None,
        correlation_scores(fgbmk_leaderboard)
        if fgbmk_leaderboard is not None and len(fgbmk_leaderboard)
        else None,
        name_map=ref.load_name_map(map_path),
        map_source=map_path,
    )
    previous = stored_correlation(soco.tables_root, context.log.warning)
    table = correlation_table(scores, cfg, previous)
    last = context.instance.get_latest_materialization_event(context.asset_key)
    recorded = (
        {k: getattr(v, "value", v) for k, v in last.asset_materialization.metadata.items()} if last else {}
    )
    meta: dict = {
        "rows": len(table),
        # rows whose bootstrap inputs equal a stored row's: its interval, not resampled
        "rows_reused": rows_reused(table, previous),
        "models": int(scores["model"].nunique()),
        "seed": cfg.seed,
        "n_resamples": cfg.n_resamples,
        "table_fgbmk": dg.MetadataValue.md(task_markdown(table, "fgbmk")),
    }
    for subset in cfg.subsets:
        stem = f"{soco.figures_root}/correlation_{subset}"
        shown = headline_sha(table, subset)
        figs = None
        if recorded.get(f"figure_inputs_{subset}") == shown:  # the same headline rows: the same figure
            figs = stored_figure(stem, {fmt: recorded.get(f"{fmt}_sha256_{subset}", "") for fmt in FORMATS})
        try:
            figs = figs or save_correlation_figure(table, stem, subset)
        except ValueError as e:  # no headline rows for this subset
            context.log.warning(str(e))
            continue
        img = base64.b64encode(figs["png"]).decode()
        meta[f"figure_{subset}"] = dg.MetadataValue.md(
            f"![correlation {subset}](data:image/png;base64,{img})"
        )
        meta[f"table_{subset}"] = dg.MetadataValue.md(headline_markdown(table, subset))
        meta[f"figure_inputs_{subset}"] = shown
        for fmt in FORMATS:
            meta[f"{fmt}_{subset}"] = dg.MetadataValue.path(f"{stem}.{fmt}")
            meta[f"{fmt}_sha256_{subset}"] = file_sha(figs[fmt])
    return TableResult(table, meta)
