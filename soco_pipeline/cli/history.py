"""`soco drop-snapshot FAMILY MODEL DATA_VERSION`: move one snapshot of the regression watch's archive
(`<storage>/history/<family>/<model>/<data_version>.{json,parquet}`) into the archive's `dropped/` folder, for a
snapshot that is damaged (the watch then says "not comparable" and names this command). Nothing is deleted."""

from __future__ import annotations

import argparse


def cmd_drop_snapshot(args: argparse.Namespace, settings) -> int:
    """Move the snapshot's files aside and say what the watch does next."""
    from soco_pipeline.tasks.core import all_specs
    from soco_pipeline.trust.history import drop_snapshot

    watched = {name: spec.watch.history for name, spec in all_specs().items() if spec.watch}
    if args.family not in watched:
        raise ValueError(
            f"no regression watch of a family named {args.family!r}; the watched families: {', '.join(watched)}"
        )
    moved = drop_snapshot(settings.storage_root, args.family, args.model, args.data_version)
    asset = watched[args.family]
    print("\n".join(f"moved {p}" for p in moved))
    print(
        f"the watch now compares with the snapshot before it: re-materialize {asset} for {args.model} (or wait for "
        "the next run of it) to see the verdict"
    )
    return 0


def add_command(sub) -> None:
    """Add `drop-snapshot` to the `soco` parser's subcommands."""
    s = sub.add_parser(
        "drop-snapshot", help="move a damaged snapshot of the regression watch aside (docs/faults.md)"
    )
    s.add_argument(
        "family", help="a family with a regression watch (the archive's folder under <storage>/history/)"
    )
    s.add_argument("model", help="the backbone (or model) name")
    s.add_argument("data_version", help="the snapshot's data version (its file name without .json)")
    s.set_defaults(func=cmd_drop_snapshot)
