"""Scale-out: 1 worker against 2 workers, interleaved on ONE stack, 4 backbone partitions with real feature
extraction.

One `LocalStack` (one Redis, one Postgres, one SeaweedFS bucket, one code server and daemon) with two
Celery workers that take both queues (default and gpu). A repetition is a backfill of the 4 partitions
through the webserver (one run per partition, the queued run coordinator lets 4 run at once). For a
1-worker repetition, worker-2 stops consuming (Celery's remote control `cancel_consumer`; its process
stays up, idle), for a 2-worker one it consumes again (`add_consumer`): the processes, ports and data are
the same in both settings, only the number of workers taking steps differs. Before every repetition the
feature cache is deleted from the bucket, so every repetition extracts every map again.

The settings are interleaved in ABBA order (1,2,2,1, 1,2,2,1, ...) after one 2-worker warm-up repetition
that is not counted (it pays the workers' first imports), so that a load that drifts during the run (the
machine may be shared) falls on both settings alike. Each repetition's wall time is read off Dagster's
event log: first run created -> last run ended (the backfill daemon's tick before the runs exist is not
counted). Printed: nproc, the load average before and after and at each repetition's start, each
repetition's wall time and which workers ran its steps, the median per setting, their ratio, and the fixed
costs (per run: run created -> first step start plus last step end -> run end; per step: the worker's
'Executing steps' event -> step start; task submitted -> step start).

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_scaleout.py [--categories car,bus,chair --images 4 --reps 2]

With `--launchers inprocess,celery,slurm,kubernetes [--backbone oracle_part]` it measures instead the
per-step overhead of each launcher over in-process on feature extraction and the FG-BMK and TPIPS training
payloads (benchmarks/launcher_overhead.py; Slurm as root, no Celery stack: celery and kubernetes are
named with the reason they are not measured there).

Every process is stopped by pid at the end (`LocalStack.stop`); the script then lists any of the stack's
processes still alive (there should be none).
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

from soco_pipeline.deploy.processes import group_members, wait_for
from soco_pipeline.deploy.stack import BUCKET, DEFAULT_QUEUE, GPU_QUEUE, LocalStack
from soco_pipeline.storage import PROJECT_ROOT

BACKBONES = ["dense_sift", "oracle_part", "oracle_concept", "vit_small_random"]
QUEUES = (DEFAULT_QUEUE, GPU_QUEUE)
PREFIX = "bench"
SWITCHED = "worker-2"  # consumes in 2-worker repetitions only


def _load() -> str:
    return "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def _defs(backbones_dir: Path, categories: list[str] | None, images: int | None):
    from soco_pipeline.defs.definitions import build_definitions

    return build_definitions(
        storage_root=f"s3://{BUCKET}/{PREFIX}",
        backbones_dir=str(backbones_dir),
        categories=categories,
        images_per_category=images,
    )


def _backfill(stack: LocalStack, backbones: list[str]) -> str:
    q = """mutation B($p: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $p) {
      __typename ... on LaunchBackfillSuccess { backfillId } ... on PythonError { message } } }"""
    p = {
        "selector": {
            "partitionSetName": "evaluate_backbone_partition_set",
            "repositorySelector": {
                "repositoryLocationName": "soco_pipeline",
                "repositoryName": "__repository__",
            },
        },
        "partitionNames": backbones,
    }
    r = requests.post(
        f"http://127.0.0.1:{stack.ports['webserver']}/graphql",
        json={"query": q, "variables": {"p": p}},
        timeout=60,
    ).json()
    res = r["data"]["launchPartitionBackfill"]
    if res["__typename"] != "LaunchBackfillSuccess":
        raise RuntimeError(res)
    return res["backfillId"]


def _node(stack: LocalStack, name: str) -> str:
    """The full Celery node name (name@host) of a worker, from its ping reply."""
    replies = stack.celery_app().control.ping(timeout=2.0) or []
    nodes = [n for r in replies for n in r if n.split("@")[0] == name]
    if not nodes:
        raise RuntimeError(
            f"worker {name} does not answer a ping; see {stack.root / 'logs' / (name + '.log')}"
        )
    return nodes[0]


def set_workers(stack: LocalStack, n: int) -> None:
    """Let n (1 or 2) workers take steps: worker-2 stops or starts consuming both queues, and its queues
    are checked with `inspect().active_queues()` before returning."""
    app, node = stack.celery_app(), _node(stack, SWITCHED)
    for q in QUEUES:
        if n == 2:
            app.control.add_consumer(q, destination=[node], reply=True, timeout=5.0)
        else:
            app.control.cancel_consumer(q, destination=[node], reply=True, timeout=5.0)
    want = set(QUEUES) if n == 2 else set()

    def consuming() -> bool:
        active = app.control.inspect([node], timeout=2.0).active_queues() or {}
        return {q["name"] for q in active.get(node, [])} == want

    wait_for(f"{SWITCHED} consuming {sorted(want)}", consuming, 30, interval=0.5)


def _rep_figures(instance, run_ids: list[str]) -> dict:
    """Wall time (first run created -> last run end), fixed costs and the workers that ran steps."""
    from dagster import DagsterEventType

    run_costs, step_costs, dispatch, starts, ends, workers = [], [], [], [], [], set()
    for run_id in run_ids:
        run = instance.get_run_record_by_id(run_id)
        picked_up, submitted, step_start, step_end = {}, {}, [], []
        run_end = None
        for rec in instance.all_logs(run_id):
            ev = rec.dagster_event
            if ev is None:
                continue
            meta = (
                ev.engine_event_data.metadata
                if ev.event_type == DagsterEventType.ENGINE_EVENT and ev.engine_event_data
                else {}
            )
            if rec.step_key and "Celery worker" in meta:
                picked_up[rec.step_key] = rec.timestamp  # the worker took the task (queue wait excluded)
                workers.add(str(meta["Celery worker"].value).split("@")[0])
            elif (
                rec.step_key
                and ev.event_type == DagsterEventType.ENGINE_EVENT
                and "Submitting celery task" in (rec.user_message or "")
            ):
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
    return {
        "wall": max(ends) - min(starts),
        "run_cost": run_costs,
        "step_cost": step_costs,
        "dispatch": dispatch,
        "workers": sorted(workers),
    }


def repetition(stack: LocalStack, instance, n: int) -> dict:
    """Delete the feature cache, let n workers consume, backfill the 4 partitions and wait for them."""
    import dagster as dg

    fs = stack.s3fs()
    features = f"{BUCKET}/{PREFIX}/features"
    if fs.exists(features):
        fs.rm(features, recursive=True)
    set_workers(stack, n)
    backfill = _backfill(stack, BACKBONES)

    def runs():
        return instance.get_runs(dg.RunsFilter(tags={"dagster/backfill": backfill}))

    wait_for("backfill runs", lambda: len(runs()) == len(BACKBONES), 120, interval=1.0)
    wait_for("backfill done", lambda: all(r.is_finished for r in runs()), 1200, interval=2.0)
    bad = [(r.tags.get("dagster/partition"), r.status.value) for r in runs() if not r.is_success]
    if bad:
        raise RuntimeError(f"runs failed: {bad}; logs under {stack.root}/logs")
    return _rep_figures(instance, [r.run_id for r in runs()])


def abba(reps: int) -> list[int]:
    """Worker counts in ABBA order: 1,2,2,1 repeated; `reps` repetitions of each setting."""
    order: list[int] = []
    while len(order) < 2 * reps:
        order += [1, 2] if len(order) % 4 == 0 else [2, 1]
    return order


def leftovers(stack: LocalStack) -> list[str]:
    """'name pid' of every process of the stack's services that is still alive."""
    return [f"{s.name} {pid}" for s in stack.services for pid in group_members(s.pgid)]


