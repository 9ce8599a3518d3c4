"""A model zoo, simulated (issue 53): what one more model costs, and what the boards cost, at 10, 30 and 100 models.

The zoo is cheap specs on a small generated data set (simulated data, no downloads): variants of the shipped
random ViT-S/14, dense SIFT and the two oracles (assets/backbones/), each with its own seed and input size, so
every spec has its own spec_hash and feature cache (`zoo_specs`). The zoo grows in steps (`--sizes`, default
10,30,100): the models added in a step are each evaluated as `soco run SPEC` evaluates a model (run_cli's
plan and demo.Runner; the stages of a phase joined in one in-process run, `joined_runs.run_joined`) less the
boards, each in a Python process of its own; then, at that size, the boards are built as `soco run` builds
them (every board and the summary in one run: leaderboard, model_summary, results page ...), one spec-sensor
tick and one automation tick are evaluated, and one `soco sql` query runs through the console script in a
fresh process. Measured:

- per added model: the wall time of its run (SOCO's and each family's stages), of its whole process (start,
  definitions, runs), and its peak memory: the summed PSS of its process tree (the step processes and the
  forkserver included) and the largest single RSS, sampled from /proc every 0.25 s (Linux only; short
  peaks can be missed);
- the boards' run wall time and, from the run's STEP_SUCCESS events, each asset's step time (the SOCO
  `leaderboard`, `model_summary`, the results page `results_report` ...);
- one tick of `backbone_specs_sensor` over the zoo's spec folder (steady state: every spec seen), and one
  evaluation of every automation condition (the second, with the first one's cursor, as the daemon keeps it);
- `soco sql "select backbone, soc from leaderboard ..."` through the console script.

It prints one markdown table per size, nproc and the load average before and after each size (NOT IDLE when
above half the cores: such figures are not idle figures), and at the end the ratio of the per-model time at
the largest size to the smallest (flat: about 1) and the boards' growth factor beside the models' (linear:
equal). Timings taken on a busy machine are not idle figures; docs/benchmarks.md holds the idle table.

    .venv/bin/python benchmarks/bench_zoo.py                       # 10, 30, 100 models; every family
    .venv/bin/python benchmarks/bench_zoo.py --sizes 5,10 --families soco
    .venv/bin/python benchmarks/bench_zoo.py --quick                # smoke run: 2 then 4 models, tiniest set

Everything lives in a temporary folder (its own storage, spec folder, DAGSTER_HOME), removed at the end
unless `--keep`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # `tests.*` helpers (tiny family configs, the automation tick) as a script

FAMILIES = "soco,mmvm,fgbmk,tpips"
SQL = "select backbone, soc from leaderboard order by soc desc limit 5"
# (shipped spec, the input sizes its variants cycle through): small inputs keep a forward pass cheap
BASES = (
    ("vit_small_random", (112, 126, 140, 154)),
    ("dense_sift", (128, 160, 192, 224)),
    ("oracle_part", (160, 192, 224, 256)),
    ("oracle_concept", (160, 192, 224, 256)),
)
DATA = {"categories": "car,dog,chair", "images": 6}
QUICK = {"sizes": "2,4", "categories": "car,dog", "images": 4}


def zoo_specs(n: int) -> dict[str, dict]:
    """`n` distinct backbone spec documents {name: doc}: the shipped random ViT-S, dense SIFT and oracles in
    turn, variant k of each with seed k and the k-th input size of its cycle (BASES), on the CPU."""
    shipped = {b: yaml.safe_load((ROOT / "assets" / "backbones" / f"{b}.yaml").read_text()) for b, _ in BASES}
    out = {}
    for i in range(n):
        base, sizes = BASES[i % len(BASES)]
        k = i // len(BASES)
        size = sizes[k % len(sizes)]
        doc = {**shipped[base], "seed": k, "input": {"nearest_multiple": size}, "device": "cpu"}
        doc["description"] = f"simulated zoo: {base} variant {k} (seed {k}, input {size})"
        out[f"zoo{i:03d}_{base}_s{k}_{size}"] = doc
    return out


def write_zoo(folder: Path, n: int) -> list[str]:
    """Write zoo_specs(n) as YAML files into `folder`; their names, in order."""
    folder.mkdir(parents=True, exist_ok=True)
    specs = zoo_specs(n)
    for name, doc in specs.items():
        (folder / f"{name}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return list(specs)


# ---------------------------------------------------------------- the child processes (one job each)


def _context():
    """Settings, definitions overrides, definitions, instance and a quiet Runner, as `soco run` builds them."""
    import dagster as dg

    from soco_pipeline.cli.demo import LOCATION, Runner
    from soco_pipeline.defs.definitions import build_definitions
    from soco_pipeline.settings import Settings

    settings = Settings()
    overrides = {k: v for k, v in settings.definition_overrides().items() if v is not None}
    defs = build_definitions(**overrides)
    instance = dg.DagsterInstance.get()
    runner = Runner(defs, instance, overrides, LOCATION, log=lambda m: None, source="bench_zoo")
    return settings, defs, instance, runner


def _steps(defs, settings, name: str, families: list[str], staged: bool = False):
    """run_cli.plan's steps for the zoo spec `name` (from the zoo folder when `staged`, else as added)."""
    from soco_pipeline.cli.run import Added, plan

    folder = Path(os.environ["BENCH_ZOO_SPECS"] if staged else settings.backbones_dir)
    added = Added(name, "backbones", folder / f"{name}.yaml", "backbone")
    return plan(defs, added, families, None, settings)


