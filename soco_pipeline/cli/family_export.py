"""`soco export-family FAMILY OUT --format F [--force]`: a family's materialized items in one of the formats
its `tasks/<family>/export.py` `FORMATS` offers (docs/tpips.md, "Writing the released format")."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import pkgutil

from soco_pipeline.settings import Settings


def family_formats() -> dict[str, dict]:
    """{family: its FORMATS} of every task family with an `export` module."""
    import soco_pipeline.tasks as tasks

    found = {}
    for mod in pkgutil.iter_modules(tasks.__path__):
        name = f"soco_pipeline.tasks.{mod.name}.export"
        if mod.ispkg and importlib.util.find_spec(name) is not None:
            found[mod.name] = importlib.import_module(name).FORMATS
    return found


def cmd_export_family(args: argparse.Namespace, settings: Settings) -> int:
    """Write the family's materialized tables in the chosen official format."""
    from soco_pipeline.storage import exists, read_parquet
    from soco_pipeline.tables import Table

    formats = family_formats()[args.family]
    if args.format not in formats:
        raise ValueError(f"family {args.family!r} has no format {args.format!r}; it has {sorted(formats)}")
    names, write, _ = formats[args.format]
    paths = {a: Table(a, a).path(settings.tables_root) for a in names}
    missing = [p for p in paths.values() if not exists(p)]
    if missing:
        raise FileNotFoundError(
            f"no {missing[0]}: materialize the {args.family} group first (make demo, or its assets in the UI)"
        )
    counts = write({a: read_parquet(p) for a, p in paths.items()}, args.out, args.force)
    print(f"wrote the {args.family} {args.format} format to {args.out}: {counts}")
    return 0


def add_command(sub) -> None:
    """Add `soco export-family` to the `soco` parser's subcommands."""
    formats = family_formats()
    s = sub.add_parser("export-family", help="write a task family's items in one of its official formats")
    s.add_argument("family", choices=sorted(formats), help="the task family")
    s.add_argument("out", help="output folder (fsspec path)")
    s.add_argument(
        "--format",
        default="release",
        help="; ".join(f"{fam} {f}: {h}" for fam, fs in formats.items() for f, (_, _, h) in fs.items()),
    )
    s.add_argument("--force", action="store_true", help="replace the files of an existing export")
    s.set_defaults(func=cmd_export_family)
