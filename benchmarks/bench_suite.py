"""The test suite's time per tier (tests/conftest.py: unit, pipeline, stack) and its slowest tests.

Runs `pytest -m <tier> --durations=15` once per tier asked for, each in a process of its own, and prints
each tier's wall time and outcome line, the 15 slowest test phases over all of them, nproc and the load
average before and after. Issue #37's budgets are for an idle 2-core machine: `make test-fast` (the unit
tier) <= 3 min, `make test` <= 12 min, no single test over 60 s. A load average above half the cores
before or after the run is flagged: such figures are not idle figures and must not be published as such.

    .venv/bin/python benchmarks/bench_suite.py                      # the unit tier (what `make bench` runs)
    .venv/bin/python benchmarks/bench_suite.py --tier all           # every tier, one after the other
    .venv/bin/python benchmarks/bench_suite.py --tier pipeline --pytest-args="-p randomly"
    .venv/bin/python benchmarks/bench_suite.py --make-test --load 4   # `make test` as .ci/run runs it, beside
                                                                      # 4 busy CPU workers (issue 58)
    .venv/bin/python benchmarks/bench_suite.py --fresh-clone --load 4 # `.ci/run` in a fresh clone of HEAD
                                                                      # (its own venv, install included)

`--load N` starts N child processes that spin on the CPU (plain Python loops, no package needed) for the
whole run, samples the load average every 5 s, prints its mean and peak beside the results, and stops the
spinners by pid at the end, whatever happened. CI runs on the developer's machine, which may be busy: the
suite must stay green at a load of at least twice the cores.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIERS = ("unit", "pipeline", "stack")
DURATION = re.compile(r"^(\d+(?:\.\d+)?)s (setup|call|teardown)\s+(\S+)")
SUMMARY = re.compile(r"^=*\s*(\d+ (?:passed|failed|error|skipped|deselected).*?)\s*=*$")


def load_average() -> tuple[float, float, float]:
    """The 1, 5 and 15 minute load averages."""
    return os.getloadavg()


def run_pytest(label: str, cmd: list[str], env: dict[str, str], cwd: Path = ROOT) -> dict:
    """A pytest run (or `make test`) in a child process: wall time, exit code, outcome line, durations; the
    output's last 60 lines on stderr when it failed."""
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    lines = done.stdout.splitlines()
    durations = [(float(m[1]), m[2], m[3]) for m in (DURATION.match(line) for line in lines) if m is not None]
    outcome = next((m[1] for m in (SUMMARY.match(line) for line in reversed(lines)) if m), "no summary")
    if done.returncode:
        print("\n".join(lines[-60:]), file=sys.stderr)
    return {"tier": label, "wall_s": wall, "rc": done.returncode, "outcome": outcome, "durations": durations}


