"""Each family's headline (`Headline`), its long rows (`headline_rows`) and the one-row-per-model
`model_summary`; declared in tasks/core.py (SOCO, SOCO-LVLM) and each family's `FamilySpec`."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

Z95 = 1.959963984540054
HEADLINE_COLUMNS = tuple("model family metric value ci_low ci_high n simulated materialized_at role".split())
EMBEDDED_SOURCE = "embedded_source"  # `simulated`: the run's SOCO data source is the embedded generator


@dataclass(frozen=True, kw_only=True)
class Headline:
    """One family's headline, read from its board: the first non-null of `values` (0-100) on the `where` rows,
    the best row per model when `best_of` names a method; CI from `ci_low` / `ci_high`, else value +-
    `half_width`, else Wilson from `n`; `simulated` a bool, a board column or EMBEDDED_SOURCE; `ceiling` /
    `control` queries mark checks (trust/roles.py). A `Family` fills `family` and `board` when empty."""

    values: tuple[str, ...]
    label: str
    family: str = ""
    board: str = ""
    model_column: str = "model"
    where: str = ""
    best_of: str | None = None
    ci_low: str | None = None
    ci_high: str | None = None
    half_width: str | None = None
    n: str | None = None
    simulated: bool | str = False
    ceiling: str = ""
    control: str = ""


def wilson_interval(value: np.ndarray, n: np.ndarray, z: float = Z95) -> tuple[np.ndarray, np.ndarray]:
    """The 95% Wilson score interval (0-100) of a proportion `value` (0-100) over `n` samples; NaN if n < 1."""
    n = np.asarray(n, float)
    p = np.asarray(value, float) / 100
    ok = n >= 1
    m = np.where(ok, n, 1.0)
    denom = 1 + z * z / m
    centre = (p + z * z / (2 * m)) / denom
    half = z * np.sqrt(np.clip(p * (1 - p), 0, None) / m + z * z / (4 * m * m)) / denom
    return np.where(ok, 100 * (centre - half), np.nan), np.where(ok, 100 * (centre + half), np.nan)


def simulated_rows(h: Headline, rows: pd.DataFrame, embedded: bool) -> pd.Series:
    """Whether each board row is simulated, by the headline's `simulated` (`embedded`: the embedded source)."""
    if isinstance(h.simulated, bool):
        return pd.Series(h.simulated, index=rows.index)
    if h.simulated == EMBEDDED_SOURCE:
        return pd.Series(embedded, index=rows.index)
    if h.simulated not in rows.columns:
        raise KeyError(
            f"headline of {h.family!r}: board {h.board!r} has no column {h.simulated!r} (simulated)"
        )
    col = rows[h.simulated]
    if col.dtype == bool:
        return col.fillna(False)
    return col.astype(str).str.lower().str.startswith("simulated")


def _roles(h: Headline, rows: pd.DataFrame, roles: dict[str, str]) -> pd.Series:
    """Each headline row's role: the Headline's `ceiling` / `control` queries, else `roles` by model name."""
    out = rows[h.model_column].astype(str).map(roles).fillna("model")
    for role, query in (("control", h.control), ("ceiling", h.ceiling)):
        if query:
            out[rows.eval(query).to_numpy(bool)] = role
    return out


def headline_rows(
    h: Headline,
    board: pd.DataFrame | None,
    materialized_at: pd.Timestamp | None,
    embedded: bool = True,
    roles: dict[str, str] | None = None,
) -> pd.DataFrame:
    """One family's long headline rows (HEADLINE_COLUMNS), one per model with a value; `roles`: checks."""
    if not (h.family and h.board):
        raise ValueError(f"{h}: a Headline outside a Family declaration names its family and board")
    if board is None or board.empty or h.model_column not in board.columns:
        return empty_headlines()
    rows = board.query(h.where) if h.where else board
    present = [c for c in h.values if c in rows.columns]
    if rows.empty or not present:
        return empty_headlines()
    value = rows[present].astype(float).bfill(axis=1).iloc[:, 0]
    rows = rows.assign(_value=value)[value.notna()]
    if h.best_of and h.best_of in rows.columns:
        rows = rows.sort_values("_value", ascending=False, kind="stable").drop_duplicates(h.model_column)
    else:
        rows = rows.drop_duplicates(h.model_column)
    v = rows["_value"].to_numpy(float)
    n = rows[h.n].to_numpy(float) if h.n and h.n in rows.columns else np.full(len(rows), np.nan)
    if h.ci_low and h.ci_low in rows.columns and h.ci_high in rows.columns:
        lo, hi = rows[h.ci_low].to_numpy(float), rows[h.ci_high].to_numpy(float)
    elif h.half_width and h.half_width in rows.columns:
        half = rows[h.half_width].to_numpy(float)
        lo, hi = v - half, v + half
    elif h.n and h.n in rows.columns:
        lo, hi = wilson_interval(v, n)
    else:
        lo = hi = np.full(len(rows), np.nan)
    metric = (
        h.label + " [" + rows[h.best_of].astype(str) + "]"
        if h.best_of and h.best_of in rows.columns
        else pd.Series(h.label, index=rows.index)
    )
    out = pd.DataFrame(
        {
            "model": rows[h.model_column].astype(str).to_numpy(),
            "family": h.family,
            "metric": metric.to_numpy(),
            "value": v,
            "ci_low": lo,
            "ci_high": hi,
            "n": pd.array(np.where(np.isnan(n), pd.NA, n), dtype="Int64")
            if len(rows)
            else pd.array([], "Int64"),
            "simulated": simulated_rows(h, rows, embedded).astype(bool).to_numpy(),
            "materialized_at": pd.Timestamp(materialized_at) if materialized_at is not None else pd.NaT,
            "role": _roles(h, rows, roles or {}).to_numpy(),
        }
    )
    out["materialized_at"] = pd.to_datetime(out["materialized_at"], utc=True)
    return out.sort_values("model", ignore_index=True)


