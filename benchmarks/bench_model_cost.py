"""Where one model's time goes, per family (issue 53): forward passes, other compute, everything else.

Set-up: a fresh storage and Dagster instance under a temporary folder. A warm-up `soco run` of
`--warmup` (default oracle_concept) materializes the data, pairs and every family's items, so that what is
measured next is the per-model cost only. Then, for each backbone of `--backbones` (a name in
assets/backbones or a spec path; by default the part oracle, NEAR_FREE and EfficientNet-Lite0), a copy of
its spec under a name of its own (`cost_<name>`, a new partition) is evaluated by `soco run SPEC
--families ...` in a process of its own, and once more (the second run of an unchanged spec: all cached).

From Dagster's records of that model's runs (tag `soco/source: soco run`), per family (by step key):
- forward passes: the duration of its extraction steps (EXTRACTION: the backbone's forward passes over the
  family's images, with their decoding and the feature-cache writes);
- other compute: its other steps' durations (matching, probe and head training, attacks, metrics, and the
  table reads and writes inside a step).
Then the wall time of the model's partition runs and the time their steps cover (steps of one run may
overlap), each unpartitioned run (items, boards, summary), the time outside any run (its process, loading
the definitions, the cache checks), and everything else: `soco run`'s wall time less the time the model's
steps cover (run and step process start, Dagster's events, the boards and the summary, the process).
Then the floor of a fresh `soco run` of that model if orchestration cost nothing: the imports its steps need
in a new process (Python, Dagster, torch, torchvision, timm; timed three times, the fastest kept) plus the time
its steps cover. Last (`--together N`, default 3), N copies of the nearly free spec with other seeds in one
`soco run` (one process, the boards once), and one more copy alone right after.
Prints the table, the `soco run` wall times, `nproc` and the load average before and after; figures taken on
a busy machine are not idle figures.

    .venv/bin/python benchmarks/bench_model_cost.py [--backbones oracle_part,benchmarks/specs/vit_tiny_random.yaml]
        [--families soco,mmvm,fgbmk,tpips] [--size demo|tiny] [--keep DIR] [--together N]

`--size tiny` (two categories, four images each, the families' tiny test configs) is a smoke run only.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

EXTRACTION = {
    "feature_manifest",
    "global_feature_manifest",
    "fgbmk_global_features",
    "tpips_features",
    "mmvm_features",
}
FAMILY_OF = {"mmvm": "mmvm", "fgbmk": "fgbmk", "tpips": "tpips"}  # asset prefix -> family; the rest is SOCO
# A backbone every family takes whose forward pass is nearly free: a random ViT-Ti/16 at 64 px.
NEAR_FREE = "benchmarks/specs/vit_tiny_random.yaml"
TINY = {"SOCO_CATEGORIES": "car,dog", "SOCO_IMAGES_PER_CATEGORY": "4"}


def family_of(step_or_job: str) -> str:
    """The family a step key or a demo job belongs to ('soco' for SOCO's own assets)."""
    name = step_or_job.removeprefix("demo_")
    return next((f for prefix, f in FAMILY_OF.items() if name.startswith(prefix)), "soco")


def bench_storage(tmp: Path) -> tuple[Path, Path, dict[str, str]]:
    """A fresh storage and Dagster instance under `tmp`: (DAGSTER_HOME, the specs folder, the environment of
    the `soco` processes)."""
    home, storage, specs = tmp / "dagster", tmp / "storage", tmp / "specs"
    for d in (home, specs):
        d.mkdir(parents=True, exist_ok=True)
    (home / "dagster.yaml").write_text((ROOT / "dagster.yaml").read_text().replace("@STORAGE@", str(storage)))
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "SOCO_STORAGE": str(storage),
        "SOCO_BACKBONES_DIR": str(tmp / "backbones"),
        "PYTHONPATH": str(ROOT),
    }
    env.setdefault("HF_HUB_OFFLINE", "1")
    return home, specs, env


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, as printed."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def soco_run(env: dict[str, str], spec: Path | list[Path], families: str) -> float:
    """`soco run SPEC [SPEC ...] --families F` through the console script in a new process; its wall time (s)."""
    return soco_run_output(env, spec, families)[0]


