"""`python -m soco_pipeline.lvlm`: VLMEvalKit interop and one-off runs outside Dagster.

export DIR                 lvlm_items (materialized) -> DIR/soco_pipeline_{vis,vis_desc,desc}.tsv
import TSV... --out FILE   official SOCO-LVLM / VLMEvalKit TSVs -> an items Parquet file
run SPEC --items FILE      ask a model the items of a Parquet file; print its scores
score WORKBOOK...          score VLMEvalKit prediction workbooks (xlsx / tsv) with the official parser
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from soco_pipeline.settings import Settings
from soco_pipeline.storage import join, read_parquet, write_parquet_atomic


def cmd_export(args: argparse.Namespace, settings: Settings) -> int:
    """Write the materialized items as one VLMEvalKit TSV per setting."""
    from soco_pipeline.lvlm.vlmevalkit import EXPORT_NAMES, export_tsv

    items = read_parquet(join(settings.tables_root, "lvlm_items.parquet"))
    out = Path(args.dir)
    for setting, name in EXPORT_NAMES.items():
        n = export_tsv(items, setting, str(out / f"{name}.tsv"))
        print(f"{out / f'{name}.tsv'}: {n} rows")
    print(
        f"run them with VLMEvalKit: copy the files into $LMUData and `python run.py --data {' '.join(EXPORT_NAMES.values())}"
        f" --model <model>`"
    )
    return 0


def cmd_import(args: argparse.Namespace, settings: Settings) -> int:
    """Read TSVs into one items table (images decoded under storage/lvlm/images)."""
    from soco_pipeline.lvlm.vlmevalkit import import_tsv

    frames = [import_tsv(p, join(settings.lvlm_root, "images")) for p in args.tsv]
    items = pd.concat(frames, ignore_index=True)
    write_parquet_atomic(items, args.out)
    print(
        f"{args.out}: {len(items)} rows; "
        + ", ".join(f"{k}: {v}" for k, v in items.setting.value_counts().items())
    )
    return 0


def cmd_run(args: argparse.Namespace, settings: Settings) -> int:
    """Ask one model (a spec file) the items of a Parquet file, cached like the pipeline; print the scores."""
    from soco_pipeline.lvlm.backends import build_backend
    from soco_pipeline.lvlm.cache import AnswerCache
    from soco_pipeline.lvlm.metrics import lvlm_metrics
    from soco_pipeline.lvlm.run import run_model
    from soco_pipeline.lvlm.specs import load_spec

    spec = load_spec(args.spec)
    items = read_parquet(args.items)
    result = run_model(
        items,
        spec,
        build_backend(spec),
        AnswerCache(join(settings.lvlm_root, "cache")),
        log=lambda m: print(m, file=sys.stderr),
    )
    if args.out:
        write_parquet_atomic(result.answers, args.out)
    m = lvlm_metrics(result.answers.fillna({"pair_group": "", "supercategory": ""}))
    print(
        m[m.scope == "all"]
        .pivot_table(index="setting", columns="metric", values="value")
        .round(1)
        .to_string()
    )
    return 0


def cmd_score(args: argparse.Namespace, settings: Settings) -> int:
    """Print average and circular accuracy of each workbook."""
    from soco_pipeline.lvlm.vlmevalkit import score_workbook

    for path in args.workbook:
        s = score_workbook(path)
        print(
            f"{path}: rows {s['rows']}, groups {s['groups']}, average {s['average']:.1f}, "
            f"circular {s['circular']:.1f}"
        )
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    ap = argparse.ArgumentParser(
        prog="python -m soco_pipeline.lvlm",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("export")
    p.add_argument("dir")
    p = sub.add_parser("import")
    p.add_argument("tsv", nargs="+")
    p.add_argument("--out", required=True)
    p = sub.add_parser("run")
    p.add_argument("spec")
    p.add_argument("--items", required=True)
    p.add_argument("--out")
    p = sub.add_parser("score")
    p.add_argument("workbook", nargs="+")
    args = ap.parse_args(argv)
    handlers = {"export": cmd_export, "import": cmd_import, "run": cmd_run, "score": cmd_score}
    try:
        return handlers[args.cmd](args, Settings())
    except (FileNotFoundError, ValueError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
