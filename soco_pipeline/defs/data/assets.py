"""Data assets: the run's taxonomy; sources -> filtered image set -> aggregated keypoints -> descriptions."""

import dagster as dg
import pandas as pd

from soco_pipeline import schemas
from soco_pipeline.defs.shared.checks import TableResult, table_asset, table_multi_asset, table_out
from soco_pipeline.defs.shared.resources import SocoSettings
from soco_pipeline.defs.shared.specs import run_taxonomy
from soco_pipeline.taxonomy import load_taxonomy

GROUP = "data"


def source_config(soco: SocoSettings):
    """The core SourceConfig for the configured source (embedded by default)."""
    from soco_pipeline.sources import SourceConfig

    if soco.source == "embedded":
        cfg = SourceConfig.embedded(soco.embedded_root)
    elif soco.source == "raw":
        cfg = SourceConfig(
            imagenet3d_root=soco.imagenet3d_root,
            animal3d_root=soco.animal3d_root,
            clicks_path=soco.clicks_path,
        )
    elif soco.source == "soco_release":
        cfg = SourceConfig(soco_release_root=soco.soco_release_root)
    else:
        raise ValueError(f"unknown source {soco.source!r}: use embedded, raw or soco_release")
    if soco.categories:
        cfg = cfg.with_categories(soco.categories)
    return cfg


@dg.asset(group_name=GROUP, kinds={"python"}, code_version="1")
def embedded_dataset(context: dg.AssetExecutionContext, soco: SocoSettings) -> dg.MaterializeResult:
    """The generated default benchmark (ImageNet3D/Animal3D-style files, clicks, ground truth), once per
    (size, seed); nothing when the source is not `embedded`."""
    if soco.source != "embedded":
        return dg.MaterializeResult(metadata={"skipped": f"source is {soco.source}"})
    from soco_pipeline.data.embedded import ensure_dataset

    manifest = ensure_dataset(
        soco.embedded_root,
        size=soco.dataset_size,
        seed=soco.seed,
        categories=list(soco.categories) if soco.categories else None,
        images_per_category=soco.images_per_category,
    )
    counts = manifest["counts"]
    context.log.info(f"embedded data set at {soco.embedded_root}: {counts['kept']} kept images")
    return dg.MaterializeResult(
        metadata={
            "root": dg.MetadataValue.path(soco.embedded_root),
            **{k: counts[k] for k in ("images", "kept", "rejected", "keypoints", "clicks")},
            "categories": len(manifest["categories"]),
            "click_noise": dg.MetadataValue.json(manifest.get("click_noise", {})),
        },
    )


def taxonomy_problems(df: pd.DataFrame) -> list[str]:
    """Problems of a taxonomy table: it must rebuild into a Taxonomy and hold each (category, keypoint) once."""
    problems = []
    try:
        run_taxonomy(df)
    except ValueError as e:  # TaxonomyError
        problems.append(str(e))
    dup = df[df.duplicated(["category", "keypoint"], keep=False)]
    if len(dup):
        problems.append(
            f"{len(dup)} rows repeat a (category, keypoint): {dup[['category', 'keypoint']].head(5).values.tolist()}"
        )
    return problems


@table_asset(check=True, group_name=GROUP, deps=[embedded_dataset], kinds={"pandas"}, code_version="1")
def taxonomy(context: dg.AssetExecutionContext, soco: SocoSettings) -> TableResult:
    """The run's taxonomy, one row per (category, keypoint): assets/taxonomy.yaml, or a soco_release run's own
    (built from the release, with warnings and fallbacks for what it lacks)."""
    import warnings

    if soco.source == "soco_release":
        from soco_pipeline.sources import read_soco_release
        from soco_pipeline.sources.release_taxonomy import ReleaseWarning

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ReleaseWarning)
            tax = read_soco_release(soco.soco_release_root).taxonomy
        notes = [str(w.message) for w in caught if issubclass(w.category, ReleaseWarning)]
        for note in notes:
            context.log.warning(note)
    else:
        tax, notes = load_taxonomy(), []
    df = tax.to_table()
    return TableResult(
        df,
        metadata={
            "rows": len(df),
            **{
                plural: int(df[c].nunique())
                for c, plural in [
                    ("category", "categories"),
                    ("keypoint", "keypoints"),
                    ("concept", "concepts"),
                    ("supercategory", "supercategories"),
                ]
            },
            "source": tax.source,
            "warnings": dg.MetadataValue.md("\n".join(f"- {n}" for n in notes) or "none"),
        },
        problems=taxonomy_problems(df),
    )


