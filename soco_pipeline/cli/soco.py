"""`soco` command line: SQL over the results, the leaderboard, adding a backbone spec."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from soco_pipeline.settings import Settings, variable

# the commands whose parser is built alone (`build_parser(command)`): the others' options import their command
# modules (the task families, the run and trust commands), which a query or a board does not need
LEAN_COMMANDS = ("sql", "leaderboard")


def cmd_sql(args: argparse.Namespace, settings: Settings) -> int:
    """Run a SQL query against storage/results.duckdb and print the rows (table, csv, json or markdown)."""
    from soco_pipeline.report.formats import format_query
    from soco_pipeline.report.results_db import query

    rows = query(settings.duckdb_path, args.query, settings.tables_root)
    print(format_query(rows, args.format, args.round), end="")
    return 0


def cmd_add_backbone(args: argparse.Namespace, settings: Settings) -> int:
    """Validate a backbone spec file and copy it into the backbones folder (a new partition)."""
    from soco_pipeline.backbones.validate import checked_spec

    src = Path(args.spec)
    # The fields, the weights (unless skipped) and the kind's checks (timm: a ViT with patch tokens);
    # the same function the sensor, the demo and each partition's run use.
    spec = checked_spec(src, weights=not args.skip_weights_check)
    dest_dir = Path(settings.backbones_dir)
    dest = dest_dir / f"{spec.name}.yaml"
    if dest.exists() and not args.force:
        print(f"error: {dest} already exists; pass --force to replace it", file=sys.stderr)
        return 2
    tmp = dest_dir / f".{dest.name}.tmp"
    shutil.copyfile(src, tmp)
    tmp.replace(dest)
    print(f"added backbone {spec.name!r} ({spec.kind}) as {dest}; the sensor adds its partition")
    return 0


def cmd_export_release(args: argparse.Namespace, settings: Settings) -> int:
    """Write the materialized canonical tables in the official SOCO release layout."""
    from soco_pipeline.data.soco_export import export_soco_release
    from soco_pipeline.storage import exists, read_parquet
    from soco_pipeline.tables import table_for
    from soco_pipeline.taxonomy import Taxonomy, load_taxonomy

    images, keypoints, image_pairs, corr = (
        read_parquet(table_for(a).path(settings.tables_root))
        for a in ("image_set", "keypoints", "image_pairs", "correspondences")
    )
    tax_path = table_for("taxonomy").path(settings.tables_root)  # the run's taxonomy, when materialized
    taxonomy = Taxonomy.from_table(read_parquet(tax_path), tax_path) if exists(tax_path) else load_taxonomy()
    counts = export_soco_release(
        images, keypoints, image_pairs, corr, args.out, taxonomy, overwrite=args.force
    )
    print(f"wrote the SOCO release layout to {args.out}: {counts}")
    return 0


def cmd_export_results(args: argparse.Namespace, settings: Settings) -> int:
    """Write one backbone's metrics in the official scorer's shape, or a record, hub or eee."""
    import json

    if args.format == "record":
        from soco_pipeline.cli.trust import export_record

        return export_record(args, settings)
    if args.format == "hub":
        from soco_pipeline.cli.trust import export_hub

        return export_hub(args, settings)
    if args.format == "eee":
        from soco_pipeline.cli.eee import export_eee

        return export_eee(args, settings)

    from soco_pipeline.cli.model_names import check_backbone
    from soco_pipeline.cli.trust import rescored_backbone_metrics
    from soco_pipeline.evaluation.official_results import official_results
    from soco_pipeline.storage import exists, read_parquet, write_bytes_atomic
    from soco_pipeline.tables import table_for

    check_backbone(settings, args.backbone)
    path = table_for("metrics").path(settings.tables_root, args.backbone)
    if not exists(path):
        raise FileNotFoundError(
            f"no metrics of backbone {args.backbone!r} at {path}; materialize its metrics first (make demo, or "
            f"the metrics asset of its partition)"
        )
    pairs = read_parquet(table_for("image_pairs").path(settings.tables_root))
    metrics, protocol = rescored_backbone_metrics(settings, args.backbone, args.protocol)
    doc = official_results(
        metrics, pairs, args.backbone, protocol, alpha=args.alpha, settings={"metrics_table": path}
    )
    write_bytes_atomic(args.out, (json.dumps(doc, indent=2, allow_nan=False) + "\n").encode())
    for level, res in doc["metrics"].items():
        o = res["overall"]
        print(f"{level:5s} | pairs={o['pairs']:5d} | CC={o['concept_pck']} | semantic={o['semantic_pck']}")
    print(f"wrote {args.out}")
    return 0


def cmd_cluster(args: argparse.Namespace, settings: Settings) -> int:
    """Start, stop or show the local distributed stack (Redis, Postgres, SeaweedFS, Dagster, Celery)."""
    import time

    from soco_pipeline.deploy.stack import LocalStack

    root = Path(args.dir)
    if args.engine == "slurm" or (args.action != "start" and (root / "slurm.json").exists()):
        from soco_pipeline.deploy.slurm import cluster_command

        return cluster_command(args.action, root)
    if args.action == "start":
        t0 = time.monotonic()
        stack = LocalStack(
            root,
            default_workers=args.workers,
            gpu_workers=args.gpu_workers,
            max_concurrent_runs=args.max_concurrent_runs,
            automation=not args.no_automation,
            lost_worker_grace=args.lost_worker_grace,
            log=lambda msg: print(f"[{time.monotonic() - t0:5.1f} s] {msg}", flush=True),
        )
        stack.start(timeout=args.timeout)
        print(f"stack up; use it with:  source {root.resolve() / 'cluster.env'}")
        return 0
    if not (root / "stack.json").exists():
        print(f"no stack state in {root} (nothing started there)")
        return 0 if args.action == "stop" else 1
    stack = LocalStack.attach(root)
    if args.action == "stop":
        for name, how in stack.stop().items():
            print(f"{name}: {how}")
        return 0
    if args.action == "restart":
        if not args.service:
            raise ValueError(
                "soco cluster restart needs --service NAME (e.g. gpu-worker-1; see `soco cluster status`)"
            )
        svc = stack.restart(args.service, timeout=args.timeout)
        print(f"{svc.name} restarted: pid {svc.pid}, log {svc.log}")
        return 0
    status = stack.status()
    for svc in stack.services:
        print(
            f"{svc.name:14s} pid {svc.pid:<8d} {'running' if status.get(svc.name) else 'stopped':8s} {svc.log}"
        )
    return 0 if status and all(status.values()) else 1


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser of the `soco` command; for a `command` of LEAN_COMMANDS, with that command only."""
    p = argparse.ArgumentParser(prog="soco", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("sql", help="run a SQL query over the results (DuckDB)")
    s.add_argument("query")
    s.add_argument(
        "--format",
        choices=["table", "csv", "json", "markdown"],
        default="table",
        help="output format (default: a table in 120 columns, or one block per row for rows of prose)",
    )
    s.add_argument(
        "--round", type=int, default=None, metavar="N", help="round every float to N decimals (every format)"
    )
    s.set_defaults(func=cmd_sql)
    if command == "sql":
        return p
    s = sub.add_parser("leaderboard", help="print a family's board (default: SOCO's headline columns)")
    from soco_pipeline.cli.leaderboard import add_arguments as leaderboard_arguments

    leaderboard_arguments(s)
    if command in LEAN_COMMANDS:
        return p
    s = sub.add_parser("add-backbone", help="validate a backbone spec and add it to assets/backbones/")
    s.add_argument("spec")
    s.add_argument("--force", action="store_true", help="replace an existing spec of the same name")
    s.add_argument(
        "--skip-weights-check",
        action="store_true",
        help="add the spec even though its weights are not there yet (its runs fail until they are)",
    )
    s.set_defaults(func=cmd_add_backbone)
    s = sub.add_parser("export-release", help="write the tables in the official SOCO release layout")
    s.add_argument("out", help="output folder (fsspec path)")
    s.add_argument("--force", action="store_true", help="replace an existing output folder")
    s.set_defaults(func=cmd_export_release)
    s = sub.add_parser(
        "export-results", help="write a backbone's metrics in the official scorer's JSON shape"
    )
    s.add_argument("backbone")
    s.add_argument("out", help="output JSON file (fsspec path)")
    s.add_argument("--alpha", type=float, default=None, help="PCK alpha (default: the protocol's headline)")
    s.add_argument("--protocol", default=None, help="protocol file (default: assets/protocol.yaml)")
    s.add_argument(
        "--format",
        choices=["official", "record", "hub", "eee"],
        default="official",
        help="official: the SOCO scorer's shape; record: the results record (docs/results.md); hub: the "
        "Hugging Face Hub's .eval_results/<family>.yaml under OUT (a folder; nothing is uploaded); eee: Every "
        "Eval Ever records (and per-sample sidecars) under OUT/data/ (a folder)",
    )
    s.add_argument("--dataset-id", default=None, help="hub: the benchmark dataset's Hub id (<owner>/<name>)")
    s.add_argument(
        "--published",
        action="store_true",
        help="eee: BACKBONE names a model of assets/reference/published.csv; write its quoted figures",
    )
    s.add_argument(
        "--lvlm", action="store_true", help="record, eee: BACKBONE names an LVLM spec (family soco_lvlm)"
    )
    s.add_argument(
        "--family",
        default="soco",
        help="record, eee: soco or a task family declared in soco_pipeline/tasks/ (BACKBONE: a backbone or an LVLM spec)",
    )
    s.set_defaults(func=cmd_export_results)
    from soco_pipeline.cli.trust import add_commands

    add_commands(sub)  # diff-runs, compare, evaluate, show, report (docs/results.md)
    from soco_pipeline.cli.workbook import add_command as add_score_workbook

    add_score_workbook(sub)  # score-workbook FAMILY FILE (docs/results.md)
    from soco_pipeline.cli.history import add_command as add_drop_snapshot

    add_drop_snapshot(sub)  # drop-snapshot FAMILY MODEL DATA_VERSION (docs/faults.md)

    from soco_pipeline.cli.run import add_command as add_run

    add_run(sub)  # soco run SPEC [SPEC ...]: models on every family
    from soco_pipeline.cli.family_export import add_command as add_export_family

    add_export_family(sub)  # soco export-family tpips OUT --format release

    s = sub.add_parser(
        "cluster", help="start/stop/status/restart of the local distributed stack (docs/scaling-out.md)"
    )
    s.add_argument("action", choices=["start", "stop", "status", "restart"])
    s.add_argument("--service", default=None, help="restart: the service to start again (a worker, say)")
    s.add_argument("--dir", default="storage/cluster", help="state, logs and data of the stack")
    s.add_argument(
        "--engine",
        choices=["celery", "slurm"],
        default="celery",
        help="celery: the distributed stack; slurm: a single-node Slurm for the slurm launcher",
    )
    s.add_argument("--workers", type=int, default=2, help="Celery workers on the default queue")
    s.add_argument("--gpu-workers", type=int, default=1, help="Celery workers on the gpu queue")
    s.add_argument("--max-concurrent-runs", type=int, default=4, help="runs the queue lets run at once")
    s.add_argument("--no-automation", action="store_true", help="no eager automation (backfills only)")
    s.add_argument(
        "--lost-worker-grace",
        type=float,
        default=60.0,
        help="seconds a worker holding a step may miss pings before the step is failed as lost",
    )
    s.add_argument("--timeout", type=float, default=180.0, help="seconds each service may take to be healthy")
    s.set_defaults(func=cmd_cluster)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `soco` command: the project's instance and storage found as the Makefile sets them
    (soco_pipeline/cli/project.py), one line per error (SOCO_DEBUG=1 shows the traceback)."""
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(argv[0] if argv else None).parse_args(argv)
    from soco_pipeline.cli.project import project_defaults  # storage's pandas: after `--help` has exited
    from soco_pipeline.runtime.interrupts import redeliver_swallowed_interrupts

    with project_defaults() as env, redeliver_swallowed_interrupts():
        return _dispatch(args, env)


def _dispatch(args: argparse.Namespace, env) -> int:
    """Run the command; print one line per error (exit 2 for bad input, 1 for the rest)."""
    from soco_pipeline.cli.project import missing_results_message

    try:
        return args.func(args, Settings())
    except Exception as e:  # noqa: BLE001 - a command line prints one line, not a traceback
        # results_db is imported only by the commands that query (0.6 s: pandas, pyarrow.dataset)
        results_db = sys.modules.get("soco_pipeline.report.results_db")
        if results_db is not None and isinstance(e, results_db.ResultsError):
            no_file = not Path(Settings().duckdb_path).exists() and "://" not in env.storage
            print(
                f"error: {missing_results_message(env, Settings().duckdb_path) if no_file else e}",
                file=sys.stderr,
            )
            return 2
        if _bad_input(e):
            print(f"error: {e}", file=sys.stderr)
            return 2
        if variable("SOCO_DEBUG"):
            raise
        print(f"error: {type(e).__name__}: {e} (SOCO_DEBUG=1 shows the traceback)", file=sys.stderr)
        return 1


def _bad_input(e: Exception) -> bool:
    """Whether `e` is bad input (exit 2): ValueError, a file error, or the cluster's StackError."""
    stack = sys.modules.get("soco_pipeline.deploy.stack")
    return isinstance(e, (ValueError, FileNotFoundError, FileExistsError)) or (
        stack is not None and isinstance(e, stack.StackError)
    )


if __name__ == "__main__":
    sys.exit(main())
