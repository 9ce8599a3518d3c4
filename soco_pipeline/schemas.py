"""The canonical tables every stage reads and writes (the contract between stages), as pandera schemas.
Coordinates are original image pixels, x right, y down, origin at the top-left pixel corner."""

from __future__ import annotations

import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series

LEVELS = ("intra", "cross")
SOURCES = ("imagenet3d", "animal3d", "soco")


class Table(pa.DataFrameModel):
    """A canonical table: columns outside its schema are dropped, values coerced to the declared types."""

    class Config:
        strict = "filter"
        coerce = True


class ImageSchema(Table):
    """`image_set`: one row per kept image (a single salient object)."""

    image_id: Series[str] = pa.Field(unique=True)
    category: Series[str]
    supercategory: Series[str]
    source: Series[str] = pa.Field(isin=list(SOURCES))
    uri: Series[str]
    width: Series[int] = pa.Field(gt=0)
    height: Series[int] = pa.Field(gt=0)
    bbox_l: Series[float] = pa.Field(ge=0)
    bbox_t: Series[float] = pa.Field(ge=0)
    bbox_r: Series[float]
    bbox_b: Series[float]
    azimuth: Series[float] = pa.Field(nullable=True)
    elevation: Series[float] = pa.Field(nullable=True)
    theta: Series[float] = pa.Field(nullable=True)
    distance: Series[float] = pa.Field(nullable=True)

    @pa.dataframe_check
    def bbox_inside_image(cls, df: pd.DataFrame) -> Series[bool]:  # noqa: N805
        return (
            (df.bbox_r <= df.width)
            & (df.bbox_b <= df.height)
            & (df.bbox_l < df.bbox_r)
            & (df.bbox_t < df.bbox_b)
        )


class RejectedImageSchema(Table):
    """`rejected_images`: every image the filters dropped, with the reason."""

    image_id: Series[str]
    category: Series[str]
    source: Series[str]
    uri: Series[str]
    reason: Series[str]


class RawClickSchema(Table):
    """Raw annotator clicks: one row per (image, keypoint, annotator)."""

    image_id: Series[str]
    keypoint: Series[str]
    annotator: Series[int] = pa.Field(ge=0)
    x: Series[float] = pa.Field(nullable=True)
    y: Series[float] = pa.Field(nullable=True)
    visible: Series[bool]


class KeypointSchema(Table):
    """`keypoints`: one row per (image, keypoint of its category); invisible ones may have NaN x/y."""

    image_id: Series[str]
    category: Series[str]
    keypoint: Series[str]
    concept: Series[str]
    x: Series[float] = pa.Field(nullable=True)
    y: Series[float] = pa.Field(nullable=True)
    visible: Series[bool]
    n_annotators: Series[int] = pa.Field(ge=0)
    spread: Series[float] = pa.Field(nullable=True, ge=0)

    @pa.dataframe_check
    def unique_keys(cls, df: pd.DataFrame) -> Series[bool]:  # noqa: N805
        return ~df.duplicated(["image_id", "keypoint"], keep=False)

    @pa.dataframe_check
    def visible_have_coordinates(cls, df: pd.DataFrame) -> Series[bool]:  # noqa: N805
        return ~df.visible | (df.x.notna() & df.y.notna())


class DescriptionSchema(Table):
    """`descriptions`: one language description per (category, keypoint)."""

    category: Series[str]
    keypoint: Series[str]
    concept: Series[str]
    description: Series[str] = pa.Field(str_length={"min_value": 1})

    @pa.dataframe_check
    def unique_keys(cls, df: pd.DataFrame) -> Series[bool]:  # noqa: N805
        return ~df.duplicated(["category", "keypoint"], keep=False)


class ImagePairSchema(Table):
    """`image_pairs`: intra- and cross-category pairs; pair_group is the target category."""

    pair_id: Series[str] = pa.Field(unique=True)
    level: Series[str] = pa.Field(isin=list(LEVELS))
    pair_group: Series[str]
    src_image: Series[str]
    trg_image: Series[str]
    src_category: Series[str]
    trg_category: Series[str]
    ancestor: Series[str]
    evaluated: Series[bool]
    # A release's train/test split (PairAnnotations/trainsplits/{train,test}); "" = in neither. Only
    # release imports carry it; zero-shot evaluation ignores it.
    split: Series[str] | None = pa.Field(isin=["", "train", "test"])

    @pa.dataframe_check
    def no_self_pairs(cls, df: pd.DataFrame) -> Series[bool]:  # noqa: N805
        return df.src_image != df.trg_image


