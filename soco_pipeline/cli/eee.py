"""`soco export-results MODEL OUT --format eee`: MODEL's results as Every Eval Ever records
(trust/eee_export.py) with a per-sample sidecar; `--published` writes a published model's quoted figures
instead."""

from __future__ import annotations

import argparse
import sys

import pandas as pd

from soco_pipeline.settings import Settings


def family_scores(settings: Settings, family: str, model: str) -> tuple[pd.DataFrame | None, str]:
    """(per-sample scores, '') of a backbone in a family, or (None, why)."""
    from soco_pipeline.storage import exists, read_parquet
    from soco_pipeline.tables import table_for
    from soco_pipeline.tasks import family_specs

    watch = family_specs()[family].watch
    if watch is None or watch.paired is None:
        return None, f"{family} declares no per-sample table"
    paired = watch.paired
    names = (paired.table,) if isinstance(paired.table, str) else paired.table
    paths = {n: table_for(n).path(settings.tables_root, model) for n in names}
    paths[paired.samples] = table_for(paired.samples).path(settings.tables_root)
    missing = [p for p in paths.values() if not exists(p)]
    if missing:
        return None, f"no per-sample table at {missing[0]}"
    return paired.scores(model, {n: read_parquet(p) for n, p in paths.items()}), ""


def measured(
    args: argparse.Namespace, settings: Settings
) -> tuple[dict, str, pd.DataFrame | None, str, bool]:
    """(record, kind, per-sample scores or None, why none, simulated) of the model the command names."""
    from soco_pipeline.cli.family_record import record_for
    from soco_pipeline.storage import exists
    from soco_pipeline.tables import table_for
    from soco_pipeline.tasks.core import LVLM_FAMILY, SOCO, all_specs
    from soco_pipeline.trust.records import stored_scores

    family = getattr(args, "family", SOCO.name)
    lvlm = args.lvlm or family == LVLM_FAMILY.name  # `--family lvlm` is `--lvlm`: SOCO's LVLM track
    family = SOCO.name if lvlm else family
    rec = record_for(settings, family, args.backbone, lvlm)
    if family == SOCO.name:  # SOCO's per-sample scores are re-scored from its predictions (or LVLM answers)
        kind = "lvlm" if lvlm else "backbone"
        scores = stored_scores(settings, args.backbone, lvlm)  # under the stored protocol
        return rec, kind, scores, "", settings.source == "embedded"
    declared = all_specs()[family]
    cfg = declared.config(settings)
    simulated = getattr(getattr(cfg, "source", None), "kind", "generated") == "generated"
    # the record's own rule (family_records.load_family_tables): a backbone when its backbone tables exist
    if not any(
        exists(table_for(n).path(settings.tables_root, args.backbone)) for n in declared.record.backbone
    ):
        return rec, "lvlm", None, f"an LVLM's {family} answers have no per-sample table here", simulated
    scores, why = family_scores(settings, family, args.backbone)
    return rec, "backbone", scores, why, simulated


def export_eee(args: argparse.Namespace, settings: Settings) -> int:
    """`soco export-results M OUT --format eee [--family F | --lvlm | --published]`."""
    from soco_pipeline.trust import eee_export as eee

    if getattr(args, "protocol", None):
        print(
            "error: --format eee exports the stored results; --protocol (re-scoring) goes with --format "
            "official or record",
            file=sys.stderr,
        )
        return 2
    if args.published:
        return export_published(args)
    rec, kind, scores, why, simulated = measured(args, settings)
    from soco_pipeline.tasks.core import LVLM_FAMILY

    title = rec["family"] if rec["family"] != LVLM_FAMILY.record_name else "soco (LVLM four-choice)"
    rid, agg = eee.measured_log(rec, kind=kind, simulated=simulated, title=title)
    lines = eee.instance_lines(agg, rec["family"], scores) if scores is not None else None
    how = eee.checked(agg, lines, f"{rec['model']} ({rec['family']})")
    path, sidecar = eee.write_log(args.out, rec["family"], rid, agg, lines)
    side = f"{sidecar} ({len(lines)} samples)" if sidecar else f"no per-sample sidecar ({why or 'no rows'})"
    print(f"wrote {path} ({len(agg['evaluation_results'])} results of {rec['model']}, evaluation_run)")
    print(f"wrote {side}" if sidecar else side)
    print(how)
    return 0


def export_published(args: argparse.Namespace) -> int:
    """The published figures of one model (published.csv) as `documentation` records."""
    from soco_pipeline.published_figures import load_published
    from soco_pipeline.trust import eee_export as eee

    table = load_published()
    rows = table[table["model"] == args.backbone]
    if getattr(args, "family", "soco") != "soco":  # the default (soco) keeps every family of the model
        rows = rows[rows["family"] == args.family]
    if rows.empty:
        print(
            f"error: no published figure of {args.backbone!r} in assets/reference/published.csv; its models: "
            f"{', '.join(sorted(table['model'].unique())[:12])}, ...",
            file=sys.stderr,
        )
        return 2
    retrieved = eee.epoch(pd.Timestamp.now(tz="UTC").isoformat())
    for rid, agg in eee.published_logs(rows, retrieved):
        how = eee.checked(agg, None, f"{args.backbone} (published)")
        family = agg["evaluation_results"][0]["evaluation_name"].split("/")[0]
        path, _ = eee.write_log(args.out, family, rid, agg, None)
        print(f"wrote {path} ({len(agg['evaluation_results'])} published figures, documentation)")
    print(how)
    return 0
