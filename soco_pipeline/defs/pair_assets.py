"""Pair assets: image pairs (intra, cross), keypoint-level correspondences, four-choice items."""

import dagster as dg
import pandas as pd
import pyarrow as pa

from soco_pipeline import schemas
from soco_pipeline.defs.checks import check_result, columns_of, publish_checked, schema_check
from soco_pipeline.defs.data_assets import run_taxonomy
from soco_pipeline.defs.resources import SocoSettings

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


@dg.asset(
    group_name=GROUP,
    check_specs=[dg.AssetCheckSpec("schema", asset="image_pairs", blocking=True)],
    kinds={"pandas"},
    code_version="1",
    metadata=columns_of(schemas.ImagePairSchema),
)
def image_pairs(
    context: dg.AssetExecutionContext,
    soco: SocoSettings,
    image_set: pd.DataFrame,
    keypoints: pd.DataFrame,
    taxonomy: pd.DataFrame,
):
    """Intra-category pairs and cross-category pairs between related categories; `evaluated` marks the sample."""
    from soco_pipeline.pairs import build_image_pairs, check_image_pairs

    tax = run_taxonomy(taxonomy)
    if soco.source == "soco_release":  # the official pairs, as released
        pairs = release_tables(soco, tax).image_pairs
    else:
        pairs = build_image_pairs(image_set, keypoints, tax, pair_config(soco))
    counts = pairs.groupby("level").agg(pairs=("pair_id", "size"), evaluated=("evaluated", "sum"))
    meta = {f"{lvl}/{col}": int(v) for lvl, row in counts.iterrows() for col, v in row.items()}
    yield from publish_checked(
        [dg.Output(pairs, metadata={"rows": len(pairs), **meta})],
        [schema_check(pairs, schemas.ImagePairSchema, "image_pairs", extra=check_image_pairs(pairs, tax, image_set))],
    )


@dg.asset(
    group_name=GROUP,
    check_specs=[dg.AssetCheckSpec("schema", asset="correspondences", blocking=True)],
    kinds={"pyarrow"},
    code_version="1",
    metadata=columns_of(schemas.CorrespondenceSchema),
)
def correspondences(
    context: dg.AssetExecutionContext,
    soco: SocoSettings,
    image_pairs: pd.DataFrame,
    keypoints: pd.DataFrame,
    taxonomy: pd.DataFrame,
):
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
    yield from publish_checked(
        [dg.Output(table, metadata={"rows": table.num_rows, "counts": dg.MetadataValue.md(counts.to_markdown(index=False))})],
        [check_result("correspondences", check_correspondences(table, image_pairs, keypoints, tax))],
    )


@dg.asset(
    group_name=GROUP,
    check_specs=[dg.AssetCheckSpec("schema", asset="four_choice", blocking=True)],
    kinds={"pandas"},
    code_version="1",
    metadata=columns_of(schemas.FourChoiceSchema),
)
def four_choice(
    context: dg.AssetExecutionContext,
    soco: SocoSettings,
    image_pairs: pd.DataFrame,
    correspondences: pd.DataFrame,
    keypoints: pd.DataFrame,
    taxonomy: pd.DataFrame,
):
    """Four-choice items: per evaluated SOC correspondence, the right target point and three distractors."""
    from soco_pipeline.pairs.four_choice import build_four_choice

    items = build_four_choice(
        image_pairs, correspondences, keypoints, seed=soco.seed, taxonomy=run_taxonomy(taxonomy)
    )
    yield from publish_checked(
        [dg.Output(items, metadata={"rows": len(items)})],
        [schema_check(items, schemas.FourChoiceSchema, "four_choice")],
    )
