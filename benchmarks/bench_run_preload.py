"""One backbone's per-backbone run from a process of its own, with the forkserver's preload as Dagster runs
get it (`PRELOAD`, no backbone library) and with timm added (as the demo's forkserver preloads it when a
spec's kind needs it): what a run launched by the daemon or `make ui` pays for the forkserver and its steps.

Set-up: a fresh storage and instance under a temporary folder, the data and pairs materialized first
(SOCO_CATEGORIES and SOCO_IMAGES_PER_CATEGORY below, not the demo's size); then, for each backbone and
preload, a new Python process runs that backbone's run through the demo's runner (`Runner.run`, one
`dg.execute_job` with a forkserver of its own) and reports the run's wall time. Prints `nproc` and the
load average before and after.

    .venv/bin/python benchmarks/bench_run_preload.py [--backbones oracle_part,efficientnet_lite0] [--repeat 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SIZE = {"SOCO_CATEGORIES": "car,dog,chair", "SOCO_IMAGES_PER_CATEGORY": "6", "OMP_NUM_THREADS": "1"}


def child(stage: str, preload: list[str]) -> None:
    """In the child process: run `stage` ("data" or a backbone name) and print its wall time as JSON."""
    import dagster as dg

    from soco_pipeline.cli.demo import DATA_AND_PAIRS, LOCATION, PER_BACKBONE, Runner, Stage
    from soco_pipeline.defs.definitions import build_definitions

    overrides = {"storage": os.environ["SOCO_STORAGE"]}
    defs = build_definitions(**overrides)
    with dg.DagsterInstance.get() as instance:
        runner = Runner(defs, instance, overrides, LOCATION, log=lambda m: None, preload=preload)
        if stage == "data":
            keys = list(dg.AssetSelection.groups(*DATA_AND_PAIRS).resolve(defs.resolve_asset_graph()))
            run = Stage("data and pairs", "demo_data_and_pairs", keys)
        else:
            instance.add_dynamic_partitions("backbones", [stage])
            run = Stage(f"backbone {stage}", "demo_backbone", [dg.AssetKey(k) for k in PER_BACKBONE], stage)
        t0 = time.perf_counter()
        ok = runner.run(run)
        wall = time.perf_counter() - t0
    print(json.dumps({"ok": ok, "wall_s": wall}))


def run_child(env: dict[str, str], stage: str, preload: list[str]) -> dict:
    """`child(stage, preload)` in a new Python process; its result."""
    out = subprocess.run(
        [sys.executable, __file__, "--child", stage, "--preload", ",".join(preload)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    """Materialize the data once, then time each backbone's run with each preload."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backbones", default="oracle_part,efficientnet_lite0")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--preload", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, [m for m in args.preload.split(",") if m])
        return
    with tempfile.TemporaryDirectory(prefix="soco-bench-preload-") as tmp:
        home, storage = Path(tmp) / "dagster", Path(tmp) / "storage"
        home.mkdir(parents=True)
        text = (ROOT / "dagster.yaml").read_text().replace("@STORAGE@", str(storage))
        (home / "dagster.yaml").write_text(text)
        env = {**os.environ, **SIZE, "DAGSTER_HOME": str(home), "SOCO_STORAGE": str(storage)}
        env.setdefault("HF_HUB_OFFLINE", "1")
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
        print(f"nproc {os.cpu_count()}; load average {load} before; {SIZE}")
        data = run_child(env, "data", [])
        print(f"data and pairs: {data['wall_s']:.1f} s")
        for backbone in args.backbones.split(","):
            for preload in ([], ["timm"]):
                for i in range(args.repeat):
                    r = run_child(env, backbone, preload)
                    label = "PRELOAD + timm" if preload else "PRELOAD"
                    print(f"{backbone:20s} {label:15s} try {i + 1}: run {r['wall_s']:5.1f} s, ok={r['ok']}")
        print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} after")


if __name__ == "__main__":
    main()
