"""Pair assets: image pairs (intra, cross), keypoint-level correspondences, four-choice items."""

import dagster as dg
import pandas as pd
import pyarrow as pa

from soco_pipeline import schemas
from soco_pipeline.defs.shared.checks import TableResult, table_asset
from soco_pipeline.defs.shared.resources import SocoSettings
from soco_pipeline.defs.shared.specs import run_taxonomy

GROUP = "pairs"


def pair_config(soco: SocoSettings):
    """The core PairConfig from the resource settings."""
    from soco_pipeline.pairs import PairConfig

    per_cat = "all" if soco.evaluate_all_pairs else soco.intra_pairs_per_category
    cross = "all" if soco.evaluate_all_pairs else soco.cross_pairs_per_category
    return PairConfig(seed=soco.seed, intra_per_category=per_cat, cross_per_category=cross)


def release_tables(soco: SocoSettings, taxonomy):
    """The canonical tables of the configured SOCO release, read against the run's taxonomy."""
    from soco_pipeline.sources import read_soco_release

    return read_soco_release(soco.soco_release_root, taxonomy)


@table_asset(schema=schemas.ImagePairSchema, group_name=GROUP, kinds={"pandas"}, code_version="1")
def image_pairs(
    context: dg.AssetExecutionContext,
    soco: SocoSettings,
    image_set: pd.DataFrame,
    keypoints: pd.DataFrame,
    taxonomy: pd.DataFrame,
) -> TableResult:
    """Intra-category pairs and cross-category pairs between related categories; `evaluated` marks the sample."""
    from soco_pipeline.pairs import build_image_pairs, check_image_pairs

    tax = run_taxonomy(taxonomy)
    if soco.source == "soco_release":  # the official pairs, as released
        pairs = release_tables(soco, tax).image_pairs
    else:
        pairs = build_image_pairs(image_set, keypoints, tax, pair_config(soco))
    counts = pairs.groupby("level").agg(pairs=("pair_id", "size"), evaluated=("evaluated", "sum"))
    meta = {f"{lvl}/{col}": int(v) for lvl, row in counts.iterrows() for col, v in row.items()}
    return TableResult(pairs, {"rows": len(pairs), **meta}, problems=check_image_pairs(pairs, tax, image_set))


@table_asset(
    schema=schemas.CorrespondenceSchema,
    validate=False,
    check=True,
    group_name=GROUP,
    kinds={"pyarrow"},
    code_version="1",
)
def correspondences(
    context: dg.AssetExecutionContext,
    soco: SocoSettings,
    image_pairs: pd.DataFrame,
    keypoints: pd.DataFrame,
    taxonomy: pd.DataFrame,
) -> TableResult:
    """Keypoint-level CC and SOC matches of every pair, with the SOC-geo flag."""
    from soco_pipeline.pairs import build_correspondences, check_correspondences, pair_counts

    tax = run_taxonomy(taxonomy)
    if soco.source == "soco_release":  # the release's semantic_overlap and concept_matches
        table = pa.Table.from_pandas(release_tables(soco, tax).correspondences, preserve_index=False)
    else:
        table = build_correspondences(image_pairs, keypoints, tax)
    counts = pair_counts(image_pairs, table)
    # The full table has millions of rows at full scale: the vectorized checks of the pairs module
    # replace a row-wise pandera validation (same rules: kinds, keypoints visible, counts, geo flags).
    return TableResult(
        table,
        {"rows": table.num_rows, "counts": dg.MetadataValue.md(counts.to_markdown(index=False))},
        problems=check_correspondences(table, image_pairs, keypoints, tax),
    )


@table_asset(schema=schemas.FourChoiceSchema, group_name=GROUP, kinds={"pandas"}, code_version="1")
def four_choice(
    context: dg.AssetExecutionContext,
    soco: SocoSettings,
    image_pairs: pd.DataFrame,
    correspondences: pd.DataFrame,
    keypoints: pd.DataFrame,
    taxonomy: pd.DataFrame,
) -> TableResult:
    """Four-choice items: per evaluated SOC correspondence, the right target point and three distractors."""
    from soco_pipeline.pairs.four_choice import build_four_choice

    items = build_four_choice(
        image_pairs, correspondences, keypoints, seed=soco.seed, taxonomy=run_taxonomy(taxonomy)
    )
    return TableResult(items, {"rows": len(items)})