def run(
    root: Path, specs: Path, categories: list[str] | None, images: int | None, reps: int
) -> dict[int, list]:
    """Start the stack, prepare the data, warm up, run the interleaved repetitions; stop the stack."""
    import dagster as dg
    import fsspec.config

    from soco_pipeline.defs.shared.partitions import backbones_partitions

    env = {"SOCO_BACKBONES_DIR": str(specs)}
    if categories:
        env["SOCO_CATEGORIES"] = ",".join(categories)
    if images:
        env["SOCO_IMAGES_PER_CATEGORY"] = str(images)
    stack = LocalStack(
        root,
        default_workers=2,
        gpu_workers=0,
        default_queues=QUEUES,
        max_concurrent_runs=4,
        automation=False,
        extra_env=env,
        storage_prefix=PREFIX,
    )
    saved = dict(os.environ)
    res: dict[int, list] = {1: [], 2: []}
    t0 = time.monotonic()
    try:
        stack.start(timeout=300)
        print(f"stack up in {time.monotonic() - t0:.0f} s (not counted); {_load()}", flush=True)
        os.environ.update(stack.client_env())
        fsspec.config.set_conf_env(fsspec.config.conf)
        with dg.DagsterInstance.get() as instance:
            defs = _defs(specs, categories, images)
            done = dg.materialize(
                list(defs.assets),
                instance=instance,
                resources=defs.resources,
                selection=dg.AssetSelection.groups("data", "pairs"),
                raise_on_error=True,
                run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}},
            )
            assert done.success
            instance.add_dynamic_partitions(backbones_partitions.name, BACKBONES)
            w = repetition(stack, instance, 2)
            print(f"warm-up, 2 workers: {w['wall']:6.1f} s (not counted)", flush=True)
            for i, n in enumerate(abba(reps), 1):
                load = _load()
                r = repetition(stack, instance, n)
                res[n].append(r)
                print(
                    f"rep {i}: {n} worker{'s' if n > 1 else ' '} {r['wall']:6.1f} s  steps ran on "
                    f"{','.join(r['workers'])}  ({load} at its start)",
                    flush=True,
                )
        return res
    finally:
        os.environ.clear()
        os.environ.update(saved)
        outcome = stack.stop()
        left = leftovers(stack)
        print(f"stack stopped by pid: {outcome}; processes left: {left or 'none'}")


