"""`soco` commands for trusting and comparing results (docs/results.md): export-results --format record,
diff-runs, compare, evaluate, show, report."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from soco_pipeline.settings import Settings, variable


def rescored_backbone_metrics(settings: Settings, backbone: str, protocol_path: str | None):
    """(metrics, protocol) of a backbone: stored, or re-scored under `--protocol`."""
    from soco_pipeline.storage import read_parquet
    from soco_pipeline.tables import table_for
    from soco_pipeline.trust.protocol_check import checked_protocol
    from soco_pipeline.trust.records import load_backbone_tables, rescored_metrics

    protocol = checked_protocol(settings, backbone, protocol_path)
    metrics = read_parquet(table_for("metrics").path(settings.tables_root, backbone))
    if protocol_path is None:
        return metrics, protocol
    tables = load_backbone_tables(settings.tables_root, backbone)
    tables["taxonomy"] = read_parquet(table_for("taxonomy").path(settings.tables_root))
    return rescored_metrics(tables, protocol), protocol


def export_record(args: argparse.Namespace, settings: Settings) -> int:
    """`soco export-results B OUT --format record`: write the results record of a backbone (or --lvlm model)."""
    from soco_pipeline.cli.family_record import record_for
    from soco_pipeline.trust.provenance import write_record

    rec = record_for(settings, args.family, args.backbone, args.lvlm, args.protocol)
    write_record(rec, args.out)

    def f(v) -> str:
        return "  n/a" if v is None else f"{v:5.1f}"

    for metric, r in rec["results"].items():
        lo, hi = r["ci95_boot_category"]
        how = "bootstrap over categories"
        if lo is None and hi is None:  # stored aggregates (task families): the interval from their SE
            (lo, hi), how = r["ci95_cluster_image_logit"], "from the SE, logit scale"
        print(f"{metric:22s} {f(r['value'])}  95% CI ({how}) [{f(lo)}, {f(hi)}]")
    print(f"task hashes: {rec['task_hashes']}; partial: {rec['subset']['partial']}\nwrote {args.out}")
    return 0


def export_hub(args: argparse.Namespace, settings: Settings) -> int:
    """`soco export-results M OUT --format hub`: the record as the Hub's `.eval_results/` YAML."""
    from soco_pipeline.trust.hub_export import write_hub_results

    if not args.dataset_id:
        print(
            "error: --format hub needs --dataset-id <owner>/<name>, the Hub id of the benchmark dataset the "
            "results belong to (the Hub lists them under that dataset's leaderboard)",
            file=sys.stderr,
        )
        return 2
    from soco_pipeline.cli.family_record import record_for
    from soco_pipeline.tasks.core import SOCO

    rec = record_for(settings, SOCO.name, args.backbone, args.lvlm)  # --family: SOCO's records only
    notes = (
        "simulated data: soco_pipeline's embedded generator, not the published benchmark's images"
        if settings.source == "embedded"
        else ""
    )
    path = write_hub_results(rec, args.out, args.dataset_id, notes)
    print(
        f"wrote {path} ({len(rec['results'])} results of {rec['model']}); open a pull request on the model repo"
    )
    return 0


def cmd_diff_runs(args: argparse.Namespace, settings: Settings) -> int:
    """Say where two results records differ; exit 0 when their inputs (task hashes) are identical, else 1."""
    from soco_pipeline.trust.provenance import diff_records, read_record

    d = diff_records(read_record(args.a), read_record(args.b))
    print("inputs: identical (every task hash agrees)" if d["same_inputs"] else "inputs: DIFFERENT")
    for t, (ha, hb) in d["task_hashes"].items():
        print(f"  task {t}: {ha} vs {hb}")
    for t, s in d["samples"].items():
        for what in ("changed", "only_in_a", "only_in_b"):
            if s[what]:
                shown = ", ".join(s[what][: args.max_ids])
                more = f" (+{len(s[what]) - args.max_ids} more)" if len(s[what]) > args.max_ids else ""
                print(f"  {t} {what.replace('_', ' ')}: {len(s[what])}: {shown}{more}")
    for title, block in (
        ("settings and results", d["keys"]),
        ("volatile (date, timing, environment, git)", d["volatile"]),
    ):
        if block:
            print(f"{title} that differ:")
            for k, (va, vb) in block.items():
                print(f"  {k}: {json.dumps(va, default=str)} vs {json.dumps(vb, default=str)}")
    return 0 if d["same_inputs"] else 1