def run_tier(tier: str, extra: list[str]) -> dict:
    """One tier through pytest in a child process (`run_pytest`)."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", tier, "--durations=15", "-p", "no:warnings", *extra]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "DAGSTER_DISABLE_TELEMETRY": "1"}
    # as `make test` and `make test-fast` run it (Makefile TEST_ENV): one torch thread per process
    env.update({k: os.environ.get(k, "1") for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")})
    return run_pytest(tier, cmd, env)


SPIN = "import time\nwhile True:\n    sum(i * i for i in range(10_000))\n"


@contextlib.contextmanager
def cpu_load(workers: int) -> Iterator[list[float]]:
    """`workers` busy processes for the duration of the block; yields the load averages sampled every 5 s."""
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(workers)]
    samples: list[float] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(5.0):
            samples.append(load_average()[0])

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield samples
    finally:
        stop.set()
        for proc in spinners:
            proc.kill()
        for proc in spinners:
            proc.wait(timeout=30)
        sampler.join(timeout=10)


def run_make_test(extra: str) -> dict:
    """`make test` as .ci/run runs it (CI=true, random order), through `run_pytest`."""
    env = {**os.environ, "CI": "true", "HF_HUB_OFFLINE": "1"}
    return run_pytest("make test", ["make", "test", f"PYTEST_ARGS=-p randomly {extra}".strip()], env)


def run_ci_in_fresh_clone() -> dict:
    """`.ci/run` in a fresh `git clone` of this checkout's HEAD (installs its own venv, as on a new machine),
    through `run_pytest`. The clone (~7 GB with its venv) and its test temporary folder (in /dev/shm, i.e. in
    memory, its own so that no other run's folders are touched) are removed afterwards."""
    clone = Path(tempfile.mkdtemp(prefix="soco-ci-clone-")) / "soco"
    tests_tmp = Path(
        tempfile.mkdtemp(prefix="soco-ci-tests-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None)
    )
    tests_tmp.chmod(0o1777)  # as the Makefile makes it: Postgres runs as its own user below it
    try:
        return _ci_in(clone, tests_tmp)
    finally:
        shutil.rmtree(clone.parent, ignore_errors=True)
        shutil.rmtree(tests_tmp, ignore_errors=True)


def _ci_in(clone: Path, tests_tmp: Path) -> dict:
    """Clone HEAD into `clone` and run its `.ci/run` with its tests' temporary folder in `tests_tmp`."""
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    if (ROOT.parent / "shared").is_dir():  # CI lays shared/ (papers, reference figures) beside the checkout
        (clone.parent / "shared").symlink_to(ROOT.parent / "shared")
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=clone, capture_output=True, text=True)
    print(f"fresh clone of {head.stdout.strip()} at {clone}")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env.update({"CI": "true", "HF_HUB_OFFLINE": "1", "TEST_TMPDIR": str(tests_tmp)})
    return run_pytest(".ci/run (fresh clone)", ["bash", str(clone / ".ci" / "run")], env, cwd=clone)


def main(argv: list[str] | None = None) -> int:
    """Run the tiers asked for and print the figures; the exit code is the worst pytest exit code."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--tier", choices=[*TIERS, "all"], default="unit", help="the tier to time (default: unit)"
    )
    ap.add_argument("--pytest-args", default="", help="more pytest arguments, e.g. '-p randomly' or '-n 2'")
    ap.add_argument("--make-test", action="store_true", help="run `make test` as .ci/run does, not tiers")
    ap.add_argument(
        "--fresh-clone",
        action="store_true",
        help="run `.ci/run` in a fresh clone of HEAD (ignores --pytest-args)",
    )
    ap.add_argument("--load", type=int, default=0, help="N busy CPU workers beside the run (default 0)")
    args = ap.parse_args(argv)
    tiers = TIERS if args.tier == "all" else (args.tier,)
    extra = shlex.split(args.pytest_args)
    cores = os.cpu_count() or 1
    before = load_average()
    print(f"nproc {cores}; load average before: {before[0]:.2f} {before[1]:.2f} {before[2]:.2f}")
    with cpu_load(args.load) as samples:
        if args.fresh_clone:
            results = [run_ci_in_fresh_clone()]
        elif args.make_test:
            results = [run_make_test(args.pytest_args)]
        else:
            results = [run_tier(t, extra) for t in tiers]
    after = load_average()
    print(f"load average after: {after[0]:.2f} {after[1]:.2f} {after[2]:.2f}")
    if args.load:
        mean = sum(samples) / max(len(samples), 1)
        print(
            f"under load: {args.load} busy workers; 1-min load average mean {mean:.2f}, peak {max(samples, default=0):.2f}"
        )
    elif max(before[0], after[0]) > cores / 2:
        print(f"NOT IDLE: a load average above {cores / 2:.1f} (half of {cores} cores); not idle figures")
    print("\n| tier | wall s | pytest |\n|---|---:|---|")
    for r in results:
        print(f"| {r['tier']} | {r['wall_s']:.0f} | {r['outcome']} (exit {r['rc']}) |")
    print(f"| total | {sum(r['wall_s'] for r in results):.0f} | |")
    slowest = sorted(((d, r["tier"]) for r in results for d in r["durations"]), reverse=True)[:15]
    print("\nThe 15 slowest test phases:\n\n| s | phase | tier | test |\n|---:|---|---|---|")
    for (seconds, phase, test), tier in slowest:
        print(f"| {seconds:.1f} | {phase} | {tier} | `{test}` |")
    over = [test for (seconds, _, test), _ in slowest if seconds > 60]
    if over:
        print(f"\nover 60 s: {len(over)} test phase(s) (issue #37's budget for one test, idle)")
    return max((r["rc"] for r in results), default=0)


if __name__ == "__main__":
    sys.exit(main())
