"""The published figures (assets/reference/published.csv) and their protocols: data access only."""

from __future__ import annotations

import difflib
from pathlib import Path

import pandas as pd

PUBLISHED_PATH = Path(__file__).resolve().parents[1] / "assets" / "reference" / "published.csv"
KNOBS = ("input_size", "grid", "layer", "alpha", "reduction", "prediction", "judge")
PUBLISHED_COLUMNS = ("model", "family", "metric", "setting", "value", "source", *KNOBS, "note")


class PublishedTableError(ValueError):
    """The published-figures table is malformed, or a spec names a model it does not hold."""


def load_published(path: str | Path | None = None) -> pd.DataFrame:
    """The published figures, checked: every column, numeric values, a source, no duplicate row."""
    path = Path(path or PUBLISHED_PATH)
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    missing = [c for c in PUBLISHED_COLUMNS if c not in df.columns]
    if missing:
        raise PublishedTableError(
            f"{path}: columns {missing} are missing; the header is {list(PUBLISHED_COLUMNS)}"
        )
    values = pd.to_numeric(df["value"], errors="coerce")
    bad = df.index[values.isna()].tolist()
    if bad:
        row = bad[0]
        raise PublishedTableError(
            f"{path}: line {row + 2} ({df.at[row, 'model']}, {df.at[row, 'metric']}): value "
            f"{df.at[row, 'value']!r} is not a number"
        )
    unsourced = df.index[df["source"].str.strip() == ""].tolist()
    if unsourced:
        raise PublishedTableError(
            f"{path}: line {unsourced[0] + 2} has no source; name the paper, table or page"
        )
    key = ["model", "family", "metric", "setting", "source"]
    dup = df[df.duplicated(key, keep=False)]
    if len(dup):
        first = dup.iloc[0]
        n = int((df[key] == first[key]).all(axis=1).sum())
        raise PublishedTableError(
            f"{path}: ({', '.join(str(first[k]) for k in key)}) appears {n} times; keep one row per "
            f"model, family, metric, setting and source"
        )
    return df.assign(value=values.astype(float))


def check_reference(name: str, published: pd.DataFrame, where: str = "the spec") -> str:
    """`name` when the published table holds that model; else an error listing the closest names."""
    known = sorted(published["model"].unique())
    if name in known:
        return name
    close = difflib.get_close_matches(name, known, n=5, cutoff=0.5)
    hint = f"close names: {', '.join(close)}" if close else f"{len(known)} models are listed"
    raise PublishedTableError(
        f"{where}: reference {name!r} is not in {PUBLISHED_PATH.name} ({hint}); use a model name from "
        f"assets/reference/published.csv or drop the field"
    )
