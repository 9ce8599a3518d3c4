"""`make demo`: run the whole pipeline on the embedded data set and print the leaderboard.

Materializes through Dagster into the persistent instance at $DAGSTER_HOME, so `make ui` afterwards
shows every asset materialized: data and pair assets once, then each backbone partition (one per
spec file in assets/backbones/), then the leaderboard and the DuckDB results file.
"""

from __future__ import annotations

import sys
import time
import uuid
from pathlib import Path

import dagster as dg
import pandas as pd

from soco_pipeline.backbones.spec_files import scan_specs
from soco_pipeline.defs.definitions import build_definitions
from soco_pipeline.defs.recovery import SlotWatcher, fail_dead_runs, process_tags
from soco_pipeline.defs.shared.partitions import backbones_partitions

DATA_AND_PAIRS = dg.AssetSelection.groups("data", "pairs")
PER_BACKBONE = dg.AssetSelection.assets(
    "feature_manifest", "predictions", "four_choice_predictions", "metrics", "global_metrics", "results_record"
)
SUMMARY = dg.AssetSelection.assets("leaderboard", "results_database", "correlation", "results_report")


def _materialize(
    defs: dg.Definitions, instance: dg.DagsterInstance, selection, partition_key=None, log_level="WARNING"
) -> float:
    t0 = time.perf_counter()
    # A run killed earlier (OOM, kill -9) would hold its pool slot forever: fail it first. Our run carries
    # this process's host and pid, so the next one can tell if it dies; while it waits for a slot, the
    # watcher says which run holds it.
    fail_dead_runs(instance, lambda m: print(m, file=sys.stderr, flush=True))
    invocation = ("soco/invocation", uuid.uuid4().hex)
    with SlotWatcher(instance, invocation, log=lambda m: print(m, file=sys.stderr, flush=True)):
        result = dg.materialize(
            list(defs.assets),
            selection=selection,
            instance=instance,
            resources=defs.resources,
            partition_key=partition_key,
            raise_on_error=True,
            run_config={"loggers": {"console": {"config": {"log_level": log_level}}}},
            tags={"soco/source": "make demo", **process_tags(), invocation[0]: invocation[1]},
        )
    assert result.success
    return time.perf_counter() - t0


def run_demo(instance: dg.DagsterInstance | None = None, **overrides) -> pd.DataFrame:
    """Materialize everything for every backbone spec and return the leaderboard table."""
    defs = build_definitions(**overrides)
    soco = defs.resources["soco"]
    instance = instance or dg.DagsterInstance.get()
    specs, invalid = scan_specs(Path(soco.backbones_dir))
    for name, err in invalid.items():
        print(f"skipping invalid backbone spec {name}: {err}", file=sys.stderr)
    existing = set(instance.get_dynamic_partitions(backbones_partitions.name))
    new = [b for b in specs if b not in existing]
    if new:
        instance.add_dynamic_partitions(backbones_partitions.name, new)
    print(f"data and pairs ({soco.source}, {soco.dataset_size}) ...", flush=True)
    print(f"  done in {_materialize(defs, instance, DATA_AND_PAIRS):.1f} s", flush=True)
    for b in specs:
        print(f"backbone {b} ...", flush=True)
        print(f"  done in {_materialize(defs, instance, PER_BACKBONE, partition_key=b):.1f} s", flush=True)
    _materialize(defs, instance, SUMMARY)
    from soco_pipeline.results_db import query

    settings = soco.settings()
    return query(settings.duckdb_path, "SELECT * FROM leaderboard ORDER BY soc DESC", settings.tables_root)


def main() -> int:
    """Entry point of `python -m soco_pipeline.demo`."""
    from dagster._core.errors import DagsterExecutionInterruptedError

    t0 = time.perf_counter()
    try:
        board = run_demo()
    except (KeyboardInterrupt, DagsterExecutionInterruptedError):
        print("\ninterrupted: the run in progress is marked failed; `make demo` again resumes from what is "
              "materialized", file=sys.stderr)
        return 130
    from soco_pipeline.analysis.leaderboard import leaderboard_markdown

    print()
    print(leaderboard_markdown(board))
    # --- the LVLM family (soco_pipeline/demo_lvlm.py): loopback reference answerers, stopped by pid --------
    from soco_pipeline.demo_lvlm import lvlm_board_markdown, lvlm_demo_enabled, run_lvlm_demo

    if lvlm_demo_enabled():
        try:
            print("\n" + lvlm_board_markdown(run_lvlm_demo(dg.DagsterInstance.get())))
        except (KeyboardInterrupt, DagsterExecutionInterruptedError):
            print("\ninterrupted: the LVLM answerers are stopped; `make demo` again resumes", file=sys.stderr)
            return 130
    # ------------------------------------------------------------------------------------------------------
    print(
        f'\nend to end: {time.perf_counter() - t0:.0f} s; query it with: .venv/bin/soco sql "select * from leaderboard"'
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