def _step_times(instance, run_id: str) -> dict[str, float]:
    """{step key: seconds} of run `run_id`, from its STEP_SUCCESS events."""
    import dagster as dg

    events = instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_SUCCESS)
    return {e.dagster_event.step_key: e.dagster_event.event_specific_data.duration_ms / 1000 for e in events}


def _run_stages(runner, defs, instance, stages, phase: str, cached: bool = True) -> dict:
    """Run the stages of one phase as `soco run` does (what is cached skipped, the rest joined in one run of
    the phase's job, in-process): {"stages": per stage its status, the seconds of its own steps and their
    times; "run_s": the wall time of the run}."""
    from soco_pipeline.cli.joined_runs import run_joined
    from soco_pipeline.cli.run import JOBS, is_cached

    rows, todo = [], []
    for stage, cache in stages:
        if cached and cache is not None and is_cached(instance, stage.keys, **cache):
            rows.append({"stage": stage.label, "status": "cached", "s": 0.0, "steps": {}})
        else:
            todo.append(stage)
    t = time.perf_counter()
    results = run_joined(runner, defs, todo, JOBS[phase]) if todo else []
    wall = time.perf_counter() - t
    steps = _step_times(instance, runner.last_run_id) if todo else {}
    for stage, (ok, seconds) in zip(todo, results, strict=True):
        ops = {defs.resolve_assets_def(k).node_def.name for k in stage.keys}
        mine = {k: v for k, v in steps.items() if k.split("[")[0] in ops}
        rows.append({"stage": stage.label, "status": "ran" if ok else "FAILED", "s": seconds, "steps": mine})
    if runner.failed:
        raise RuntimeError(f"failed: {runner.failed}")
    return {"stages": rows, "run_s": wall}


def child_setup(name: str, families: list[str]) -> dict:
    """The data and pairs, and each family's items: what every model reads, run once before the zoo."""
    settings, defs, instance, runner = _context()
    steps = _steps(defs, settings, name, families, staged=True)
    data = _run_stages(runner, defs, instance, steps[:1], "data")
    items = _run_stages(runner, defs, instance, [(s, c) for s, c in steps[1:] if c == {}], "items")
    return {"stages": data["stages"] + items["stages"]}