def cmd_compare(args: argparse.Namespace, settings: Settings) -> int:
    """Paired difference A - B on the pairs (items) both scored: delta, 95% CI, sign test per category."""
    from soco_pipeline.cli.model_names import check_backbone, check_lvlm
    from soco_pipeline.evaluation.stats import compare
    from soco_pipeline.trust.records import stored_scores

    for name in (args.a, args.b):
        check_lvlm(settings, name) if args.lvlm else check_backbone(settings, name)
    if args.metric and not args.lvlm:  # before any table is read: a family metric is refused at once
        from soco_pipeline.analysis.leaderboard import LEVEL_COLUMNS

        _refuse_metrics([m for m in args.metric if m not in LEVEL_COLUMNS], LEVEL_COLUMNS, "SOCO backbone")
    a, b = (stored_scores(settings, m, args.lvlm, args.protocol) for m in (args.a, args.b))
    overall, per_cat = compare(
        a, b, reduction="pooled" if args.lvlm else "official", n_boot=args.n_boot, seed=args.seed
    )
    if args.metric:
        supported = sorted(overall.metric.unique())
        what = "LVLM (--lvlm)" if args.lvlm else "SOCO backbone"
        _refuse_metrics([m for m in args.metric if m not in supported], supported, what)
        overall, per_cat = (
            overall[overall.metric.isin(args.metric)],
            per_cat[per_cat.metric.isin(args.metric)],
        )
    print(f"{args.a} - {args.b} (points; 95% CI: bootstrap over categories; sign test over pairs/items)")
    print(compare_text(overall, args.format), end="")
    if args.per_category:
        print("\nper category:")
        print(compare_text(per_cat, args.format), end="")
    return 0


def _refuse_metrics(unknown: list[str], supported, what: str) -> None:
    """A ValueError naming the metrics `soco compare` supports when `unknown` is not empty."""
    if unknown:
        raise ValueError(
            f"soco compare does not compare {', '.join(map(repr, unknown))}: it compares the {what} metrics "
            f"{', '.join(supported)} on the pairs both models scored. The other families' boards (MMVM, "
            "FG-BMK, TPIPS) have no paired per-item scores here: see `soco leaderboard --family F`"
        )


def compare_text(df, fmt: str) -> str:
    """A comparison table as text: csv/json keep every digit, table and Markdown round."""
    from soco_pipeline.report.console import console_table, format_p
    from soco_pipeline.report.formats import format_frame

    if fmt in ("csv", "json"):
        return format_frame(df, fmt)
    if fmt == "table":  # the models are in the heading line; the CI as one text column: it fits 120 columns
        shown = df.drop(columns=["model_a", "model_b", "n_categories"], errors="ignore")
        lo, hi = "ci95_lo_boot_category", "ci95_hi_boot_category"
        if lo in shown.columns:
            ci = [f"[{a:.1f}, {b:.1f}]" for a, b in zip(shown[lo], shown[hi], strict=True)]
            shown = shown.drop(columns=[lo, hi])
            shown.insert(shown.columns.get_loc("delta") + 1, "95% CI", ci)
        return console_table(shown)
    shown = df.round(3).astype(object)
    for col in [c for c in df.columns if str(c).endswith("_p")]:
        shown[col] = [format_p(v) for v in df[col]]
    return format_frame(shown, fmt)


def cmd_evaluate(args: argparse.Namespace, settings: Settings) -> int:
    """Materialize one backbone's predictions to record on a subset, then the board and database."""
    import dagster as dg

    from soco_pipeline.defs.definitions import build_definitions

    ids = [i for i in (args.pair_ids or "").split(",") if i]
    if args.pair_ids_file:
        ids += [ln.strip() for ln in Path(args.pair_ids_file).read_text().splitlines() if ln.strip()]
    cfg = {"limit": args.limit, "pair_ids": ids, "seed": args.seed, "panels": args.panels}
    # the environment as this command read it (SOCO_STORAGE, SOCO_BACKBONES_DIR, ...), not at import time
    defs = build_definitions(**settings.definition_overrides(), device=args.device)
    from soco_pipeline.cli.model_names import check_backbone

    check_backbone(settings, args.backbone, materialized=False)  # a typo must not become a partition
    from soco_pipeline.cli.project import prepare_instance

    prepare_instance()  # DAGSTER_HOME: the Makefile's default has its dagster.yaml
    instance = dg.DagsterInstance.get()
    if args.backbone not in instance.get_dynamic_partitions("backbones"):
        instance.add_dynamic_partitions("backbones", [args.backbone])
    per = dg.AssetSelection.assets(
        "feature_manifest", "predictions", "four_choice_predictions", "metrics", "results_record"
    )
    run_config = {"ops": {"predictions": {"config": cfg}, "four_choice_predictions": {"config": cfg}}}
    for selection, partition, rc in (
        (per, args.backbone, run_config),
        (dg.AssetSelection.assets("leaderboard", "results_database"), None, None),
    ):
        result = dg.materialize(
            list(defs.assets),
            selection=selection,
            instance=instance,
            resources=defs.resources,
            partition_key=partition,
            run_config=rc,
            raise_on_error=False,
        )
        if not result.success:
            print("error: the run failed; see `make ui` for its logs", file=sys.stderr)
            return 1
    rule = "the full sample" if args.limit is None and not ids else f"limit={args.limit}, {len(ids)} ids"
    print(
        f"evaluated {args.backbone} on {rule}; its leaderboard row is marked partial unless the sample is full"
    )
    return 0


