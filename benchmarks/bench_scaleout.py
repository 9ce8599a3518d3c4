"""Scale-out: 4 backbone partitions with real feature extraction, in-process vs distributed (1 and 2 workers).

The same partitions three ways, every way on the same S3 bucket (a local SeaweedFS) so that only the
execution differs:
- in-process: `dg.materialize` per partition (Dagster's in-process executor), one after the other;
- distributed, 1 worker: `soco cluster` with one Celery worker taking both queues (default and gpu);
- distributed, 2 workers: two such workers.
Both distributed runs are backfills through the webserver (one run per partition, the queued run
coordinator lets 4 run at once). Prints wall times, the speed-up of 2 workers over 1, and the fixed costs
read off Dagster's event log: per run (run created -> first step start, plus last step end -> run end: queueing, launch, run worker
start-up) and per step (the worker's 'Executing steps' event -> step start: resources, inputs' set-up).

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_scaleout.py [--categories car,bus,chair --images 4]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import requests

from soco_pipeline.deploy.processes import wait_for
from soco_pipeline.deploy.stack import BUCKET, DEFAULT_QUEUE, GPU_QUEUE, LocalStack
from soco_pipeline.storage import PROJECT_ROOT

BACKBONES = ["dense_sift", "oracle_part", "oracle_concept", "vit_small_random"]
PER_BACKBONE = ["feature_manifest", "predictions", "four_choice_predictions", "metrics"]


def _defs(prefix: str, backbones_dir: Path, categories: list[str] | None, images: int | None):
    from soco_pipeline.defs.definitions import build_definitions

    return build_definitions(storage_root=f"s3://{BUCKET}/{prefix}", backbones_dir=str(backbones_dir),
                             categories=categories, images_per_category=images)


def _materialize(defs, instance, selection, partition_key=None) -> None:
    import dagster as dg

    result = dg.materialize(list(defs.assets), selection=selection, instance=instance,
                            resources=defs.resources, partition_key=partition_key, raise_on_error=True)
    assert result.success


def _backfill(stack: LocalStack, backbones: list[str]) -> str:
    q = """mutation B($p: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $p) {
      __typename ... on LaunchBackfillSuccess { backfillId } ... on PythonError { message } } }"""
    p = {"selector": {"partitionSetName": "evaluate_backbone_partition_set",
                      "repositorySelector": {"repositoryLocationName": "soco_pipeline",
                                             "repositoryName": "__repository__"}},
         "partitionNames": backbones}
    r = requests.post(f"http://127.0.0.1:{stack.ports['webserver']}/graphql",
                      json={"query": q, "variables": {"p": p}}, timeout=60).json()
    res = r["data"]["launchPartitionBackfill"]
    if res["__typename"] != "LaunchBackfillSuccess":
        raise RuntimeError(res)
    return res["backfillId"]


def _fixed_costs(instance, run_ids: list[str]) -> tuple[list[float], list[float], list[float], float]:
    """Per-run fixed costs, per-step worker set-up times, and the wall time from first run created to last end."""
    from dagster import DagsterEventType

    run_costs, step_costs, dispatch, starts, ends = [], [], [], [], []
    for run_id in run_ids:
        run = instance.get_run_record_by_id(run_id)
        logs = instance.all_logs(run_id)
        picked_up, submitted, step_start, step_end = {}, {}, [], []
        run_end = None
        for rec in logs:
            ev = rec.dagster_event
            if ev is None:
                continue
            if ev.event_type == DagsterEventType.ENGINE_EVENT and rec.step_key and ev.engine_event_data and \
                    "Celery worker" in ev.engine_event_data.metadata:
                picked_up[rec.step_key] = rec.timestamp  # the worker took the task (queue wait excluded)
            elif ev.event_type == DagsterEventType.ENGINE_EVENT and rec.step_key and \
                    "Submitting celery task" in (rec.user_message or ""):
                submitted[rec.step_key] = rec.timestamp
            elif ev.event_type == DagsterEventType.STEP_START:
                step_start.append(rec.timestamp)
                if rec.step_key in picked_up:
                    step_costs.append(rec.timestamp - picked_up[rec.step_key])
                if rec.step_key in submitted:
                    dispatch.append(rec.timestamp - submitted[rec.step_key])
            elif ev.event_type == DagsterEventType.STEP_SUCCESS:
                step_end.append(rec.timestamp)
            elif ev.event_type in (DagsterEventType.RUN_SUCCESS, DagsterEventType.RUN_FAILURE):
                run_end = rec.timestamp
        created = run.create_timestamp.timestamp()
        run_costs.append((min(step_start) - created) + (run_end - max(step_end)))
        starts.append(created)
        ends.append(run_end)
    return run_costs, step_costs, dispatch, max(ends) - min(starts)


def distributed(workers: int, root: Path, backbones_dir: Path, categories, images, prefix: str) -> dict:
    """One stack with `workers` Celery workers on both queues; data in-process, then the backfill."""
    import dagster as dg

    from soco_pipeline.defs.shared.partitions import backbones_partitions

    env = {"SOCO_BACKBONES_DIR": str(backbones_dir)}
    if categories:
        env["SOCO_CATEGORIES"] = ",".join(categories)
    if images:
        env["SOCO_IMAGES_PER_CATEGORY"] = str(images)
    stack = LocalStack(root, default_workers=workers, gpu_workers=0, default_queues=(DEFAULT_QUEUE, GPU_QUEUE),
                       max_concurrent_runs=4, automation=False, extra_env=env, storage_prefix=prefix)
    saved = dict(os.environ)
    t0 = time.monotonic()
    try:
        stack.start(timeout=300)
        up = time.monotonic() - t0
        os.environ.update(stack.client_env())
        import fsspec.config

        fsspec.config.set_conf_env(fsspec.config.conf)
        with dg.DagsterInstance.get() as instance:
            _materialize(_defs(prefix, backbones_dir, categories, images), instance,
                         dg.AssetSelection.groups("data", "pairs"))
            instance.add_dynamic_partitions(backbones_partitions.name, BACKBONES)
            backfill = _backfill(stack, BACKBONES)

            def runs():
                return instance.get_runs(dg.RunsFilter(tags={"dagster/backfill": backfill}))

            wait_for("backfill runs", lambda: len(runs()) == len(BACKBONES), 120, interval=1.0)
            wait_for("backfill done", lambda: all(r.is_finished for r in runs()), 1200, interval=2.0)
            bad = [(r.tags.get("dagster/partition"), r.status.value) for r in runs() if not r.is_success]
            if bad:
                raise RuntimeError(f"runs failed: {bad}; logs under {root}/logs")
            run_costs, step_costs, dispatch, wall = _fixed_costs(instance, [r.run_id for r in runs()])
        return {"wall": wall, "stack_up": up, "run_cost": run_costs, "step_cost": step_costs, "dispatch": dispatch}
    finally:
        os.environ.clear()
        os.environ.update(saved)
        stack.stop()


def in_process(root: Path, backbones_dir: Path, categories, images) -> float:
    """The 4 partitions one after the other with the in-process executor (data prepared beforehand)."""
    import dagster as dg

    from soco_pipeline.defs.shared.partitions import backbones_partitions

    stack = LocalStack(root, default_workers=0, gpu_workers=0, webserver=False, automation=False)
    saved = dict(os.environ)
    try:
        # Only the S3 server is needed; the whole stack is started for simplicity and stopped after.
        stack.start(timeout=300)
        env = stack.client_env()
        env.pop("SOCO_PROFILE")
        os.environ.update(env)
        import fsspec.config

        fsspec.config.set_conf_env(fsspec.config.conf)
        defs = _defs("inprocess", backbones_dir, categories, images)
        with dg.instance_for_test() as instance:
            _materialize(defs, instance, dg.AssetSelection.groups("data", "pairs"))
            instance.add_dynamic_partitions(backbones_partitions.name, BACKBONES)
            t0 = time.perf_counter()
            for b in BACKBONES:
                _materialize(defs, instance, dg.AssetSelection.assets(*PER_BACKBONE), b)
            return time.perf_counter() - t0
    finally:
        os.environ.clear()
        os.environ.update(saved)
        stack.stop()


def main() -> None:
    """Run the three ways and print the figures."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--categories", default="", help="comma-separated subset (default: the whole demo set)")
    ap.add_argument("--images", type=int, default=None, help="images per category (default: the demo set's)")
    args = ap.parse_args()
    categories = [c for c in args.categories.split(",") if c] or None
    tmp = Path(tempfile.mkdtemp(prefix="soco-bench-scaleout-"))
    tmp.chmod(0o755)
    try:
        specs = tmp / "backbones"
        specs.mkdir()
        for b in BACKBONES:
            shutil.copy(PROJECT_ROOT / "assets" / "backbones" / f"{b}.yaml", specs)
        print(f"{len(BACKBONES)} partitions ({', '.join(BACKBONES)}); data: "
              f"{args.categories or 'demo set'}, {args.images or 'all'} images per category")
        t_in = in_process(tmp / "inprocess", specs, categories, args.images)
        print(f"in-process:               {t_in:7.1f} s")
        res = {}
        for n in (1, 2):
            res[n] = distributed(n, tmp / f"cluster{n}", specs, categories, args.images, f"dist{n}")
            r = res[n]
            print(f"distributed, {n} worker{'s' if n > 1 else ' '}:   {r['wall']:7.1f} s  "
                  f"(stack start {r['stack_up']:.0f} s, not counted)")
        print(f"speed-up of 2 workers over 1: {res[1]['wall'] / res[2]['wall']:.2f}x; "
              f"distributed (2) vs in-process: {t_in / res[2]['wall']:.2f}x")
        for n in (1, 2):
            rc, sc = res[n]["run_cost"], res[n]["step_cost"]
            print(f"fixed cost ({n} worker{'s' if n > 1 else ''}): per run {statistics.median(rc):.1f} s median "
                  f"(create -> first step, last step -> end); per step {statistics.median(sc):.2f} s median "
                  f"(worker says 'Executing steps' -> step start), max {max(sc):.2f} s; task submitted -> step "
                  f"start {statistics.median(res[n]['dispatch']):.1f} s median (includes waiting for a free worker)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
