"""Rules the OOO and 2AFC tables must satisfy (the `schema` checks list broken ones); pandera for the rest."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series

from .afc import AFC_COLUMNS
from .annotators import JUDGEMENTS
from .config import TpipsConfig
from .ooo import OOO_COLUMNS


def _common(
    df: pd.DataFrame, columns: list[str], n_opts: int, cfg: TpipsConfig, name: str, any_aspect: bool = False
) -> list[str]:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        return [f"{name}: missing columns {missing}"]
    out = []
    if (df.aspect.astype(str).str.strip() == "").any():
        out.append(f"{name}: empty aspect in {int((df.aspect.astype(str).str.strip() == '').sum())} rows")
    unknown = sorted(set(df.aspect) - set(cfg.aspects))
    if unknown and not any_aspect:
        out.append(f"{name}: aspects outside the vocabulary: {unknown}")
    # rows of the released format carry shares only (votes []): their counts are not checked
    counted = df.votes.map(len).to_numpy() > 0 if len(df) else np.zeros(0, bool)
    votes = np.array(df.votes[counted].tolist(), dtype=float).reshape(-1, n_opts)
    total = votes.sum(1) + df.cannot_tell.to_numpy()[counted]
    bad = total != cfg.observer.n_annotators
    if bad.any():
        out.append(f"{name}: {int(bad.sum())} rows whose votes + cannot_tell != {cfg.observer.n_annotators}")
    if (df.cannot_tell.to_numpy() >= cfg.observer.prune_cannot_tell).any():
        out.append(f"{name}: rows with >= {cfg.observer.prune_cannot_tell} 'cannot tell' were not pruned")
    y = df[[f"y_{k}" for k in range(n_opts)]].to_numpy(float)
    if len(y) and not (np.allclose(y.sum(1), 1.0) and (y >= 0).all()):
        out.append(f"{name}: vote distributions y are not on the simplex (non-negative, sum 1)")
    marker = cfg.source.votes_are
    if (df.judgements != marker).any():
        out.append(f"{name}: rows without the judgements={marker!r} marker of the {cfg.source.kind} source")
    return out


def ooo_problems(df: pd.DataFrame, cfg: TpipsConfig, released: bool = False) -> list[str]:
    """Problems of an OOO table (empty: fine); `released`: factor names need not be in the vocabulary."""
    out = _common(df, OOO_COLUMNS, 3, cfg, "tpips_ooo", any_aspect=released)
    if not out and not set(df.split) <= set(cfg.triplets.splits):
        out.append(f"tpips_ooo: splits outside {sorted(cfg.triplets.splits)}")
    return out


def afc_problems(df: pd.DataFrame, cfg: TpipsConfig) -> list[str]:
    """Problems of a 2AFC table (empty list: fine)."""
    out = _common(df, AFC_COLUMNS, 2, cfg, "tpips_afc")
    if not out and len(df):
        v = np.array(df.votes.tolist())
        if (v[:, 0] == v[:, 1]).any():
            out.append("tpips_afc: tied items were not removed")
    return out


class ImageSchema(pa.DataFrameModel):
    """`tpips_images`: every render (triplet and 2AFC) with its uri and size."""

    image_id: Series[str] = pa.Field(unique=True)
    uri: Series[str] = pa.Field(str_length={"min_value": 1})
    width: Series[int] = pa.Field(gt=0)
    height: Series[int] = pa.Field(gt=0)
    role: Series[str] = pa.Field(isin=["triplet", "afc"])

    class Config:
        coerce = True


class FeatureSchema(pa.DataFrameModel):
    """`tpips_features`: the feature-cache manifests of every layer (empty for a not-applicable backbone)."""

    image_id: Series[str]
    layer: Series[int] = pa.Field(ge=0)

    class Config:
        coerce = True

    @pa.dataframe_check
    def one_row_per_image_and_layer(cls, df: pd.DataFrame) -> bool:  # noqa: N805
        """No (image, layer) twice."""
        return not df.duplicated(["image_id", "layer"]).any()


class ScoreSchema(pa.DataFrameModel):
    """The score tables: agreement, rater agreement and ceiling (0-100) per (model, method, eval, aspect)."""

    model: Series[str]
    method: Series[str]
    conditioned: Series[bool]
    eval: Series[str] = pa.Field(str_matches=r"^(ooo|afc:.+)$")
    aspect: Series[str]
    n: Series[int] = pa.Field(ge=0)
    agreement: Series[float] = pa.Field(ge=0, le=100, nullable=True)
    rater_agreement: Series[float] = pa.Field(ge=0, le=100, nullable=True)
    ceiling: Series[float] = pa.Field(ge=0, le=100, nullable=True)
    judgements: Series[str] = pa.Field(isin=[JUDGEMENTS, "human"])
    note: Series[str] = pa.Field(nullable=True)

    class Config:
        coerce = True


class OutcomeSchema(pa.DataFrameModel):
    """The outcome tables: each method's vote share (0-1) of its pick on every OOO (triplet, aspect) row."""

    model: Series[str]
    method: Series[str]
    triplet_id: Series[str]
    aspect: Series[str]
    split: Series[str]
    agreement: Series[float] = pa.Field(ge=0, le=1)
    judgements: Series[str] = pa.Field(isin=[JUDGEMENTS, "human"])

    class Config:
        coerce = True
        strict = True

    @pa.dataframe_check
    def one_row_per_method_and_sample(cls, df: pd.DataFrame) -> bool:  # noqa: N805
        """No (method, triplet, aspect) twice."""
        return not df.duplicated(["method", "triplet_id", "aspect"]).any()


class LeaderboardSchema(pa.DataFrameModel):
    """`tpips_leaderboard`: one row per (model, method); agreement, rater agreement and ceiling, 0-100."""

    model: Series[str]
    method: Series[str]
    ooo: Series[float] = pa.Field(ge=0, le=100, nullable=True)
    rater_agreement: Series[float] = pa.Field(ge=0, le=100, nullable=True)
    ceiling: Series[float] = pa.Field(ge=0, le=100, nullable=True)

    class Config:
        coerce = True

    @pa.dataframe_check
    def one_row_per_model_and_method(cls, df: pd.DataFrame) -> bool:  # noqa: N805
        """No (model, method) twice."""
        return not df.duplicated(["model", "method"]).any()


class TripletSchema(pa.DataFrameModel):
    """`tpips_triplets`: the generated triplets (three image ids, the varied aspects, the split)."""

    triplet_id: Series[str] = pa.Field(unique=True)
    image_0: Series[str]
    image_1: Series[str]
    image_2: Series[str]
    varied: Series[str]
    split: Series[str] = pa.Field(isin=["train", "val", "test"])


class AfcItemSchema(pa.DataFrameModel):
    """`tpips_afc_items`: the generated 2AFC items (reference, two operation outputs, source)."""

    item_id: Series[str] = pa.Field(unique=True)
    ref: Series[str]
    x0: Series[str]
    x1: Series[str]
    source: Series[str]
