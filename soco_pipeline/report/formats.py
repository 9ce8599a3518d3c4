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