def cmd_show(args: argparse.Namespace, settings: Settings) -> int:
    """Render one prediction panel (source + query, target + GT + prediction, similarity heatmap) as a PNG."""
    from soco_pipeline.cli.model_names import check_backbone
    from soco_pipeline.evaluation.protocol import load_protocol
    from soco_pipeline.report.panels import render_stored_panel

    check_backbone(settings, args.backbone)
    out = args.out or f"panel-{args.backbone}-{args.pair_id}.png"
    info = render_stored_panel(
        settings, args.backbone, args.pair_id, args.keypoint, out, load_protocol(args.protocol)
    )
    print(
        f"wrote {out}: keypoint {info['keypoint']}, error {info['error_px']:.1f} px "
        f"({'correct' if info['correct'] else 'wrong'} at alpha {info['alpha']})"
    )
    return 0


def missing_boards_now(tables_root: str) -> dict[str, str]:
    """The vanished boards of the instance at $DAGSTER_HOME ({} without one)."""
    import dagster as dg

    from soco_pipeline.defs.shared.boards import board_materializations
    from soco_pipeline.trust.headline import vanished_boards

    home = variable("DAGSTER_HOME")
    if not home or not (Path(home) / "dagster.yaml").is_file():
        return {}
    with dg.DagsterInstance.get() as instance:
        return vanished_boards(board_materializations(instance), tables_root)


def cmd_report(args: argparse.Namespace, settings: Settings) -> int:
    """Write the static results page under storage/report/ (and serve it on 127.0.0.1 with --serve)."""
    from soco_pipeline.report.page import build_report, serve_report

    gone = missing_boards_now(settings.tables_root)  # boards materialized whose file is gone: warned
    for text in gone.values():
        print(f"warning: {text}", file=sys.stderr)
    index = build_report(settings, args.out or None, missing_boards=gone)
    print(f"wrote {index} (open it as file://{Path(index).resolve()})")
    if args.single_file:
        from soco_pipeline.report.single_file import write_single_file

        single = write_single_file(index, args.single_file)
        print(f"wrote {single} (one file, its images inlined: open it anywhere)")
    if args.serve:
        serve_report(Path(index).parent, port=args.port)
    return 0


def add_commands(sub) -> None:
    """Add the commands of this module to the `soco` parser's subcommands."""
    s = sub.add_parser("diff-runs", help="where two results records differ (inputs, samples, settings)")
    s.add_argument("a")
    s.add_argument("b")
    s.add_argument("--max-ids", type=int, default=10, help="ids listed per kind of difference")
    s.set_defaults(func=cmd_diff_runs)

    s = sub.add_parser("compare", help="paired difference of two backbones (or --lvlm models) with CIs")
    s.add_argument("a")
    s.add_argument("b")
    s.add_argument("--lvlm", action="store_true", help="A and B are LVLM specs (their stored answers)")
    s.add_argument("--metric", action="append", help="only this metric (repeatable), e.g. soc")
    s.add_argument("--per-category", action="store_true", help="also the per-category deltas and sign tests")
    s.add_argument("--n-boot", type=int, default=2000)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument(
        "--protocol", default=None, help="protocol file (re-scores stored predictions; no model runs)"
    )
    s.add_argument("--format", choices=["table", "csv", "json", "markdown"], default="table")
    s.set_defaults(func=cmd_compare)

    s = sub.add_parser("evaluate", help="evaluate one backbone on a deterministic subset (a partial run)")
    s.add_argument("backbone")
    s.add_argument("--limit", type=int, default=None, help="pairs per category")
    s.add_argument("--pair-ids", default=None, help="comma-separated pair ids")
    s.add_argument("--pair-ids-file", default=None, help="a file with one pair id per line")
    s.add_argument("--seed", type=int, default=0, help="order of the pairs --limit keeps")
    s.add_argument("--panels", type=int, default=4, help="prediction panels to draw")
    s.add_argument("--device", default="auto", help="matching device: auto | cpu | cuda")
    s.set_defaults(func=cmd_evaluate)

    s = sub.add_parser("show", help="render the prediction panel of one pair (PNG)")
    s.add_argument("pair_id")
    s.add_argument("--backbone", required=True)
    s.add_argument("--keypoint", default=None, help="source keypoint (default: the pair's first scored one)")
    s.add_argument("--out", default=None, help="PNG path (default: panel-<backbone>-<pair>.png)")
    s.add_argument("--protocol", default=None)
    s.set_defaults(func=cmd_show)

    s = sub.add_parser("report", help="write the static results page (storage/report/index.html)")
    s.add_argument("--out", default=None, help="folder (default: <storage>/report)")
    s.add_argument("--serve", action="store_true", help="then serve it on 127.0.0.1 until Ctrl-C")
    s.add_argument("--port", type=int, default=0, help="--serve port (0: a free one)")
    s.add_argument(
        "--single-file",
        default=None,
        metavar="OUT.html",
        help="also write the page as one HTML file, its images inlined (base64 data URIs)",
    )
    s.set_defaults(func=cmd_report)
