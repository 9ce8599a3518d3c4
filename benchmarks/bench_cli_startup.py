"""Start-up of `soco sql` and `soco leaderboard` (issue 53: <= 1 s idle): the median wall time of a fresh
process of the console script over N runs, for `soco sql "select 1"` and `soco leaderboard`, with the load
average before and after (figures taken on a busy machine are not idle figures).

The storage: `--storage` (a storage root holding results.duckdb, e.g. the one `make demo` leaves), else a
small simulated one written to a temporary folder (tests/report_fixtures.py: five boards, no model run).
tests/test_cli_startup.py checks which modules these commands import.

    .venv/bin/python benchmarks/bench_cli_startup.py [--storage storage] [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOCO = Path(sys.executable).parent / "soco"
COMMANDS = (["sql", "select 1"], ["leaderboard"])


def simulated_storage(root: Path) -> Path:
    """Write the report fixtures' small simulated storage (tables and results.duckdb) under `root`."""
    sys.path.insert(0, str(ROOT))
    import soco_pipeline.defs.definitions  # noqa: F401 - registers the family tables the views read
    from soco_pipeline.report.results_db import refresh_views
    from tests.report_fixtures import write_storage

    storage = root / "storage"
    write_storage(storage)
    refresh_views(storage / "results.duckdb", str(storage / "tables"))
    return storage


def wall_times(args: list[str], env: dict[str, str], runs: int) -> list[float]:
    """Wall seconds of `runs` fresh `soco ARGS` processes (each must exit 0)."""
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([str(SOCO), *args], env=env, cwd=ROOT, capture_output=True, check=True)
        out.append(time.perf_counter() - t0)
    return out


def main() -> int:
    """Print the median (and min / max) start-up of each command and the load average."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--storage", default=None, help="a storage root with results.duckdb (default: simulated)")
    p.add_argument("--runs", type=int, default=5)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as tmp:
        storage = Path(args.storage).resolve() if args.storage else simulated_storage(Path(tmp))
        env = {**os.environ, "SOCO_STORAGE": str(storage), "DAGSTER_HOME": str(Path(tmp) / "home")}
        print(f"nproc {os.cpu_count()}; load average {os.getloadavg()[0]:.2f} before; storage {storage}")
        wall_times(["sql", "select 1"], env, 1)  # one warm-up: the file system cache of the libraries
        for command in COMMANDS:
            times = wall_times(command, env, args.runs)
            print(
                f"soco {' '.join(command):28s} median {statistics.median(times):.2f} s "
                f"(min {min(times):.2f}, max {max(times):.2f}, {args.runs} runs)"
            )
        print(f"load average {os.getloadavg()[0]:.2f} after")
    return 0


if __name__ == "__main__":
    sys.exit(main())
