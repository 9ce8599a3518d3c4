"""CSV cells a spreadsheet would run as formulas (leading `=`, `+`, `-`, `@`, tab, CR) get a leading `'`
(OWASP); plain numbers and numeric columns are left alone."""

from __future__ import annotations

import csv

import pandas as pd

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
PLAIN_NUMBER = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"


def neutralise_formulas(df: pd.DataFrame) -> pd.DataFrame:
    """A copy of `df` whose text cells that start like a formula are prefixed with `'` (see the module)."""
    out = df.copy()
    for col in out.columns:
        values = out[col]
        if pd.api.types.is_numeric_dtype(values) or pd.api.types.is_bool_dtype(values):
            continue
        text = values.where(values.map(lambda v: isinstance(v, str)))
        risky = text.str.startswith(FORMULA_START, na=False) & ~text.str.fullmatch(PLAIN_NUMBER, na=False)
        if risky.any():
            out[col] = values.astype(object).where(~risky, "'" + text)
    return out


def safe_csv(df: pd.DataFrame) -> str:
    """`df` as CSV with formula cells neutralised, every text cell quoted (a lone CR stays inside)."""
    return neutralise_formulas(df).to_csv(index=False, quoting=csv.QUOTE_NONNUMERIC)