@table_asset(group_name=GROUP, deps=[embedded_dataset], kinds={"pandas"}, code_version="1")
def source_images(
    context: dg.AssetExecutionContext, soco: SocoSettings, taxonomy: pd.DataFrame
) -> TableResult:
    """Every candidate image of the configured source, before filtering."""
    from soco_pipeline.sources import read_candidates

    df = read_candidates(source_config(soco), run_taxonomy(taxonomy))
    return TableResult(df, metadata={"rows": len(df)})


@table_asset(group_name=GROUP, deps=[embedded_dataset], kinds={"pandas"}, code_version="1")
def raw_keypoints(
    context: dg.AssetExecutionContext, soco: SocoSettings, taxonomy: pd.DataFrame
) -> TableResult:
    """Raw annotator clicks (three per keypoint) and Animal3D keypoints, before aggregation."""
    from soco_pipeline.sources import read_raw_keypoints

    return TableResult(read_raw_keypoints(source_config(soco), run_taxonomy(taxonomy)))


@table_multi_asset(
    group_name=GROUP,
    outs={
        "image_set": table_out(
            schemas.ImageSchema,
            "The filtered image set: one salient, large object per image.",
            code_version="1",
        ),
        "rejected_images": table_out(
            schemas.RejectedImageSchema, "Every image the filters dropped, with the reason.", code_version="1"
        ),
    },
)
def image_set_assets(
    context: dg.AssetExecutionContext, soco: SocoSettings, source_images: pd.DataFrame, taxonomy: pd.DataFrame
) -> dict[str, TableResult]:
    """Filter the candidates: valid pose/keypoint record, one salient object, good status, large enough."""
    from soco_pipeline.data.imageset import build_image_set

    kept, rejected = build_image_set(source_images, source_config(soco), run_taxonomy(taxonomy))
    reasons = rejected["reason"].value_counts().to_dict() if len(rejected) else {}
    return {
        "image_set": TableResult(kept, {"rows": len(kept), "categories": int(kept.category.nunique())}),
        "rejected_images": TableResult(
            rejected, {"rows": len(rejected), **{f"reason/{k}": int(v) for k, v in reasons.items()}}
        ),
    }


@table_asset(schema=schemas.KeypointSchema, group_name=GROUP, kinds={"pandas"}, code_version="1")
def keypoints(
    context: dg.AssetExecutionContext,
    soco: SocoSettings,
    raw_keypoints: pd.DataFrame,
    image_set: pd.DataFrame,
    taxonomy: pd.DataFrame,
) -> TableResult:
    """Aggregated keypoints: outlier clicks dropped, median of the rest, majority-vote visibility."""
    from soco_pipeline.data.keypoints import aggregate_keypoints

    kps, stats = aggregate_keypoints(raw_keypoints, image_set, run_taxonomy(taxonomy), source_config(soco))
    meta = {"rows": len(kps), "visible": int(kps.visible.sum())}
    meta.update({k: float(v) if isinstance(v, float) else v for k, v in stats.items()})
    return TableResult(kps, meta, related={"image_set": image_set})


@table_asset(schema=schemas.DescriptionSchema, group_name=GROUP, kinds={"pandas"}, code_version="1")
def descriptions(
    context: dg.AssetExecutionContext, image_set: pd.DataFrame, taxonomy: pd.DataFrame
) -> TableResult:
    """One language description per (category, keypoint), e.g. 'the center point of the front left wheel of a bus'."""
    from soco_pipeline.data.descriptions import build_descriptions, load_templates

    df = build_descriptions(run_taxonomy(taxonomy), load_templates())
    df = df[df.category.isin(image_set.category.unique())].reset_index(drop=True)
    return TableResult(df, {"rows": len(df), "example": df.description.iloc[0] if len(df) else ""})