def child_model(name: str, families: list[str]) -> dict:
    """Add zoo spec `name` as `soco run` adds it and run its per-model stages (no boards)."""
    from soco_pipeline.cli.run import add_spec
    from soco_pipeline.settings import Settings

    t0 = time.perf_counter()
    add_spec(Path(os.environ["BENCH_ZOO_SPECS"]) / f"{name}.yaml", Settings())
    settings, defs, instance, runner = _context()
    if name not in instance.get_dynamic_partitions("backbones"):
        instance.add_dynamic_partitions("backbones", [name])
    per_model = [(s, c) for s, c in _steps(defs, settings, name, families) if c and "partition" in c]
    ready = time.perf_counter() - t0
    return {"name": name, "ready_s": ready, **_run_stages(runner, defs, instance, per_model, "model")}


def child_boards(name: str, families: list[str]) -> dict:
    """The boards as `soco run` builds them after model `name`, then one spec-sensor and one automation tick."""
    import dagster as dg

    from tests.automation_ticks import evaluate

    settings, defs, instance, runner = _context()
    boards = [(s, c) for s, c in _steps(defs, settings, name, families) if c is None]
    run = _run_stages(runner, defs, instance, boards, "boards", cached=False)
    sensor = defs.resolve_sensor_def("backbone_specs_sensor")

    def tick(cursor):
        ctx = dg.build_sensor_context(
            instance=instance, definitions=defs, resources={"soco": defs.resources["soco"]}, cursor=cursor
        )
        return sensor(ctx)

    first = tick(None)  # every spec has its partition already: nothing new, the cursor learns the hashes
    t = time.perf_counter()
    steady = tick(first.cursor)
    sensor_s = time.perf_counter() - t
    if steady.run_requests or steady.dynamic_partitions_requests:
        raise RuntimeError("the steady spec-sensor tick asked for work: the zoo is not what it should be")
    t = time.perf_counter()
    cold = evaluate(defs=defs, instance=instance)
    cold_s = time.perf_counter() - t
    t = time.perf_counter()
    evaluate(defs=defs, instance=instance, cursor=cold.cursor)
    warm_s = time.perf_counter() - t
    return {**run, "sensor_s": sensor_s, "automation_first_s": cold_s, "automation_s": warm_s}


CHILDREN = {"setup": child_setup, "model": child_model, "boards": child_boards}


# ---------------------------------------------------------------- the parent: runs, samples, prints


def _memory_kb(pid: int) -> tuple[int, int]:
    """(RSS, PSS) of process `pid` in kB from /proc/<pid>/smaps_rollup ((0, 0) when it is gone)."""
    rss = pss = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Rss:"):
                    rss = int(line.split()[1])
                elif line.startswith("Pss:"):
                    pss = int(line.split()[1])
    except OSError:
        pass
    return rss, pss


