"""Tables for a terminal of 120 columns, the one printer of the demo, `soco leaderboard` and `soco run`: text
the same in every row once above, a row's reason as a note `[k]`, columns too wide left out and named."""

from __future__ import annotations

import fnmatch
import math
import re
import textwrap
from collections.abc import Sequence

import numpy as np
import pandas as pd

WIDTH = 120
# text columns that explain a board rather than score it: printed once (same in every row) or as notes
NOTE_COLUMNS = tuple(
    "data_source source simulated reason reasons note none_rule judgements subset why".split()
)
NAME_COLUMNS = ("model", "backbone", "name")
CUTS = (28, 22, 16)  # a table too wide has its text cells cut (with an ellipsis) to these lengths in turn
NA = "n/a"


def format_p(p: float | None) -> str:
    """A p-value for people: `< 0.001` below a thousandth, else three decimals (`n/a` when missing)."""
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return NA
    return "< 0.001" if p < 0.001 else f"{p:.3f}"


def _is_p_column(name: str) -> bool:
    low = name.lower()
    return low in ("p", "p_value", "pvalue") or low.startswith("p_") or low.endswith("_p") or "p_value" in low


def _decimals(values: pd.Series) -> int:
    """One decimal on scores (0-100 and the like), three on fractions in [-1, 1]."""
    finite = values[np.isfinite(values)]
    if finite.empty:
        return 1
    return 3 if float(finite.abs().max()) <= 1.0 else 1


def _missing(v) -> bool:
    """True for None, NaN, NaT and pd.NA (not for lists or arrays, whose `isna` is elementwise)."""
    return v is None or (np.ndim(v) == 0 and not isinstance(v, str) and bool(pd.isna(v)))


def column_text(col: pd.Series, decimals: int | None = None) -> list[str]:
    """A column's cells as text (missing -> n/a, floats with their decimals, bools yes/no)."""
    if pd.api.types.is_bool_dtype(col):  # nullable ("boolean"): a not-applicable row's <NA> reads n/a
        return [NA if pd.isna(v) else "yes" if v else "no" for v in col]
    if pd.api.types.is_float_dtype(col):
        if _is_p_column(str(col.name)) and decimals is None:
            return [format_p(v) for v in col]
        d = _decimals(col.astype(float)) if decimals is None else decimals
        return [NA if pd.isna(v) else f"{v:.{d}f}" for v in col]
    if pd.api.types.is_integer_dtype(col):
        return [NA if pd.isna(v) else str(int(v)) for v in col]
    out = []
    for v in col:
        if _missing(v):
            out.append(NA)
        elif isinstance(v, float):
            out.append(f"{v:.{1 if decimals is None else decimals}f}")
        else:
            out.append(str(v).replace("\n", " "))
    return out


def is_number(col: pd.Series) -> bool:
    """Whether a column is numeric and not bool (its cells right-aligned)."""
    return pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col)


