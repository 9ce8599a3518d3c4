"""Per-step overhead of each launcher over in-process: `bench_scaleout.py --launchers inprocess,slurm`.

One storage root and one Dagster instance (SQLite) in a temporary folder; the data and pairs are
materialized once, in-process. A repetition materializes `feature_manifest` of one backbone partition (the
demo's cheapest by default: the part oracle) after deleting its feature cache, so every repetition
extracts every map again, with the launcher of that repetition: `inprocess` (the payload in the step's
process) or `slurm` (a batch job on a single-node Slurm started here as root, `deploy/slurm.py`,
reporting back through Dagster Pipes). The step's wall time is read off the event log (STEP_START ->
STEP_SUCCESS); the overhead of a launcher is its median minus in-process's median.

The launchers are interleaved (A B B A ...) after one warm-up repetition each that is not counted (it pays
first imports), so that a load that drifts falls on every launcher alike. `celery` runs the payload in
the Celery worker's own step process, so its launcher adds nothing to in-process; the Celery executor's
per-step cost is what this bench's default mode measures. `kubernetes` needs a cluster: not measured
here. Every Slurm daemon is stopped by pid at the end and the processes left are listed (none expected).
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from soco_pipeline.storage import PROJECT_ROOT

MEASURED = ("inprocess", "slurm")


def order(launchers: list[str], reps: int) -> list[str]:
    """`reps` repetitions of each launcher, interleaved forwards then backwards (A B B A ...)."""
    out: list[str] = []
    for i in range(reps):
        out += launchers if i % 2 == 0 else list(reversed(launchers))
    return out


def _step_seconds(instance, run_id: str, step: str = "feature_manifest") -> float:
    from dagster import DagsterEventType

    t: dict[str, float] = {}
    for rec in instance.all_logs(run_id):
        ev = rec.dagster_event
        if ev is not None and rec.step_key == step:
            if ev.event_type == DagsterEventType.STEP_START:
                t["start"] = rec.timestamp
            elif ev.event_type == DagsterEventType.STEP_SUCCESS:
                t["end"] = rec.timestamp
    return t["end"] - t["start"]


def run(
    launchers: list[str], backbone: str, categories: list[str] | None, images: int | None, reps: int
) -> None:
    """Prepare the data, warm up, run the interleaved repetitions and print the per-step figures."""
    import dagster as dg

    from soco_pipeline.defs.definitions import build_definitions
    from soco_pipeline.defs.shared.launchers import StepLauncher
    from soco_pipeline.deploy.slurm import LocalSlurm

    unknown = [k for k in launchers if k not in MEASURED]
    if unknown:
        raise SystemExit(f"--launchers: {unknown} cannot be measured here; use {MEASURED}")
    load = "load average {:.2f} {:.2f} {:.2f}".format
    print(
        f"nproc {os.cpu_count()}; {load(*os.getloadavg())} before; backbone {backbone}; "
        f"data: {','.join(categories) if categories else 'demo set'}, {images or 'all'} images per category; "
        f"order {order(launchers, reps)} after one warm-up each",
        flush=True,
    )
    tmp = Path(tempfile.mkdtemp(prefix="soco-bench-launchers-"))
    slurm = LocalSlurm(tmp / "slurm") if "slurm" in launchers else None
    saved = dict(os.environ)
    times: dict[str, list[float]] = {k: [] for k in launchers}
    try:
        specs = tmp / "backbones"
        specs.mkdir()
        shutil.copy(PROJECT_ROOT / "assets" / "backbones" / f"{backbone}.yaml", specs)
        storage = tmp / "storage"
        if slurm is not None:
            t0 = time.monotonic()
            slurm.start()
            os.environ.update(slurm.client_env())
            print(f"slurm up in {time.monotonic() - t0:.1f} s (not counted)", flush=True)
        defs = build_definitions(
            storage_root=str(storage),
            backbones_dir=str(specs),
            categories=categories,
            images_per_category=images,
        )
        quiet = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
        (tmp / "dagster_home").mkdir()
        with dg.instance_for_test(temp_dir=str(tmp / "dagster_home")) as instance:
            done = dg.materialize(
                list(defs.assets),
                instance=instance,
                resources=defs.resources,
                run_config=quiet,
                selection=dg.AssetSelection.groups("data"),  # image_set and what it reads
            )
            assert done.success
            instance.add_dynamic_partitions("backbones", [backbone])

            def once(kind: str) -> float:
                for folder in (storage / "features").glob(f"{backbone}*"):
                    shutil.rmtree(folder)
                launcher = StepLauncher(kind=kind, workdir=str(tmp / "launch"), poll_s=0.2)
                result = dg.materialize(
                    list(defs.assets),
                    instance=instance,
                    resources={**defs.resources, "launcher": launcher},
                    selection=["feature_manifest"],
                    partition_key=backbone,
                    run_config=quiet,
                )
                assert result.success
                return _step_seconds(instance, result.run_id)

            for kind in launchers:
                print(f"warm-up {kind:9s} {once(kind):6.2f} s (not counted)", flush=True)
            for i, kind in enumerate(order(launchers, reps), 1):
                at = load(*os.getloadavg())
                times[kind].append(once(kind))
                print(f"rep {i}: {kind:9s} step {times[kind][-1]:6.2f} s  ({at} at its start)", flush=True)
    finally:
        os.environ.clear()
        os.environ.update(saved)
        if slurm is not None:
            print(f"slurm stopped by pid: {slurm.stop()}; processes left: {slurm.leftovers() or 'none'}")
        shutil.rmtree(tmp, ignore_errors=True)
    base = statistics.median(times["inprocess"]) if "inprocess" in times else None
    for kind in launchers:
        med = statistics.median(times[kind])
        over = f"; overhead over in-process {med - base:+.2f} s per step" if base is not None else ""
        print(
            f"{kind:9s}: median {med:6.2f} s per step (reps: {', '.join(f'{t:.2f}' for t in times[kind])}){over}"
        )
    print(
        "celery   : the payload runs in the worker's step process (no launcher overhead over in-process); "
        "the Celery executor's per-step cost: this bench without --launchers"
    )
    print("kubernetes: not measured (no cluster here)")
    print(f"nproc {os.cpu_count()}; {load(*os.getloadavg())} after")
