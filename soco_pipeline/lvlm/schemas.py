"""The LVLM tables as pandera schemas: `lvlm_items` and `lvlm_answers` (the contract of the lvlm stage)."""

from __future__ import annotations

import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series

from soco_pipeline.lvlm.specs import SETTINGS

ROTATIONS = [0, 1, 2, 3]


class LvlmItemSchema(pa.DataFrameModel):
    """`lvlm_items`: one row per (setting, four-choice item, rotation of the options)."""

    setting: Series[str] = pa.Field(isin=list(SETTINGS))
    index: Series[int] = pa.Field(unique=True, ge=0)
    g_index: Series[int] = pa.Field(ge=0)
    qid: Series[str]
    rotation: Series[int] = pa.Field(isin=ROTATIONS)
    pair_id: Series[str]
    pair_group: Series[str]
    question: Series[str] = pa.Field(str_length={"min_value": 1})
    A: Series[str]
    B: Series[str]
    C: Series[str]
    D: Series[str]
    answer: Series[str] = pa.Field(isin=list("ABCD"))
    src_render: Series[str] = pa.Field(nullable=True)
    trg_render: Series[str]

    @pa.dataframe_check
    def four_rotations_per_item(cls, df: pd.DataFrame) -> bool:  # noqa: N805
        """Each (setting, g_index) holds rotations 0-3 once, and each letter is right in exactly one."""
        g = df.groupby(["setting", "g_index"])
        rot_ok = (g["rotation"].nunique() == 4) & (g.size() == 4)
        ans_ok = g["answer"].nunique() == 4
        return bool((rot_ok & ans_ok).all())

    @pa.dataframe_check
    def source_image_unless_desc(cls, df: pd.DataFrame) -> Series[bool]:  # noqa: N805
        """vis and vis_desc rows show a marked source image; desc rows show none."""
        return (df["setting"] == "desc") == df["src_render"].isna()

    class Config:
        strict = False
        coerce = True


class LvlmAnswerSchema(pa.DataFrameModel):
    """`lvlm_answers[m]`: one row per asked item row; errors count as wrong."""

    model: Series[str]
    setting: Series[str] = pa.Field(isin=list(SETTINGS))
    index: Series[int] = pa.Field(unique=True)
    g_index: Series[int]
    answer: Series[str] = pa.Field(isin=list("ABCD"))
    raw_answer: Series[str]
    parsed: Series[str] = pa.Field(isin=["", "A", "B", "C", "D"])
    correct: Series[bool]
    latency_s: Series[float] = pa.Field(ge=0)
    attempts: Series[int] = pa.Field(ge=1)
    error: Series[str]
    request_hash: Series[str] = pa.Field(str_length={"min_value": 64, "max_value": 64})

    @pa.dataframe_check
    def errors_are_wrong(cls, df: pd.DataFrame) -> Series[bool]:  # noqa: N805
        return (df["error"] == "") | ~df["correct"]

    class Config:
        strict = False
        coerce = True