def _render(header: list[str], rows: list[list[str]], right: list[bool]) -> list[str]:
    """A GitHub-style pipe table (Markdown that also reads as plain text), numbers right-aligned."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(header)]

    def line(cells: Sequence[str]) -> str:
        return (
            "| "
            + " | ".join(
                c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right, strict=True)
            )
            + " |"
        )

    rule = (
        "|" + "|".join("-" * (w + 1) + (":" if r else "-") for w, r in zip(widths, right, strict=True)) + "|"
    )
    return [line(header), rule, *(line(r) for r in rows)]


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _wrap(text: str, width: int) -> list[str]:
    return textwrap.wrap(text, width, subsequent_indent="  ", break_long_words=True) or [""]


def console_table(
    df: pd.DataFrame,
    title: str | None = None,
    columns: Sequence[str] | None = None,
    full: str | None = None,
    na_reason: str = "no value for this row (not measured, or not applicable to the model's kind)",
    notes: Sequence[str] = (),
    decimals: int | None = None,
) -> str:
    """`df` as a table fitting WIDTH with its notes; `full` names where the full table is."""
    notes = list(notes)
    if df is None or df.empty:
        lines = ([title, ""] if title else []) + ["(no rows yet)"]
        return "\n".join(line for t in lines for line in _wrap(t, WIDTH)) + "\n"
    df = df.reset_index(drop=True)
    shown = [c for c in (columns or df.columns) if c in df.columns]
    name = next((c for c in shown if c in NAME_COLUMNS), shown[0] if shown else None)
    markers: list[list[str]] = [[] for _ in range(len(df))]
    numbered: dict[str, int] = {}
    for col in [c for c in NOTE_COLUMNS if c in df.columns]:
        text = pd.Series(column_text(df[col])).replace({NA: ""})
        values = [v for v in text.unique() if v]
        if not values:
            continue
        if len(values) == 1 and (text == values[0]).all():
            notes.append(f"{col}: {values[0]}")
            continue
        for i, v in enumerate(text):
            if v:
                k = numbered.setdefault(f"{col}: {v}", len(numbered) + 1)
                markers[i].append(f"[{k}]")
    shown = [c for c in shown if c not in NOTE_COLUMNS]
    cells = {c: column_text(df[c], decimals) for c in shown}
    if name in cells:
        cells[name] = [" ".join([n, *m]) for n, m in zip(cells[name], markers, strict=True)]
    notes += [f"[{k}] {text}" for text, k in numbered.items()]
    if any(NA in cells[c] for c in shown):
        notes.append(f"{NA}: {na_reason}")

    def lines_for(cols: list[str], cut: int | None) -> list[str]:
        rows = [
            [_cut(cells[c][i], cut) if cut and c != name else cells[c][i] for c in cols]
            for i in range(len(df))
        ]
        right = [is_number(df[c]) for c in cols]
        return _render([_cut(c, cut) if cut else c for c in cols], rows, right)

    cols: list[str] = list(shown)
    for cut in (None, *CUTS):  # cut long text cells shorter and shorter before leaving a column out
        table = lines_for(cols, cut)
        if max(map(len, table)) <= WIDTH:
            break
    dropped: list[str] = []
    while max(map(len, table)) > WIDTH and len(cols) > 1:
        dropped.insert(0, cols.pop())
        table = lines_for(cols, cut)
    if max(map(len, table)) > WIDTH:  # one column still too wide: cut the name cells too
        table = [_cut(line, WIDTH) for line in table]
    if dropped:
        named = ", ".join(dropped[:12]) + (f" and {len(dropped) - 12} more" if len(dropped) > 12 else "")
        notes.append(f"not shown (too wide): {named}" + (f"; all columns: {full}" if full else ""))
    head = [*_wrap(title, WIDTH), ""] if title else []
    above = [line for n in notes if not n.startswith(("[", NA, "not shown")) for line in _wrap(n, WIDTH)]
    below = [line for n in notes if n.startswith(("[", NA, "not shown")) for line in _wrap(n, WIDTH)]
    return "\n".join([*head, *above, *table, *below]) + "\n"


def records_text(df: pd.DataFrame, decimals: int | None = None) -> str:
    """`df` as one wrapped block per row, for rows of prose that a table would cut."""
    if df is None or df.empty:
        return console_table(pd.DataFrame())
    df = df.reset_index(drop=True)
    cells = {c: column_text(df[c], decimals) for c in df.columns}
    first, *rest = list(df.columns)
    lines: list[str] = []
    for i in range(len(df)):
        lines += _wrap(f"[{i + 1}] {first}: {cells[first][i]}", WIDTH)
        for c in rest:
            lines += textwrap.wrap(
                f"{c}: {cells[c][i]}", WIDTH, initial_indent="    ", subsequent_indent="      "
            ) or [""]
        lines.append("")
    return "\n".join(lines)


def is_prose(df: pd.DataFrame) -> bool:
    """True when a non-note text column has a cell longer than 40 (then `records_text`)."""
    text = [c for c in df.columns if df[c].dtype == object and c not in NOTE_COLUMNS]  # notes print once
    return any(df[c].astype(str).str.len().max() > 40 for c in text) if len(df) else False


def headline_columns(family: str, board: pd.DataFrame) -> list[str]:
    """`family`'s board columns its FamilySpec's `columns` match (patterns too), then its notes."""
    from soco_pipeline.tasks.core import all_specs

    wanted = getattr(all_specs().get(family), "columns", None) or None  # tasks/<family>/, tasks/core.py
    if wanted is None:
        return list(board.columns)
    picked = [c for w in wanted for c in board.columns if fnmatch.fnmatchcase(str(c), w)]
    return list(dict.fromkeys(picked)) + [c for c in NOTE_COLUMNS if c in board.columns]


def _ci_text(value: float, lo: float, hi: float) -> str:
    if pd.isna(value):
        return NA
    return f"{value:.1f}" if pd.isna(lo) or pd.isna(hi) else f"{value:.1f} [{lo:.1f}, {hi:.1f}]"


ROLE_MARK = {"control": " (control)", "ceiling": " (ceiling)"}  # trust/roles.py: checks, not models


def _role(h: pd.DataFrame) -> pd.Series:
    """Each headline row's role (model | control | ceiling); a table stored before roles existed: model."""
    return h["role"].fillna("model").astype(str) if "role" in h.columns else pd.Series("model", index=h.index)


def with_ranks(headlines: pd.DataFrame) -> pd.DataFrame:
    """The long headline table with `rank` and `of` per family, among the models only."""
    h = headlines.copy()
    h["role"] = _role(h)
    models = h[h["role"] == "model"]
    h["rank"] = models.groupby("family")["value"].rank(ascending=False, method="min").reindex(h.index)
    h["of"] = h["family"].map(models.groupby("family")["value"].count()).where(h["role"] == "model")
    return h


