"""Per-step overhead of each launcher over in-process: `bench_scaleout.py --launchers inprocess,slurm`.

One storage root and one Dagster instance (SQLite) in a temporary folder; the data and what the measured
steps read are materialized once, in-process. A repetition materializes, with the launcher of
that repetition, the three steps whose heavy part is a payload (soco_pipeline/payloads):
- `feature_manifest` (payload `features`) of one backbone partition, the demo's cheapest by default (the
  part oracle), after deleting its feature cache, so that every repetition extracts every map again;
- `fgbmk_metrics` (payload `fgbmk_probe`: FG-BMK's linear probes and retrieval heads) of the same
  partition, after deleting its stored tables (else the step reuses them);
- `tpips_learned` (payload `tpips_heads`: TPIPS's learned heads) of `--tpips-backbone` (default the dense
  SIFT baseline: the oracles cannot see the TPIPS images, so their step runs no payload), likewise.
The launchers are `inprocess` (the payload in the step's process) and `slurm` (a batch job on a
single-node Slurm started here as root, `deploy/slurm.py`, reporting back through Dagster Pipes). Each
step's wall time is read off the event log (STEP_START -> STEP_SUCCESS); the overhead of a launcher on a
step is its median minus in-process's median.

The launchers are interleaved (A B B A ...) after one warm-up repetition each that is not counted (it pays
first imports), so that a load that drifts falls on every launcher alike. `celery` runs the payload in
the Celery worker's own step process (the in-process code path), so its launcher adds nothing; what a
Celery deployment adds per step is its executor's cost, which this bench's default mode measures on the
Celery stack (not started by this mode). `kubernetes` needs a cluster: not runnable here. The family
configs are the shipped (demo) ones, or with `--tiny-families` the tests' tiny ones (a quick check of
the bench, not a figure). Every Slurm daemon is stopped by pid at the end and the processes left are
listed (none expected).
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from soco_pipeline.storage import PROJECT_ROOT

MEASURED = ("inprocess", "slurm")
NOT_HERE = {
    "celery": "not measured by this mode: its launcher runs the payload in the Celery worker's step "
    "process (the in-process code path, no launcher overhead); the Celery executor's per-step cost is "
    "measured on the Celery stack by this bench without --launchers",
    "kubernetes": "not runnable here (no Kubernetes cluster on this machine)",
}


@dataclass(frozen=True)
class Step:
    """One measured step: its payload, the asset keys it materializes, its partition ('soco' or 'tpips'
    backbone), and what it reads that is materialized once beforehand (unpartitioned, then partitioned)."""

    payload: str
    assets: tuple[str, ...]
    backbone: str
    data: tuple[str, ...] = ()
    upstream: tuple[str, ...] = ()


STEPS = (
    Step("features", ("feature_manifest",), "soco"),
    Step(
        "fgbmk_probe",
        ("fgbmk_metrics", "fgbmk_probe_predictions"),
        "soco",
        ("fgbmk_items",),
        ("fgbmk_global_features",),
    ),
    Step(
        "tpips_heads",
        ("tpips_learned", "tpips_learned_outcomes"),
        "tpips",
        ("tpips_images", "tpips_triplets", "tpips_afc_items", "tpips_ooo", "tpips_afc"),
        ("tpips_features",),
    ),
)


def order(launchers: list[str], reps: int) -> list[str]:
    """`reps` repetitions of each launcher, interleaved forwards then backwards (A B B A ...)."""
    out: list[str] = []
    for i in range(reps):
        out += launchers if i % 2 == 0 else list(reversed(launchers))
    return out


def _step_seconds(instance, run_id: str) -> float:
    """STEP_START -> STEP_SUCCESS of the run's one step."""
    from dagster import DagsterEventType

    t: dict[str, dict[str, float]] = {}
    for rec in instance.all_logs(run_id):
        ev = rec.dagster_event
        if ev is not None and rec.step_key:
            if ev.event_type == DagsterEventType.STEP_START:
                t.setdefault(rec.step_key, {})["start"] = rec.timestamp
            elif ev.event_type == DagsterEventType.STEP_SUCCESS:
                t.setdefault(rec.step_key, {})["end"] = rec.timestamp
    (step,) = t.values()
    return step["end"] - step["start"]


def _forget(step: Step, storage: Path, backbone: str) -> None:
    """Delete what would let the step skip its payload: the dense feature cache of `backbone` (features;
    the global features beside it, `global_*`, stay: FG-BMK's probe reads them), the step's stored tables
    (the training steps reuse them when nothing they read changed)."""
    from soco_pipeline.tables import table_for

    if step.payload == "features":
        for entry in (storage / "features").glob(f"{backbone}*/*/*"):
            if not entry.is_dir():
                entry.unlink()
            elif not entry.name.startswith("global_"):
                shutil.rmtree(entry)
        return
    for name in step.assets:
        Path(table_for(name).path(str(storage / "tables"), backbone)).unlink(missing_ok=True)