def empty_headlines() -> pd.DataFrame:
    """A headline table with no rows (the columns and dtypes of `headline_rows`)."""
    dtypes = (str, str, str, float, float, float, "Int64", bool, "datetime64[ns, UTC]", str)
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in zip(HEADLINE_COLUMNS, dtypes, strict=True)})


def model_headlines(
    boards: dict[str, pd.DataFrame | None],
    materialized: dict[str, pd.Timestamp | None],
    headlines: Iterable[Headline],
    embedded: bool = True,
    roles: dict[str, str] | None = None,
) -> pd.DataFrame:
    """Every family's headline rows, one per (model, family); `boards` and `materialized` by board."""
    parts = [
        headline_rows(h, boards.get(h.board), materialized.get(h.board), embedded, roles) for h in headlines
    ]
    parts = [p for p in parts if len(p)]
    if not parts:
        return empty_headlines()
    return pd.concat(parts, ignore_index=True).sort_values(["model", "family"], ignore_index=True)


def summary_columns(family: str) -> list[str]:
    """The `model_summary` columns of one family, in order."""
    return [family, f"{family}_ci_low", f"{family}_ci_high", f"{family}_simulated", f"{family}_date"]


def model_summary(long: pd.DataFrame, headlines: Iterable[Headline]) -> pd.DataFrame:
    """One row per model: `model`, `simulated`, `role`, then each family's `summary_columns`."""
    families = list(dict.fromkeys(h.family for h in headlines))
    models = sorted(long["model"].unique()) if len(long) else []
    out = pd.DataFrame({"model": pd.Series(models, dtype=str)})
    out["simulated"] = (
        out["model"].map(long.groupby("model")["simulated"].any()).astype(bool)
        if models
        else pd.Series(dtype=bool)
    )
    rank = {"model": 0, "control": 1, "ceiling": 2}  # a model that is a ceiling in one family is a check
    role = long.assign(_r=long["role"].map(rank)).groupby("model")["_r"].max() if "role" in long else None
    out["role"] = (
        out["model"].map(role).map({v: k for k, v in rank.items()}).fillna("model")
        if role is not None and models
        else pd.Series("model", index=out.index, dtype=str)
    )
    for f in families:
        rows = long[long["family"] == f].set_index("model")
        value, lo, hi, sim, date = summary_columns(f)
        out[value] = out["model"].map(rows["value"]).astype(float)
        out[lo] = out["model"].map(rows["ci_low"]).astype(float)
        out[hi] = out["model"].map(rows["ci_high"]).astype(float)
        out[sim] = out["model"].map(rows["simulated"]).astype("boolean")
        out[date] = pd.to_datetime(out["model"].map(rows["materialized_at"]), utc=True).dt.date
    return out


def vanished_boards(materialized: dict[str, pd.Timestamp | None], tables_root: str) -> dict[str, str]:
    """{board: warning} per materialized board whose table file is gone (else it drops out silently)."""
    from soco_pipeline.storage import exists, join

    out = {}
    for board, when in sorted(materialized.items()):
        path = join(tables_root, f"{board}.parquet")  # a board is one unpartitioned table
        if when is not None and not exists(path):
            out[board] = (
                f"{board} was materialized at {when:%Y-%m-%d %H:%M} UTC but its file {path} is gone (deleted "
                f"or moved?), so its models are missing here; re-materialize {board} (and the summary after it)"
            )
    return out
