"""A result table as text: an aligned table, CSV, JSON (records) or GitHub Markdown."""

from __future__ import annotations

import pandas as pd

FORMATS = ("table", "csv", "json", "markdown")


def format_frame(df: pd.DataFrame, fmt: str = "table") -> str:
    """`df` in one of FORMATS, ending with a newline."""
    if fmt == "csv":
        return df.to_csv(index=False)
    if fmt == "json":
        return df.to_json(orient="records", date_format="iso", default_handler=str) + "\n"
    if fmt == "markdown":
        if df.empty:
            return "(no rows)\n"
        return df.astype(object).where(df.notna(), None).to_markdown(index=False, missingval="") + "\n"
    if fmt != "table":
        raise ValueError(f"unknown format {fmt!r}: use one of {', '.join(FORMATS)}")
    with pd.option_context("display.max_rows", 200, "display.max_columns", 50, "display.width", 200):
        return (df.to_string(index=False) if len(df) else "(no rows)") + "\n"


def rounded(df: pd.DataFrame, decimals: int | None) -> pd.DataFrame:
    """`df` with every float column rounded to `decimals` (unchanged when None)."""
    if decimals is None:
        return df
    floats = [c for c in df.columns if pd.api.types.is_float_dtype(df[c])]
    return df.assign(**{c: df[c].round(decimals) for c in floats}) if floats else df


def format_query(df: pd.DataFrame, fmt: str = "table", decimals: int | None = None) -> str:
    """A query's result for `soco sql` as table, markdown, csv or json (floats rounded to `decimals`)."""
    from soco_pipeline.report.console import column_text, console_table, is_number, is_prose, records_text

    if fmt == "table":
        if is_prose(df):
            return records_text(df, decimals=decimals)
        return console_table(
            df, columns=list(df.columns), full="--format csv", na_reason="NULL", decimals=decimals
        )
    if fmt == "markdown":
        if df.empty:
            return "(no rows)\n"
        cells = pd.DataFrame({c: column_text(df[c], decimals) for c in df.columns}, columns=df.columns)
        right = ["right" if is_number(df[c]) else "left" for c in df.columns]
        return cells.to_markdown(index=False, colalign=right, disable_numparse=True) + "\n"
    return format_frame(rounded(df, decimals), fmt)
