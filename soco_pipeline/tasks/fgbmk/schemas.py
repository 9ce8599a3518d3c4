"""pandera schemas of the fgbmk_* tables (the blocking `schema` checks of defs/fgbmk validate them)."""

from __future__ import annotations

import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series


class FgbmkItemSchema(pa.DataFrameModel):
    """One image of the fine-grained set, labelled at three levels."""

    image_id: Series[str] = pa.Field(unique=True)
    uri: Series[str]
    path: Series[str]
    split: Series[str] = pa.Field(isin=["train", "test"])
    superclass: Series[str]
    subclass: Series[str]
    superclass_id: Series[int] = pa.Field(ge=0)
    class_id: Series[int] = pa.Field(ge=0)
    subclass_id: Series[int] = pa.Field(ge=0)
    simulated: Series[bool]


class FgbmkQuestionSchema(pa.DataFrameModel):
    """One question for an LVLM."""

    question_id: Series[int] = pa.Field(unique=True, ge=1)
    group_id: Series[int] = pa.Field(ge=0)
    rotation: Series[int] = pa.Field(ge=0)
    task: Series[str] = pa.Field(isin=["hierarchical", "attribute", "knowledge_bias"])
    form: Series[str] = pa.Field(isin=["choice", "true_false", "short_answer"])
    text: Series[str] = pa.Field(str_length={"min_value": 1})
    simulated: Series[bool]


class FgbmkMetricSchema(pa.DataFrameModel):
    """Probe and retrieval scores of one backbone at one (scope, superclass, level)."""

    backbone: Series[str]
    scope: Series[str] = pa.Field(isin=["across", "within"])
    level: Series[str] = pa.Field(isin=["superclass", "class", "subclass"])
    top1: Series[float] = pa.Field(ge=0, le=100)
    top5: Series[float] = pa.Field(ge=0, le=100)
    recall_at_1: Series[float] = pa.Field(ge=0, le=100, nullable=True)
    map: Series[float] = pa.Field(ge=0, le=100, nullable=True)
    simulated: Series[bool]


class FgbmkProbePredictionSchema(pa.DataFrameModel):
    """The best probe head's answer on one test image at one level; the mean of `correct` is its top-1."""

    backbone: Series[str]
    image_id: Series[str]
    level: Series[str] = pa.Field(isin=["superclass", "class", "subclass"])
    predicted: Series[int] = pa.Field(ge=0)
    label: Series[int] = pa.Field(ge=0)
    correct: Series[bool]
    probe_head: Series[str]
    simulated: Series[bool]

    class Config:
        strict = True
        coerce = True

    @pa.dataframe_check
    def one_row_per_image_and_level(cls, df: pd.DataFrame) -> bool:  # noqa: N805
        """No (image, level) twice."""
        return not df.duplicated(["image_id", "level"]).any()

    @pa.dataframe_check
    def correct_is_prediction_equals_label(cls, df: pd.DataFrame) -> bool:  # noqa: N805
        """`correct` says exactly whether the prediction is the label."""
        return bool((df["correct"] == (df["predicted"] == df["label"])).all())


class FgbmkRobustnessSchema(pa.DataFrameModel):
    """Accuracy of a probe under one perturbation."""

    backbone: Series[str]
    attack: Series[str] = pa.Field(isin=["clean", "fgsm", "pgd", "gaussian"])
    accuracy: Series[float] = pa.Field(ge=0, le=100)


class FgbmkAnswerSchema(pa.DataFrameModel):
    """One scored LVLM answer."""

    model: Series[str]
    question_id: Series[int]
    method: Series[str] = pa.Field(isin=["exact", "contains", "ambiguous", "none", "leading", "error"])
    correct: Series[bool]


class FgbmkGlobalFeatureSchema(pa.DataFrameModel):
    """`fgbmk_global_features`: one row per image, its cache folder and the sizes of the three parts."""

    backbone: Series[str]
    image_id: Series[str] = pa.Field(unique=True)
    folder: Series[str] = pa.Field(str_length={"min_value": 1})
    dim_cls_prev: Series[int] = pa.Field(gt=0)
    dim_cls_last: Series[int] = pa.Field(gt=0)
    dim_patch_mean: Series[int] = pa.Field(gt=0)


class FgbmkLvlmMetricSchema(pa.DataFrameModel):
    """`fgbmk_lvlm_metrics`: a long table of one model's accuracies (0-100) and counts."""

    model: Series[str]
    task: Series[str]
    level: Series[str]
    form: Series[str]
    metric: Series[str]
    value: Series[float] = pa.Field(nullable=True)
    n: Series[int] = pa.Field(ge=0)

    class Config:
        coerce = True

    @pa.dataframe_check
    def accuracies_are_percentages(cls, df) -> bool:  # noqa: N805
        """Every accuracy is in 0-100 (or missing)."""
        acc = df.loc[df["metric"].str.contains("accuracy"), "value"].dropna()
        return bool(acc.between(0, 100).all())


class FgbmkLeaderboardSchema(pa.DataFrameModel):
    """`fgbmk_leaderboard`: one row per backbone or LVLM."""

    kind: Series[str] = pa.Field(isin=["backbone", "lvlm"])
    model: Series[str] = pa.Field(unique=True)

    class Config:
        coerce = True


class FgbmkFindingSchema(pa.DataFrameModel):
    """`fgbmk_findings`: the paper's five findings, each with whether it holds on our tables."""

    finding: Series[int] = pa.Field(ge=1, le=5, unique=True)
    claim: Series[str]
    holds: Series[str] = pa.Field(isin=["yes", "no", "not testable"])
    why: Series[str] = pa.Field(nullable=True)

    class Config:
        coerce = True
