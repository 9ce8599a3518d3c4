"""`soco score-workbook FAMILY FILE`: score a workbook of outside predictions with the family's own extraction
and metrics, through its FamilySpec's `workbook` (docs/results.md)."""

from __future__ import annotations

import argparse
import importlib

from soco_pipeline.storage import write_bytes_atomic

SHOWN = ["breakdown", "key", "n_items", "accuracy", "ci_low", "ci_high", "random_expected"]


def scorer_for(family: str):
    """The workbook scorer a family declares (ValueError naming the families that have one)."""
    from soco_pipeline.tasks import family_specs

    scorers = {name: spec.workbook for name, spec in family_specs().items() if spec.workbook}
    if family not in scorers:
        raise ValueError(f"no workbook scorer for family {family!r}; families with one: {sorted(scorers)}")
    module, _, name = scorers[family].partition(":")
    return getattr(importlib.import_module(module), name)


def cmd_score_workbook(args: argparse.Namespace, settings) -> int:
    """Print a workbook's metrics (and write its per-row verdicts with --out)."""
    from soco_pipeline.report.csv_safe import neutralise_formulas, safe_csv
    from soco_pipeline.report.formats import format_frame

    score = scorer_for(args.family)(args.file, args.judge, args.judge_spec, settings.lvlm_cache_root)
    shown = score.metrics[SHOWN]  # its keys come from the workbook: a CSV gets no live formula from them
    print(format_frame(neutralise_formulas(shown) if args.format == "csv" else shown, args.format), end="")
    print(score.summary)
    if (
        args.out
    ):  # a CSV's formula-like cells neutralised (report/csv_safe.py); Parquet keeps them as they are
        data = (
            score.rows.to_parquet(index=False)
            if args.out.endswith(".parquet")
            else safe_csv(score.rows).encode()
        )
        write_bytes_atomic(args.out, data)
        print(f"per-row verdicts: {args.out}")
    return 0


def add_command(sub) -> None:
    """Add `score-workbook` to the `soco` parser's subcommands."""
    s = sub.add_parser(
        "score-workbook", help="score a prediction workbook made elsewhere (a family's metrics)"
    )
    s.add_argument("family", help="a family whose FamilySpec declares a workbook scorer")
    s.add_argument("file", help="the workbook (.xlsx, .tsv or .csv with a prediction column)")
    s.add_argument(
        "--judge", choices=["off", "matcher", "yes_no"], default="off", help="default: exact matching"
    )
    s.add_argument(
        "--judge-spec", default=None, help="LVLM spec file of the judge (any OpenAI-compatible server)"
    )
    s.add_argument("--out", default=None, help="write the per-row verdicts here (.csv or .parquet)")
    s.add_argument("--format", choices=["table", "csv", "json", "markdown"], default="table")
    s.set_defaults(func=cmd_score_workbook)