def _tree(root: int) -> set[int]:
    """Process `root` and its descendants (from /proc/*/stat)."""
    parent = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                parent[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    tree, frontier = {root}, {root}
    while frontier:
        frontier = {p for p, pp in parent.items() if pp in frontier and p not in tree}
        tree |= frontier
    return tree


def tree_memory_mb(root: int) -> tuple[float, float, set[int]]:
    """The memory of process `root` and its descendants now: (summed PSS, largest single RSS) in MB, and
    their ids. PSS
    splits a shared page between the processes that share it, so the forkserver's children do not count the
    pages they share with it twice, as a sum of RSS would."""
    tree = _tree(root)
    sizes = [_memory_kb(p) for p in tree]
    return sum(p for _, p in sizes) / 1024, max((r for r, _ in sizes), default=0) / 1024, tree


def run_child(job: str, name: str, families: str, env: dict[str, str], logs: Path) -> dict:
    """`job` for spec `name` in a Python process of its own: its result, wall time (until it exits) and peak
    memory, and how long the processes it started outlived it (`leftover_s`: seen under load, its run's
    forkserver living on for a minute). Its output goes to files in `logs`, not pipes, which those leftovers
    would hold open; the next job starts only when they are gone, so they do not load its figures."""
    logs.mkdir(parents=True, exist_ok=True)
    stem = logs / f"{job}-{name}"
    result_path = stem.with_suffix(".json")
    cmd = [sys.executable, __file__, "--child", job, "--name", name, "--families", families]
    cmd += ["--result", str(result_path)]
    t0 = time.perf_counter()
    with open(f"{stem}.out", "w") as out, open(f"{stem}.err", "w") as err:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
    peak, stop, seen = [0.0, 0.0], threading.Event(), set()

    def sample() -> None:
        while not stop.is_set():
            pss, rss, tree = tree_memory_mb(proc.pid)
            peak[0], peak[1] = max(peak[0], pss), max(peak[1], rss)
            seen.update(tree - {proc.pid})
            stop.wait(0.25)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    proc.wait()
    wall = time.perf_counter() - t0
    stop.set()
    sampler.join()
    while any(os.path.exists(f"/proc/{p}") for p in seen) and time.perf_counter() - t0 - wall < 300:
        time.sleep(0.25)
    leftover = time.perf_counter() - t0 - wall
    if proc.returncode:
        tail = Path(f"{stem}.err").read_text()[-4000:]
        raise RuntimeError(f"{job} {name} failed (exit {proc.returncode}; {stem}.err):\n{tail}")
    result = json.loads(result_path.read_text())
    return {**result, "wall_s": wall, "leftover_s": leftover, "peak_pss_mb": peak[0], "peak_rss_mb": peak[1]}


def soco_sql(env: dict[str, str]) -> tuple[float, int]:
    """SQL through the console script in a fresh process: wall time and rows printed (it must exit 0)."""
    script = Path(sys.executable).parent / "soco"
    t0 = time.perf_counter()
    done = subprocess.run(
        [str(script), "sql", SQL, "--format", "csv"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    wall = time.perf_counter() - t0
    if done.returncode:
        raise RuntimeError(f"soco sql failed (exit {done.returncode}): {done.stderr[-2000:]}")
    return wall, max(len(done.stdout.strip().splitlines()) - 1, 0)


def _load(cores: int, label: str) -> float:
    one, five, fifteen = os.getloadavg()
    flag = f"  NOT IDLE (above {cores / 2:.1f}, half of {cores} cores)" if one > cores / 2 else ""
    print(f"load average {label}: {one:.2f} {five:.2f} {fifteen:.2f}{flag}")
    return one


def _family(label: str) -> str:
    """A stage label's family: `soco / backbone x` -> soco."""
    return label.split(" / ")[0].split("] ")[-1]


def base_of(name: str) -> str:
    """The shipped spec a zoo spec varies: zoo012_dense_sift_s3_128 -> dense_sift."""
    return name.split("_", 1)[1].rsplit("_", 2)[0]


def _mean(values) -> float:
    values = list(values)
    return statistics.mean(values) if values else 0.0


def _steps_note(stages: list[dict], top: int = 4) -> str:
    """The mean step times of `stages` (the same stage over several models), largest first, and their sum."""
    per_step: dict[str, list[float]] = {}
    for s in stages:
        for k, v in s["steps"].items():
            per_step.setdefault(k, []).append(v)
    means = sorted(((statistics.mean(v), k) for k, v in per_step.items()), reverse=True)
    listed = ", ".join(f"{k} {v:.2f}" for v, k in means[:top])
    more = f" (+{len(means) - top} more)" if len(means) > top else ""
    return f"steps sum {sum(v for v, _ in means):.2f}: {listed}{more}"


def per_model_s(added: list[dict]) -> float:
    """Mean wall time of an added model's run (its stages of every family, joined in one run)."""
    return _mean(m["run_s"] for m in added)


def size_table(size: int, added: list[dict], boards: dict, sql: tuple[float, int]) -> str:
    """The markdown table of one zoo size."""
    stage_s = [m["run_s"] for m in added]
    lines = [
        f"| zoo of {size} models | s | peak MB (PSS, tree) | note |",
        "|---|---:|---:|---|",
        f"| per added model: its run (mean of {len(added)}) | {per_model_s(added):.2f} | "
        f"{max(m['peak_pss_mb'] for m in added):.0f} | min {min(stage_s):.2f}, max {max(stage_s):.2f}; "
        f"largest process RSS {max(m['peak_rss_mb'] for m in added):.0f} MB |",
        f"| per added model: its process, start to end | {_mean(m['wall_s'] for m in added):.2f} | | "
        f"spec added and definitions built in {_mean(m['ready_s'] for m in added):.2f} s; its leftover "
        f"processes lived {_mean(m['leftover_s'] for m in added):.2f} s longer |",
    ]
    bases: dict[str, list[dict]] = {}
    for m in added:
        bases.setdefault(base_of(m["name"]), []).append(m)
    for base, ms in bases.items():
        lines.append(f"| &nbsp; {base} variants (mean of {len(ms)}) | {per_model_s(ms):.2f} | | |")
    families: dict[str, list[dict]] = {}
    for m in added:
        for s in m["stages"]:
            families.setdefault(_family(s["stage"]), []).append(s)
    for fam, stages in families.items():
        note = _steps_note(stages)
        lines.append(f"| &nbsp; {fam} steps (mean) | {_mean(s['s'] for s in stages):.2f} | | {note} |")
    for s in boards["stages"]:
        lines.append(f"| &nbsp; {_family(s['stage'])} (steps) | {s['s']:.2f} | | {_steps_note([s], top=8)} |")
    lines += [
        f"| boards (one run) | {boards['run_s']:.2f} | {boards['peak_pss_mb']:.0f} | one process |",
        f"| spec-sensor tick (steady) | {boards['sensor_s']:.2f} | | |",
        f"| automation tick | {boards['automation_s']:.2f} | | first evaluation (no cursor) "
        f"{boards['automation_first_s']:.2f} s |",
        f"| `soco sql` (console script) | {sql[0]:.2f} | | {sql[1]} rows |",
    ]
    return "\n".join(lines)


def summary_step(boards: dict, step: str) -> float:
    """Seconds of asset step `step` in the board runs (0 when absent)."""
    return sum(s["steps"].get(step, 0.0) for s in boards["stages"])


def main(argv: list[str] | None = None) -> int:
    """Grow the zoo size by size and print the tables."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10,30,100", help="zoo sizes, increasing (default 10,30,100)")
    ap.add_argument("--quick", action="store_true", help="smoke run: sizes 2,4 on 2 categories x 4 images")
    ap.add_argument("--families", default=FAMILIES, help=f"evaluated per model (default {FAMILIES})")
    ap.add_argument("--categories", default=None, help=f"data set categories (default {DATA['categories']})")
    ap.add_argument(
        "--images", type=int, default=None, help=f"images per category (default {DATA['images']})"
    )
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder (its path is printed)")
    ap.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    ap.add_argument("--name", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    families = [f for f in args.families.split(",") if f]
    if args.child:
        Path(args.result).write_text(json.dumps(CHILDREN[args.child](args.name, families)))
        return 0
    data = QUICK if args.quick else DATA
    sizes = [int(s) for s in (QUICK["sizes"] if args.quick else args.sizes).split(",")]
    if sizes != sorted(set(sizes)) or sizes[0] < 1:
        ap.error(f"--sizes must be increasing positive numbers, got {sizes}")
    categories, images = args.categories or data["categories"], args.images or data["images"]
    from tests.tiny_families import tiny_family_env

    tmp = Path(tempfile.mkdtemp(prefix="soco-bench-zoo-"))
    home, storage, specs, zoo = tmp / "dagster", tmp / "storage", tmp / "backbones", tmp / "zoo"
    home.mkdir()
    specs.mkdir()
    (home / "dagster.yaml").write_text((ROOT / "dagster.yaml").read_text().replace("@STORAGE@", str(storage)))
    names = write_zoo(zoo, sizes[-1])
    logs = tmp / "logs"  # each child's output and result
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "DAGSTER_HOME": str(home),
        "SOCO_STORAGE": str(storage),
        "SOCO_BACKBONES_DIR": str(specs),
        "SOCO_LVLMS_DIR": str(tmp / "lvlms"),
        "SOCO_CATEGORIES": categories,
        "SOCO_IMAGES_PER_CATEGORY": str(images),
        "BENCH_ZOO_SPECS": str(zoo),
        "DAGSTER_DISABLE_TELEMETRY": "1",
        **tiny_family_env(tmp / "families"),
    }
    for var in ("HF_HUB_OFFLINE", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(var, "1")
    cores = os.cpu_count() or 1
    print(
        f"# model zoo, simulated: sizes {sizes}; families {','.join(families)}; data {categories} x {images}"
    )
    print(f"nproc {cores}; folder {tmp}")
    _load(cores, "before")
    try:
        setup = run_child("setup", names[0], ",".join(families), env, logs)
        print(f"data, pairs and family items: {setup['wall_s']:.1f} s (once, before the zoo)")
        results, done = [], 0
        for size in sizes:
            print(f"\n## {size} models")
            _load(cores, "before")
            added = [run_child("model", n, ",".join(families), env, logs) for n in names[done:size]]
            done = size
            boards = run_child("boards", names[size - 1], ",".join(families), env, logs)
            sql = soco_sql(env)
            _load(cores, "after")
            print("\n" + size_table(size, added, boards, sql))
            results.append((size, added, boards))
        report_growth(results)
    finally:
        _load(cores, "at the end")
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


def report_growth(results: list[tuple[int, list[dict], dict]]) -> None:
    """Per-model time at the largest size against the smallest (flat: ~1), overall and per base spec (the
    sizes' increments mix the bases in slightly different shares); the boards' growth beside the models'."""
    (n0, added0, boards0), (n1, added1, boards1) = results[0], results[-1]

    def board_total(boards):
        return boards["run_s"]

    print(f"\n## growth from {n0} to {n1} models (x{n1 / n0:.1f} models)")
    print(
        f"per added model (its run): {per_model_s(added0):.2f} s -> {per_model_s(added1):.2f} s: "
        f"ratio {per_model_s(added1) / per_model_s(added0):.2f} (flat: 1)"
    )
    for base in sorted({base_of(m["name"]) for m in added0}):
        a = per_model_s([m for m in added0 if base_of(m["name"]) == base])
        b = per_model_s([m for m in added1 if base_of(m["name"]) == base])
        if a > 0 and b > 0:
            print(f"  {base} variants: {a:.2f} s -> {b:.2f} s: ratio {b / a:.2f}")
    print(
        f"per added model (its process): {_mean(m['wall_s'] for m in added0):.2f} s -> "
        f"{_mean(m['wall_s'] for m in added1):.2f} s"
    )
    print(
        f"boards (one run): {board_total(boards0):.2f} s -> {board_total(boards1):.2f} s: growth "
        f"x{board_total(boards1) / board_total(boards0):.2f} (linear: x{n1 / n0:.1f}; the first size also "
        "pays each board's first build)"
    )
    for step in ("leaderboard", "model_summary", "results_report"):
        a, b = summary_step(boards0, step), summary_step(boards1, step)
        if a > 0:
            print(f"  {step}: {a:.2f} s -> {b:.2f} s: x{b / a:.2f}")


if __name__ == "__main__":
    sys.exit(main())