def summary_frame(headlines: pd.DataFrame) -> pd.DataFrame:
    """One row per model, one `value [95% CI]` column per family; checks last, marked."""
    from soco_pipeline.tasks.core import SOCO

    h = headlines.copy()
    h["role"] = _role(h)
    h["label"] = h["family"].astype(str)
    h["text"] = [_ci_text(v, lo, hi) for v, lo, hi in zip(h["value"], h["ci_low"], h["ci_high"], strict=True)]
    first = h["family"].map(lambda f: (f != SOCO.name, f))  # SOCO's headline first, then the families by name
    order = list(dict.fromkeys(h.assign(_o=first).sort_values("_o", kind="stable")["label"]))
    wide = h.pivot_table(index="model", columns="label", values="text", aggfunc="first").reindex(
        columns=order
    )
    # models first, then controls, then ceilings; each by the first column's headline (SOCO's when
    # present), then the best of the others
    first_col = (
        h[h["label"] == order[0]].groupby("model")["value"].first() if order else pd.Series(dtype=float)
    )
    check = h.assign(_c=h["role"].map({"model": 0, "control": 1, "ceiling": 2})).groupby("model")["_c"].max()
    key = pd.DataFrame(
        {
            "check": check.reindex(wide.index),
            "first": first_col.reindex(wide.index),
            "best": h.groupby("model")["value"].max(),
        }
    )
    key = key.sort_values(["check", "first", "best"], ascending=[True, False, False], na_position="last")
    wide = wide.loc[key.index]
    marks = key["check"].map({1: ROLE_MARK["control"], 2: ROLE_MARK["ceiling"]}).fillna("")
    wide.index = pd.Index(key.index + marks, name="model")
    return wide.reset_index().rename_axis(columns=None).fillna(NA)


def headline_metrics(headlines: pd.DataFrame) -> str:
    """What each family's summary column holds ('soco = ...; mmvm = ... (best method per model)')."""
    from soco_pipeline.tasks.core import SOCO

    parts = []
    order = sorted(headlines["family"].unique(), key=lambda f: (f != SOCO.name, f))  # the columns' order
    for family in order:
        metrics = headlines.loc[headlines["family"] == family, "metric"]
        names = {re.sub(r"\s*\[[^\]]*\]$", "", str(m)) for m in metrics}
        best = any(re.search(r"\[[^\]]*\]$", str(m)) for m in metrics)
        parts.append(f"{family} = {'; '.join(sorted(names))}" + (" (best method per model)" if best else ""))
    return "; ".join(parts)


def summary_text(headlines: pd.DataFrame, where: Sequence[str] = ()) -> str:
    """The summary table with the simulated families and dates named once, then `where`."""
    if headlines is None or headlines.empty:
        return console_table(pd.DataFrame(), "Summary: no model has a headline yet")
    notes = []
    sim = sorted(headlines.loc[headlines["simulated"].fillna(False).astype(bool), "family"].unique())
    if sim:
        notes.append(f"simulated data (generated here, not the published sets): {', '.join(sim)}")
    if "materialized_at" in headlines.columns and headlines["materialized_at"].notna().any():
        when = pd.to_datetime(headlines["materialized_at"], utc=True, errors="coerce").dropna()
        if len(when):
            notes.append(f"materialized {when.min():%Y-%m-%d %H:%M} to {when.max():%Y-%m-%d %H:%M} UTC")
    notes.insert(0, "headlines: " + headline_metrics(headlines))
    if (_role(headlines) != "model").any():
        from soco_pipeline.trust.roles import ROLE_NOTE

        notes.insert(1, ROLE_NOTE)
    title = "Summary: one row per model, each family's headline (0-100) with its 95% CI"
    na = "the family has no result for this model (not run yet, or its kind cannot take the task)"
    table = console_table(summary_frame(headlines), title, na_reason=na)
    extra = [line for n in [*notes, *where] for line in _wrap(n, WIDTH)]
    return table + ("\n".join(extra) + "\n" if extra else "")


def model_card(headlines: pd.DataFrame, model: str) -> str:
    """One model's headline per family with its CI and rank (checks named, not ranked)."""
    h = with_ranks(headlines)
    mine = h[h["model"] == model]
    if mine.empty:
        return console_table(pd.DataFrame(), f"{model}: no headline yet")
    card = pd.DataFrame(
        {
            "family": mine["family"],
            "metric": mine["metric"],
            "value [95% CI]": [
                _ci_text(v, lo, hi)
                for v, lo, hi in zip(mine["value"], mine["ci_low"], mine["ci_high"], strict=True)
            ],
            "rank": [
                f"{role}, not ranked" if role != "model" else NA if pd.isna(r) else f"{int(r)} of {int(o)}"
                for r, o, role in zip(mine["rank"], mine["of"], mine["role"], strict=True)
            ],
            "n": mine["n"].astype("Int64") if "n" in mine.columns else NA,
            "simulated data": mine["simulated"].fillna(False).astype(bool),
        }
    )
    return console_table(card, f"{model}: headline per family")


def headlines_from_boards(
    boards: dict[str, pd.DataFrame], roles: dict[str, str] | None = None, embedded: bool = True
) -> pd.DataFrame:
    """`model_headlines` from `boards` by family name over all_specs(), when not materialized."""
    from soco_pipeline.tasks.core import all_specs
    from soco_pipeline.trust.headline import model_headlines

    specs = {name: s for name, s in all_specs().items() if s.headline is not None}
    by_board = {s.headline.board: boards.get(name) for name, s in specs.items()}
    return model_headlines(by_board, {}, [s.headline for s in specs.values()], embedded, roles)
