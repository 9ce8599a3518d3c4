"""The MMVM tables as pandera schemas (the contract of the family's assets; checked blocking)."""

from __future__ import annotations

import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series

from soco_pipeline.tasks.mmvm.cues import CUES

ROLES = ["query", "match", "distractor", "other", "landmark", "partner"]


class CaseSchema(pa.DataFrameModel):
    """`mmvm_cases`: one row per generated case (two frames)."""

    case_id: Series[str] = pa.Field(unique=True)
    split: Series[str] = pa.Field(isin=["train", "test"])
    match_type: Series[str]  # as written; an import keeps the released cell (cues.py parses it)
    query_absent: Series[bool]
    n_total: Series[int] = pa.Field(ge=1)
    frame0: Series[str] = pa.Field(str_startswith="mmvm/")
    frame1: Series[str] = pa.Field(str_startswith="mmvm/")
    data_source: Series[str] = pa.Field(str_matches=r"^(simulated|imported)")


class ImageSchema(pa.DataFrameModel):
    """`mmvm_images`: the unmarked frames (the feature cache's input) and their label maps."""

    image_id: Series[str] = pa.Field(unique=True, str_startswith="mmvm/")
    uri: Series[str]
    width: Series[int] = pa.Field(gt=0)
    height: Series[int] = pa.Field(gt=0)
    category: Series[str]
    labels_uri: Series[str]
    data_source: Series[str] = pa.Field(str_matches=r"^(simulated|imported)")


class ObjectSchema(pa.DataFrameModel):
    """`mmvm_objects`: one row per object of a frame (label = its value in the frame's label map)."""

    case_id: Series[str]
    frame: Series[int] = pa.Field(isin=[0, 1])
    label: Series[int] = pa.Field(ge=1, le=255)
    image_id: Series[str]
    identity: Series[str]
    role: Series[str] = pa.Field(isin=ROLES)
    candidate: Series[bool]
    area_px: Series[int] = pa.Field(ge=0)

    @pa.dataframe_check
    def labels_unique_per_frame(cls, df: pd.DataFrame) -> bool:  # noqa: N805
        """A label names one object of its frame."""
        return not df.duplicated(["image_id", "label"]).any()


class ItemSchema(pa.DataFrameModel):
    """`mmvm_items`: one question per (case, candidate count)."""

    item_id: Series[str] = pa.Field(unique=True)
    case_id: Series[str]
    split: Series[str] = pa.Field(isin=["train", "test"])
    n_candidates: Series[int] = pa.Field(ge=1)  # a question shows at most 25 of them
    count_label: Series[str]
    match_type: Series[str]
    query_absent: Series[bool]
    question: Series[str] = pa.Field(str_startswith="Here are two images.")
    answer: Series[str] = pa.Field(str_length={"min_value": 1, "max_value": 1})
    none_letter: Series[str]

    @pa.dataframe_check
    def absent_answers_none(cls, df: pd.DataFrame) -> bool:  # noqa: N805
        """An item without the query has the None option as its answer, and only such items do."""
        return bool(((df["answer"] == df["none_letter"]) == df["query_absent"]).all())


class PredictionSchema(pa.DataFrameModel):
    """`mmvm_predictions[b]`: one row per (method, item) of a feature backbone."""

    model: Series[str]
    method: Series[str] = pa.Field(isin=["zero_shot", "contrastive_head"])
    item_id: Series[str]
    predicted: Series[str]
    correct: Series[bool]
    none_mode: Series[str] = pa.Field(isin=["fitted", "carried", "fixed", "never", ""])
    status: Series[str] = pa.Field(isin=["ok", "not_applicable"])


class AnswerSchema(pa.DataFrameModel):
    """`mmvm_answers[m]`: one row per item asked of an LVLM."""

    model: Series[str]
    item_id: Series[str] = pa.Field(unique=True)
    raw_answer: Series[str]
    parsed: Series[str]
    extraction: Series[str] = pa.Field(isin=["exact", "no_option", "judge", "none"])
    judge_status: Series[str] = pa.Field(isin=["", "decided", "failed"])
    judge_mode: Series[str] = pa.Field(isin=["off", "matcher", "yes_no"])
    judge_raw: Series[str]
    correct: Series[bool]


class MetricSchema(pa.DataFrameModel):
    """`mmvm_*_metrics`: accuracy and a random chooser's expectation per breakdown (0-100)."""

    model: Series[str]
    kind: Series[str] = pa.Field(isin=["backbone", "lvlm", "oracle"])
    breakdown: Series[str] = pa.Field(isin=["overall", "cue", "candidates", "query"])
    key: Series[str]
    accuracy: Series[float] = pa.Field(ge=0, le=100, nullable=True)
    random_expected: Series[float] = pa.Field(ge=0, le=100, nullable=True)

    @pa.dataframe_check
    def cue_keys_are_published(cls, df: pd.DataFrame) -> bool:  # noqa: N805
        """Cue rows use the eight published abbreviations."""
        return bool(df.loc[df["breakdown"] == "cue", "key"].isin(list(CUES.values())).all())


class LeaderboardSchema(pa.DataFrameModel):
    """`mmvm_leaderboard`: one row per (model, method), accuracy beside chance (0-100), then the breakdown."""

    data_source: Series[str] = pa.Field(nullable=True)
    model: Series[str]
    kind: Series[str] = pa.Field(isin=["backbone", "lvlm", "oracle"])
    method: Series[str]
    status: Series[str]
    accuracy: Series[float] = pa.Field(ge=0, le=100, nullable=True)
    random_expected: Series[float] = pa.Field(ge=0, le=100, nullable=True)

    class Config:
        coerce = True  # an empty board has object columns

    @pa.dataframe_check
    def one_row_per_model_and_method(cls, df: pd.DataFrame) -> bool:  # noqa: N805
        """No (model, method) twice."""
        return not df.duplicated(["model", "method"]).any()


class FeatureSchema(pa.DataFrameModel):
    """`mmvm_features`: the feature cache's manifest of one backbone's unmarked frames."""

    backbone: Series[str]
    image_id: Series[str] = pa.Field(unique=True)
    channels: Series[int] = pa.Field(gt=0)
    grid_h: Series[int] = pa.Field(gt=0)
    grid_w: Series[int] = pa.Field(gt=0)

    class Config:
        coerce = True  # an empty manifest has object columns