def soco_run_output(env: dict[str, str], spec: Path | list[Path], families: str) -> tuple[float, str]:
    """`soco_run`'s wall time (s) and what the command printed."""
    specs = spec if isinstance(spec, list) else [spec]
    t0 = time.perf_counter()
    done = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "soco"), "run", *map(str, specs), "--families", families],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        names = " ".join(s.name for s in specs)
        raise SystemExit(f"soco run {names} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return wall, done.stdout


def covered(spans: list[tuple[float, float]]) -> float:
    """The seconds covered by the union of `spans` (steps of one run may overlap)."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def split(home: Path, model: str, since: float) -> dict:
    """The model's cost from the runs created after `since`: {family: {forward, other}} seconds of its
    partition's steps, the wall time of its partition's runs and the time their steps cover, and
    {job: wall seconds} of the unpartitioned runs (items, boards, summary)."""
    import dagster as dg

    from soco_pipeline.cli.joined_runs import step_spans

    out = {"families": {}, "model_wall": 0.0, "model_covered": 0.0, "model_runs": 0, "other_runs": {}}
    with dg.DagsterInstance.from_config(str(home)) as instance:
        for record in instance.get_run_records(dg.RunsFilter(tags={"soco/source": "soco run"})):
            if record.create_timestamp.timestamp() < since or record.start_time is None:
                continue
            run, wall = record.dagster_run, (record.end_time or record.start_time) - record.start_time
            partition = run.tags.get("dagster/partition")
            if partition is None:
                out["other_runs"][run.job_name] = out["other_runs"].get(run.job_name, 0.0) + wall
                continue
            if partition != model:
                continue
            steps = step_spans(instance, run.run_id)
            for key, (a, b) in steps.items():
                row = out["families"].setdefault(family_of(key), {"forward": 0.0, "other": 0.0})
                row["forward" if key.split(".")[0] in EXTRACTION else "other"] += b - a
            out["model_runs"] += 1
            out["model_wall"] += wall
            out["model_covered"] += covered(list(steps.values()))
    return out


STEP_IMPORTS = "import dagster, torch, torchvision, timm"  # what every model's steps load in a new process


def import_seconds(env: dict[str, str]) -> float:
    """The fastest of three fresh processes that only import what a model's steps need (s)."""
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", STEP_IMPORTS], env=env, cwd=ROOT, check=True)
        times.append(time.perf_counter() - t0)
    return min(times)


def table(model: str, cost: dict, wall: float) -> str:
    """The split of one model as a text table."""
    lines = [f"{model}: soco run {wall:.1f} s", f"  {'family':8s} {'forward':>9s} {'other':>9s}"]
    for family, row in sorted(cost["families"].items()):
        lines.append(f"  {family:8s} {row['forward']:8.1f}s {row['other']:8.1f}s")
    lines.append(
        f"  its {cost['model_runs']} partition run(s): {cost['model_wall']:.1f} s wall, steps cover "
        f"{cost['model_covered']:.1f} s (steps of one run may overlap)"
    )
    for job, seconds in sorted(cost["other_runs"].items()):
        lines.append(f"  {job:28s} {seconds:6.1f} s (unpartitioned: items, boards, summary)")
    outside = wall - cost["model_wall"] - sum(cost["other_runs"].values())
    lines.append(
        f"  {'outside any run':28s} {outside:6.1f} s (soco run's process, definitions, cache checks)"
    )
    rest = wall - cost["model_covered"]
    lines.append(
        f"  everything else (wall less the model's steps): {rest:.1f} s = {100 * rest / wall:.0f}% of {wall:.1f} s"
    )
    return "\n".join(lines)


def together(env: dict[str, str], specs: Path, n: int, families: str) -> str:
    """N seed copies of the nearly free spec in one `soco run`, then one more copy alone: the lines to print."""
    text = (ROOT / NEAR_FREE).read_text()
    if "seed: 0" not in text:
        raise SystemExit(f"{NEAR_FREE} has no `seed: 0` line to vary")
    copies = []
    for seed in range(101, 102 + n):
        copies.append(specs / f"together_s{seed}.yaml")
        copies[-1].write_text(text.replace("seed: 0", f"seed: {seed}"))
    joint = soco_run(env, copies[:n], families)
    alone = soco_run(env, copies[n], families)
    return (
        f"{n} copies of {Path(NEAR_FREE).name} (other seeds) in one soco run: {joint:.1f} s, "
        f"{joint / n:.1f} s a model; one more copy alone right after: {alone:.1f} s"
    )


def main() -> None:
    """Warm up the data and items, then split each backbone's `soco run` per family, and time a rerun."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--backbones",
        default=f"oracle_part,{NEAR_FREE},efficientnet_lite0",
        help="names in assets/backbones or spec paths",
    )
    parser.add_argument("--families", default="soco,mmvm,fgbmk,tpips")
    parser.add_argument("--warmup", default="oracle_concept")
    parser.add_argument("--size", choices=("demo", "tiny"), default="demo")
    parser.add_argument("--keep", help="use (and keep) this folder instead of a temporary one")
    parser.add_argument(
        "--together",
        type=int,
        default=3,
        help="then N copies of the nearly free spec (other seeds) in one soco run, and one more alone (0: skip)",
    )
    args = parser.parse_args()
    tmp = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="soco-bench-cost-"))
    try:
        home, specs, env = bench_storage(tmp)
        if args.size == "tiny":
            from tests.tiny_families import tiny_family_env

            env.update(TINY)
            env.update(tiny_family_env(tmp / "families"))
        print(f"nproc {os.cpu_count()}; load average {load_average()} before")
        print(f"size {args.size}; families {args.families}")
        src = ROOT / "assets" / "backbones"
        warm = specs / f"{args.warmup}.yaml"
        shutil.copy(src / f"{args.warmup}.yaml", warm)
        print(
            f"warm-up ({args.warmup}: data, pairs, items, its own partitions): {soco_run(env, warm, args.families):.1f} s"
        )
        imports = import_seconds(env)
        for name in args.backbones.split(","):
            path = ROOT / name if name.endswith(".yaml") else src / f"{name}.yaml"
            spec = specs / f"cost_{path.stem}.yaml"
            shutil.copy(path, spec)
            since = time.time()
            wall = soco_run(env, spec, args.families)
            cost = split(home, spec.stem, since)
            print(table(spec.stem, cost, wall))
            print(
                f"  floor without orchestration: {imports + cost['model_covered']:.1f} s (a new process's "
                f"`{STEP_IMPORTS}` {imports:.1f} s + its steps {cost['model_covered']:.1f} s)"
            )
            print(f"  the same soco run again (nothing changed): {soco_run(env, spec, args.families):.1f} s")
        if args.together > 0:
            print(together(env, specs, args.together, args.families))
        print(f"load average {load_average()} after")
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
