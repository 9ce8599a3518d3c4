"""pandera schemas of `model_headlines` (long) and `model_summary` (wide); trust/headline.py builds them."""

from __future__ import annotations

import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series

from soco_pipeline.trust.roles import ROLES


class ModelHeadlineSchema(pa.DataFrameModel):
    """`model_headlines`: one row per (model, family), the family's headline metric with its 95% CI."""

    model: Series[str] = pa.Field(str_length={"min_value": 1})
    family: Series[str] = pa.Field(str_length={"min_value": 1})
    metric: Series[str]
    value: Series[float] = pa.Field(ge=0, le=100)
    ci_low: Series[float] = pa.Field(nullable=True)
    ci_high: Series[float] = pa.Field(nullable=True)
    n: Series[pd.Int64Dtype] = pa.Field(nullable=True, ge=0)
    simulated: Series[bool]
    materialized_at: Series[pd.DatetimeTZDtype] = pa.Field(
        nullable=True, dtype_kwargs={"unit": "ns", "tz": "UTC"}
    )
    role: Series[str] = pa.Field(isin=ROLES)  # model | control | ceiling (trust/roles.py)

    @pa.dataframe_check
    def one_row_per_model_and_family(cls, df: pd.DataFrame) -> bool:  # noqa: N805
        return not df.duplicated(["model", "family"]).any()

    @pa.dataframe_check
    def ci_ordered(cls, df: pd.DataFrame) -> Series[bool]:  # noqa: N805
        # not "brackets the value": a percentile bootstrap interval need not contain its point estimate
        return df.ci_low.isna() | df.ci_high.isna() | (df.ci_low <= df.ci_high + 1e-9)

    class Config:
        strict = True
        coerce = True


class ModelSummarySchema(pa.DataFrameModel):
    """`model_summary`: one row per model, then each family's trust/headline.summary_columns."""

    model: Series[str] = pa.Field(unique=True, str_length={"min_value": 1})
    simulated: Series[bool]
    role: Series[str] = pa.Field(isin=ROLES)

    class Config:
        strict = False  # the family columns come from the declared headlines
        coerce = True
