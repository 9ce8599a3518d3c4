"""Benchmark the embedded data set generator: `demo` and `full` into temporary folders on 2 workers.

Target: all 4,000 kept `full` images (plus ~10% rejects) in under 5 minutes on 2 cores.
Usage: python benchmarks/bench_synth.py [--skip-full]
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time

from soco_pipeline.synth import generate_dataset


def run(size: str, workers: int) -> None:
    """Generate one size and print its timing."""
    with tempfile.TemporaryDirectory(prefix=f"soco-synth-{size}-") as root:
        t0 = time.perf_counter()
        cpu0 = _cpu_seconds()
        man = generate_dataset(root, size=size, seed=0, workers=workers)
        dt = time.perf_counter() - t0
        cpu = _cpu_seconds() - cpu0
    c = man["counts"]
    print(
        f"{size}: {c['images']} images ({c['kept']} kept, {c['rejected']} rejects) in {dt:.1f} s "
        f"= {c['images'] / dt:.1f} images/s on {workers} workers; kept images/s {c['kept'] / dt:.1f}; "
        f"CPU {cpu:.0f} s = {1000 * cpu / c['images']:.0f} ms/image (wall on {workers} idle cores "
        f"~{cpu / workers:.0f} s)"
    )


def _cpu_seconds() -> float:
    """User+system CPU time of this process and its reaped worker processes."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> None:
    """Run demo, then full."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--skip-full", action="store_true")
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    run("demo", a.workers)
    if not a.skip_full:
        run("full", a.workers)
        print("target: full in < 300 s")


if __name__ == "__main__":
    main()