def run(
    launchers: list[str],
    backbone: str,
    categories: list[str] | None,
    images: int | None,
    reps: int,
    tpips_backbone: str = "dense_sift",
    tiny_families: bool = False,
) -> None:
    """Prepare the data, warm up, run the interleaved repetitions and print the per-step figures."""
    import dagster as dg

    from soco_pipeline.defs.definitions import build_definitions
    from soco_pipeline.defs.shared.launchers import LAUNCHERS, StepLauncher
    from soco_pipeline.deploy.slurm import LocalSlurm

    unknown = [k for k in launchers if k not in LAUNCHERS]
    if unknown or "inprocess" not in launchers:
        raise SystemExit(
            f"--launchers: {unknown or launchers} must be among {LAUNCHERS} and include inprocess"
        )
    measured = [k for k in launchers if k in MEASURED]
    backbones = {"soco": backbone, "tpips": tpips_backbone}
    load = "load average {:.2f} {:.2f} {:.2f}".format
    print(
        f"nproc {os.cpu_count()}; {load(*os.getloadavg())} before; steps "
        + ", ".join(f"{s.assets[0]}[{backbones[s.backbone]}] ({s.payload})" for s in STEPS)
        + f"; data: {','.join(categories) if categories else 'demo set'}, {images or 'all'} images per "
        f"category; family configs: {'tiny (tests)' if tiny_families else 'shipped (demo)'}; "
        f"order {order(measured, reps)} after one warm-up each",
        flush=True,
    )
    tmp = Path(tempfile.mkdtemp(prefix="soco-bench-launchers-"))
    slurm = LocalSlurm(tmp / "slurm") if "slurm" in measured else None
    saved = dict(os.environ)
    times: dict[str, dict[str, list[float]]] = {k: {s.payload: [] for s in STEPS} for k in measured}
    try:
        specs = tmp / "backbones"
        specs.mkdir()
        for b in set(backbones.values()):
            shutil.copy(PROJECT_ROOT / "assets" / "backbones" / f"{b}.yaml", specs)
        storage = tmp / "storage"
        if slurm is not None:
            t0 = time.monotonic()
            slurm.start()
            os.environ.update(slurm.client_env())
            print(f"slurm up in {time.monotonic() - t0:.1f} s (not counted)", flush=True)
        configs = {}
        if tiny_families:
            sys.path.insert(0, str(PROJECT_ROOT))  # the tests' tiny family configs, as a script
            from tests.tiny_families import write_tiny_family_configs

            configs = write_tiny_family_configs(tmp / "configs")
        defs = build_definitions(
            storage_root=str(storage),
            backbones_dir=str(specs),
            categories=categories,
            images_per_category=images,
            **configs,
        )
        quiet = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
        (tmp / "dagster_home").mkdir()
        with dg.instance_for_test(temp_dir=str(tmp / "dagster_home")) as instance:
            instance.add_dynamic_partitions("backbones", sorted(set(backbones.values())))

            def materialize(assets, partition: str | None, launcher=None):
                result = dg.materialize(
                    list(defs.assets),
                    instance=instance,
                    resources={**defs.resources, **({"launcher": launcher} if launcher else {})},
                    selection=assets,
                    partition_key=partition,
                    run_config=quiet,
                )
                assert result.success
                return result

            t0 = time.monotonic()
            # image_set and what it reads, the families' data, then each step's partitioned inputs
            materialize(dg.AssetSelection.groups("data") | dg.AssetSelection.assets(*_data()), None)
            for st in STEPS:
                if st.upstream:
                    materialize(list(st.upstream), backbones[st.backbone])
            print(
                f"inputs materialized in-process in {time.monotonic() - t0:.0f} s (not counted)", flush=True
            )

            def once(kind: str) -> dict[str, float]:
                launcher = StepLauncher(kind=kind, workdir=str(tmp / "launch"), poll_s=0.2)
                out = {}
                for st in STEPS:
                    b = backbones[st.backbone]
                    _forget(st, storage, b)
                    result = materialize(list(st.assets), b, launcher)
                    out[st.payload] = _step_seconds(instance, result.run_id)
                return out

            def line(t: dict[str, float]) -> str:
                return "  ".join(f"{p} {v:6.2f} s" for p, v in t.items())

            for kind in measured:
                print(f"warm-up {kind:9s} {line(once(kind))} (not counted)", flush=True)
            for i, kind in enumerate(order(measured, reps), 1):
                at = load(*os.getloadavg())
                t = once(kind)
                for p, v in t.items():
                    times[kind][p].append(v)
                print(f"rep {i}: {kind:9s} {line(t)}  ({at} at its start)", flush=True)
    finally:
        os.environ.clear()
        os.environ.update(saved)
        if slurm is not None:
            print(f"slurm stopped by pid: {slurm.stop()}; processes left: {slurm.leftovers() or 'none'}")
        shutil.rmtree(tmp, ignore_errors=True)
    for st in STEPS:
        base = statistics.median(times["inprocess"][st.payload])
        print(f"{st.assets[0]}[{backbones[st.backbone]}] (payload {st.payload}):")
        for kind in measured:
            ts = times[kind][st.payload]
            med = statistics.median(ts)
            print(
                f"  {kind:9s}: median {med:6.2f} s per step (reps: {', '.join(f'{t:.2f}' for t in ts)}); "
                f"overhead over in-process {med - base:+.2f} s"
            )
    for kind, why in NOT_HERE.items():
        print(f"{kind:10s}: {why}")
    print(f"nproc {os.cpu_count()}; {load(*os.getloadavg())} after")


def _data() -> list[str]:
    """The unpartitioned tables the measured steps read (the families' data)."""
    return [a for st in STEPS for a in st.data]
