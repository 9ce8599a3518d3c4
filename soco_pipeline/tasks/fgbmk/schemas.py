"""pandera schemas of the fgbmk_* tables (the blocking `schema` checks of defs/fgbmk validate them)."""

from __future__ import annotations

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

    class Config:
        strict = False


class FgbmkQuestionSchema(pa.DataFrameModel):
    """One question for an LVLM."""

    question_id: Series[int] = pa.Field(unique=True, ge=1)
    group_id: Series[int] = pa.Field(ge=0)
    rotation: Series[int] = pa.Field(ge=0)
    task: Series[str] = pa.Field(isin=["hierarchical", "attribute", "knowledge_bias"])
    form: Series[str] = pa.Field(isin=["choice", "true_false", "short_answer"])
    text: Series[str] = pa.Field(str_length={"min_value": 1})
    simulated: Series[bool]

    class Config:
        strict = False


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

    class Config:
        strict = False


class FgbmkRobustnessSchema(pa.DataFrameModel):
    """Accuracy of a probe under one perturbation."""

    backbone: Series[str]
    attack: Series[str] = pa.Field(isin=["clean", "fgsm", "pgd", "gaussian"])
    accuracy: Series[float] = pa.Field(ge=0, le=100)

    class Config:
        strict = False


class FgbmkAnswerSchema(pa.DataFrameModel):
    """One scored LVLM answer."""

    model: Series[str]
    question_id: Series[int]
    method: Series[str] = pa.Field(isin=["exact", "contains", "ambiguous", "none", "leading", "error"])
    correct: Series[bool]

    class Config:
        strict = False