def main() -> None:
    """Run the interleaved repetitions and print the figures."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--categories", default="", help="comma-separated subset (default: the whole demo set)")
    ap.add_argument("--images", type=int, default=None, help="images per category (default: the demo set's)")
    ap.add_argument("--reps", type=int, default=2, help="repetitions per setting, in ABBA order (default 2)")
    ap.add_argument(
        "--launchers",
        default="",
        help="instead: per-step overhead of these launchers over in-process, on the steps whose heavy part "
        "is a payload (features, fgbmk_probe, tpips_heads): inprocess,slurm measured; celery and kubernetes "
        "say why not here (benchmarks/launcher_overhead.py)",
    )
    ap.add_argument(
        "--backbone", default="oracle_part", help="--launchers: the partition (default oracle_part)"
    )
    ap.add_argument(
        "--tpips-backbone",
        default="dense_sift",
        help="--launchers: the partition of TPIPS's learned heads (default dense_sift; the oracles run no "
        "TPIPS payload)",
    )
    ap.add_argument(
        "--tiny-families",
        action="store_true",
        help="--launchers: the tests' tiny FG-BMK/TPIPS configs (a quick check, not a figure)",
    )
    args = ap.parse_args()
    categories = [c for c in args.categories.split(",") if c] or None
    if args.launchers:
        from launcher_overhead import run as launcher_run  # (benchmarks/ is the script's folder)

        launcher_run(
            args.launchers.split(","),
            args.backbone,
            categories,
            args.images,
            args.reps,
            args.tpips_backbone,
            args.tiny_families,
        )
        return
    print(
        f"nproc {os.cpu_count()}; {_load()} before; {len(BACKBONES)} partitions ({', '.join(BACKBONES)}); "
        f"data: {args.categories or 'demo set'}, {args.images or 'all'} images per category; "
        f"order {abba(args.reps)} after a 2-worker warm-up",
        flush=True,
    )
    tmp = Path(tempfile.mkdtemp(prefix="soco-bench-scaleout-"))
    tmp.chmod(0o755)  # Postgres runs as the postgres user and must enter its data folder below
    try:
        specs = tmp / "backbones"
        specs.mkdir()
        for b in BACKBONES:
            shutil.copy(PROJECT_ROOT / "assets" / "backbones" / f"{b}.yaml", specs)
        res = run(tmp / "cluster", specs, categories, args.images, args.reps)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    med = {n: statistics.median(r["wall"] for r in res[n]) for n in (1, 2)}
    for n in (1, 2):
        walls = ", ".join(f"{r['wall']:.1f}" for r in res[n])
        print(f"{n} worker{'s' if n > 1 else ' '}: median {med[n]:6.1f} s  (reps: {walls})")
    print(f"ratio 1-worker median / 2-worker median: {med[1] / med[2]:.2f}")
    for n in (1, 2):
        rc = [c for r in res[n] for c in r["run_cost"]]
        sc = [c for r in res[n] for c in r["step_cost"]]
        dp = [c for r in res[n] for c in r["dispatch"]]
        print(
            f"fixed cost ({n} worker{'s' if n > 1 else ''}): per run {statistics.median(rc):.1f} s median "
            f"(create -> first step, last step -> end); per step {statistics.median(sc):.2f} s median "
            f"(worker says 'Executing steps' -> step start), max {max(sc):.2f} s; task submitted -> step "
            f"start {statistics.median(dp):.1f} s median (includes waiting for a free worker)"
        )
    print(f"nproc {os.cpu_count()}; {_load()} after")


if __name__ == "__main__":
    main()
