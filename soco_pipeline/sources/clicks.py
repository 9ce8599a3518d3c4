"""Reader for raw annotator clicks: one row per (image, keypoint, annotator) with x, y, visible."""

from __future__ import annotations

import io

import pandas as pd

from soco_pipeline.schemas import RawClickSchema, validate
from soco_pipeline.storage import read_bytes, read_parquet

_TRUE = {"true", "1", "yes", "y", "t"}
_FALSE = {"false", "0", "no", "n", "f"}


def _parse_visible(col: pd.Series, path: str) -> pd.Series:
    if col.dtype == bool:
        return col
    text = col.astype(str).str.strip().str.lower()
    bad = ~text.isin(_TRUE | _FALSE)
    if bad.any():
        i = int(bad.to_numpy().nonzero()[0][0])
        raise ValueError(f"{path}: row {i} has visible={col.iloc[i]!r}; use true/false or 1/0")
    return text.isin(_TRUE)


EXTENT_COLUMNS = ["kp_x_min", "kp_x_max", "kp_y_min", "kp_y_max"]


def click_extents(clicks: pd.DataFrame) -> pd.DataFrame:
    """Per image: the extent of its visible clicks, so one bad click rejects its image, not the stage."""
    v = clicks[clicks["visible"].astype(bool)]
    return v.groupby("image_id").agg(
        kp_x_min=("x", "min"), kp_x_max=("x", "max"), kp_y_min=("y", "min"), kp_y_max=("y", "max")
    )[EXTENT_COLUMNS]


def check_click_images(clicks: pd.DataFrame, known: set[str], path: str, root: str) -> None:
    """ValueError naming the clicks' image ids that no image of the source has (never dropped silently)."""
    unknown = sorted(set(clicks["image_id"]) - known)
    if unknown:
        n_rows = int(clicks["image_id"].isin(unknown).sum())
        more = f" (and {len(unknown) - 5} more)" if len(unknown) > 5 else ""
        raise ValueError(
            f"{path}: {n_rows} clicks on {len(unknown)} image ids that {root} has no image or annotation of: "
            f"{unknown[:5]}{more}. Fix: correct the image ids, or drop these clicks from the file"
        )


def read_clicks(path: str) -> pd.DataFrame:
    """Raw clicks from a CSV or Parquet file (by extension), validated against RawClickSchema."""
    if path.endswith(".parquet") or path.endswith(".pq"):
        df = read_parquet(path)
    elif path.endswith(".csv") or path.endswith(".csv.gz"):
        try:
            data = read_bytes(path)
        except FileNotFoundError:
            raise FileNotFoundError(
                f"{path} does not exist: point SourceConfig.clicks at the clicks file"
            ) from None
        compression = "gzip" if path.endswith(".gz") else None
        df = pd.read_csv(io.BytesIO(data), compression=compression, dtype={"image_id": str, "keypoint": str})
    else:
        raise ValueError(f"{path}: unknown clicks file type; use a .csv or .parquet file")
    missing = [c for c in ("image_id", "keypoint", "annotator", "x", "y", "visible") if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: clicks table lacks columns {missing}; RawClickSchema needs them")
    df = df.copy()
    df["visible"] = _parse_visible(df["visible"], path)
    return validate(df, RawClickSchema, f"clicks ({path})").reset_index(drop=True)
