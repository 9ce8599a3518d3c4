"""`soco leaderboard [--family F] [--columns ...] [--format ...]`: one family's board from the results
database, its headline columns in 120 columns by default (report/console.py)."""

from __future__ import annotations

import argparse
import sys

import pandas as pd

from soco_pipeline.report.formats import FORMATS, format_frame
from soco_pipeline.settings import Settings
from soco_pipeline.tasks.core import SOCO, all_specs


def pick_columns(board: pd.DataFrame, columns: str | None, default: list[str]) -> list[str]:
    """The columns to print: `default`, all for 'all', else the comma list (checked)."""
    if not columns:
        return default
    if columns.strip() == "all":
        return list(board.columns)
    asked = [c.strip() for c in columns.split(",") if c.strip()]
    unknown = [c for c in asked if c not in board.columns]
    if unknown:
        raise ValueError(
            f"no column {', '.join(map(repr, unknown))} on this board; its columns: {', '.join(board.columns)}"
        )
    return asked


def cmd_leaderboard(args: argparse.Namespace, settings: Settings) -> int:
    """Print one family's board (default: SOCO's)."""
    from soco_pipeline.analysis.leaderboard import console_board
    from soco_pipeline.report.console import console_table, headline_columns
    from soco_pipeline.report.results_db import query

    family, known = args.family, list(all_specs())  # SOCO, its LVLM track and every declared family
    if family not in known:
        raise ValueError(f"no family {family!r}: choose from {', '.join(known)}")
    order = f" ORDER BY {SOCO.headline_value} DESC" if family == SOCO.name else ""
    head = all_specs()[family].headline  # its board: the headline's, else `<family>_leaderboard`
    view = head.board if head is not None else f"{family}_leaderboard"
    board = query(settings.duckdb_path, f"SELECT * FROM {view}{order}", settings.tables_root)
    if args.format == "table":
        shown = console_board(board) if family == SOCO.name and not args.columns else board
        cols = pick_columns(board, args.columns, headline_columns(family, shown))
        more = "--columns all --format csv (every column)"
        from soco_pipeline.tasks import family_input_notes

        notes = [n for f, n in family_input_notes(settings).items() if f == family]
        print(console_table(shown, f"{family} board", cols, full=more, notes=notes), end="")
        return 0
    cols = pick_columns(board, args.columns, list(board.columns))
    sys.stdout.write(format_frame(board[cols], args.format))
    return 0


def add_arguments(s: argparse.ArgumentParser) -> None:
    """The options of `soco leaderboard`."""
    s.add_argument(
        "--family", default=SOCO.name, help="whose board: soco, lvlm or a task family (default: soco)"
    )
    s.add_argument(
        "--columns",
        default=None,
        help="comma-separated columns, or 'all' (default: the headline columns for a table, all otherwise)",
    )
    s.add_argument(
        "--format",
        choices=list(FORMATS),
        default="table",
        help="table: 120 columns, headline columns (default); csv, json, markdown: every column",
    )
    s.set_defaults(func=cmd_leaderboard)