class CorrespondenceSchema(Table):
    """`correspondences`: keypoint matches of every pair: 'soc' a keypoint visible in both images, 'cc' every
    visible source x target keypoint of a concept; `geo` (SOC-geo): n_candidates (visible targets) >= 2."""

    pair_id: Series[str]
    level: Series[str] = pa.Field(isin=list(LEVELS))
    kind: Series[str] = pa.Field(isin=["soc", "cc"])
    src_keypoint: Series[str]
    trg_keypoint: Series[str]
    concept: Series[str]
    geo: Series[bool]
    n_candidates: Series[int] = pa.Field(ge=1)


class FourChoiceSchema(Table):
    """`four_choice`: per evaluated SOC correspondence, four target keypoints A-D, one right."""

    pair_id: Series[str]
    src_keypoint: Series[str]
    option_a: Series[str]
    option_b: Series[str]
    option_c: Series[str]
    option_d: Series[str]
    answer: Series[int] = pa.Field(isin=[0, 1, 2, 3])


class FeatureManifestSchema(Table):
    """Feature cache manifest: one row per (backbone, image)."""

    backbone: Series[str]
    image_id: Series[str]
    channels: Series[int] = pa.Field(gt=0)
    grid_h: Series[int] = pa.Field(gt=0)
    grid_w: Series[int] = pa.Field(gt=0)
    input_size: Series[int] = pa.Field(gt=0)
    stride: Series[float] = pa.Field(gt=0)
    width: Series[int] = pa.Field(gt=0)
    height: Series[int] = pa.Field(gt=0)
    spec_hash: Series[str]
    path: Series[str]
    checksum: Series[str]


class PredictionSchema(Table):
    """`predictions[b]`: one row per (pair, source keypoint, mode), in target-image pixels; 'free': argmax
    over all target patches, 'geo': over patches holding same-concept target keypoints (SOC-geo)."""

    backbone: Series[str]
    pair_id: Series[str]
    src_keypoint: Series[str]
    mode: Series[str] = pa.Field(isin=["free", "geo"])
    pred_x: Series[float]
    pred_y: Series[float]
    similarity: Series[float]
    input_size: Series[int] = pa.Field(gt=0)


class PublishedComparisonSchema(pa.DataFrameModel):
    """`published_comparison`: our value beside the closest published one per model, family and metric."""

    model: Series[str]
    reference: Series[str]
    family: Series[str]
    metric: Series[str]
    ours: Series[float] = pa.Field(ge=0, le=100)
    published: Series[float]
    difference: Series[float]
    published_setting: Series[str]
    differing_knobs: Series[str]
    comparison: Series[str]
    source: Series[str] = pa.Field(str_length={"min_value": 1})

    class Config:
        strict = True
        coerce = True


class ModelHistorySchema(pa.DataFrameModel):
    """`model_history[b]`: each materialization of a model's scores, tested against the previous one."""

    model: Series[str]
    family: Series[str]
    data_version: Series[str] = pa.Field(str_length={"min_value": 1})
    materialized_at: Series[str]
    task_hash: Series[str]
    metric: Series[str]
    value: Series[float] = pa.Field(ge=0, le=100)
    previous_data_version: Series[str]
    delta: Series[float] = pa.Field(nullable=True)
    delta_ci_low: Series[float] = pa.Field(nullable=True)
    delta_ci_high: Series[float] = pa.Field(nullable=True)
    level: Series[float] = pa.Field(gt=0, lt=1)
    regression: Series[bool]

    class Config:
        strict = True
        coerce = True


def validate(df: pd.DataFrame, schema: type[pa.DataFrameModel], name: str) -> pd.DataFrame:
    """Validate a table lazily and raise one error listing every failing check, naming the table."""
    try:
        return schema.validate(df, lazy=True)
    except pa.errors.SchemaErrors as e:
        cases = e.failure_cases.head(20).to_string()
        raise ValueError(f"table {name!r} fails its schema {schema.__name__}:\n{cases}") from None
