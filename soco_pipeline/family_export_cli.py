"""`soco export-family tpips OUT --format release [--force]`: a family's materialized items in its official
format. TPIPS: the released odd-one-out JSONL (ooo.jsonl, with our extra fields), our 2AFC layout (afc.jsonl)
and every image the lines name, under OUT (docs/tpips.md, "Writing the released format"); read back with
`source: {kind: official, path: OUT}` it gives the same tables."""

from __future__ import annotations

import argparse

from soco_pipeline.settings import Settings

FORMATS = {"tpips": ("release",)}


def cmd_export_family(args: argparse.Namespace, settings: Settings) -> int:
    """Write the family's materialized tables in the chosen official format."""
    from soco_pipeline.storage import exists, read_parquet
    from soco_pipeline.tables import Table
    from soco_pipeline.tasks.tpips.export import export_release

    paths = {a: Table(a, a).path(settings.tables_root) for a in ("tpips_ooo", "tpips_afc", "tpips_images")}
    missing = [p for p in paths.values() if not exists(p)]
    if missing:
        raise FileNotFoundError(
            f"no {missing[0]}: materialize the tpips group first (make demo, or its assets in the UI)"
        )
    tables = {a: read_parquet(p) for a, p in paths.items()}
    counts = export_release(
        tables["tpips_ooo"], tables["tpips_afc"], tables["tpips_images"], args.out, overwrite=args.force
    )
    print(f"wrote the {args.family} {args.format} format to {args.out}: {counts}")
    return 0


def add_command(sub) -> None:
    """Add `soco export-family` to the `soco` parser's subcommands."""
    s = sub.add_parser("export-family", help="write a task family's items in its official (released) format")
    s.add_argument("family", choices=sorted(FORMATS), help="the task family")
    s.add_argument("out", help="output folder (fsspec path)")
    s.add_argument(
        "--format",
        choices=sorted({f for fs in FORMATS.values() for f in fs}),
        default="release",
        help="release: TPIPS's released odd-one-out JSONL plus images",
    )
    s.add_argument("--force", action="store_true", help="replace the files of an existing export")
    s.set_defaults(func=cmd_export_family)
