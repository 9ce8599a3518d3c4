"""Benchmark the pair tables at full scale: 100 taxonomy categories x 40 images, seeded visibility.

Prints wall time and rows per second of each stage (the blocking checks included in the total), rows per
table and the process's peak memory (maxrss, which includes DuckDB's native memory). Targets: all pair
tables under 30 s on 2 cores and peak memory under 4 GB. The keypoints are synthetic (seeded visibility
over the taxonomy's keypoints, not the embedded renderer's): the figure is about table sizes, not images.

    .venv/bin/python benchmarks/bench_pairs.py [--images-per-category 40] [--seed 0]
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from soco_pipeline.pairs import (
    PairConfig,
    build_correspondences,
    build_image_pairs,
    check_correspondences,
    check_image_pairs,
    pair_counts,
    write_correspondences,
)
from soco_pipeline.pairs.four_choice import build_four_choice
from soco_pipeline.taxonomy import Taxonomy, load_taxonomy


def synthetic_tables(taxonomy: Taxonomy, per_category: int, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """An image_set and a keypoints table: each image keeps each keypoint visible with p ~ U(0.5, 0.8)."""
    rng = np.random.default_rng(seed)
    kt = taxonomy.to_table()[["category", "keypoint", "concept"]]
    cats = taxonomy.categories
    images = pd.DataFrame(
        {
            "image_id": [f"{c}_{i:04d}" for c in cats for i in range(per_category)],
            "category": np.repeat(cats, per_category),
        }
    )
    kps = images.merge(kt, on="category")
    p_visible = rng.uniform(0.5, 0.8, len(images))
    visible = (
        rng.random(len(kps)) < pd.Series(p_visible, index=images.image_id).reindex(kps.image_id).to_numpy()
    )
    xy = rng.uniform(0, 500, (len(kps), 2))
    kps = kps.assign(
        x=np.where(visible, xy[:, 0], np.nan),
        y=np.where(visible, xy[:, 1], np.nan),
        visible=visible,
        n_annotators=3,
        spread=0.0,
    )
    return images, kps


def timed(label: str, fn, rows_of=len):
    """Run fn, print its wall and CPU time and rows per second, return its result and wall time.

    CPU time (user + system of this process) is printed too: wall time inflates when other work
    shares the cores.
    """
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    rows = rows_of(out)
    print(
        f"{label:<34s} {dt:7.2f} s wall {cpu:7.2f} s cpu {rows:>11,d} rows {rows / max(dt, 1e-9):>12,.0f} rows/s"
    )
    return out, dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images-per-category", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    tax = load_taxonomy()
    images, kps = synthetic_tables(tax, args.images_per_category, args.seed)
    print(
        f"input: {len(images):,} images, {len(kps):,} keypoints, {kps.visible.mean():.1%} visible; "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    cfg = PairConfig(seed=args.seed)

    total = 0.0
    pairs, dt = timed("build_image_pairs", lambda: build_image_pairs(images, kps, tax, cfg))
    total += dt
    corr, dt = timed(
        "build_correspondences (all pairs)",
        lambda: build_correspondences(pairs, kps, tax),
        rows_of=lambda t: t.num_rows,
    )
    total += dt
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "correspondences.parquet")
        _, dt = timed(
            "write_correspondences (stream)",
            lambda: write_correspondences(pairs, kps, tax, path),
            rows_of=lambda n: n,
        )
        total += dt
        size_mb = Path(path).stat().st_size / 2**20
        assert pq.read_metadata(path).num_rows == corr.num_rows
    four, dt = timed("build_four_choice", lambda: build_four_choice(pairs, corr, kps, args.seed, tax))
    total += dt
    counts, dt = timed("pair_counts", lambda: pair_counts(pairs, corr))
    total += dt
    # The blocking checks run before the tables publish (as the pair assets do): part of the stage's time.
    _, dt = timed("check_image_pairs", lambda: check_image_pairs(pairs, tax, images))
    total += dt
    problems, dt = timed("check_correspondences", lambda: check_correspondences(corr, pairs, kps, tax))
    total += dt
    print(f"{'total (all of the above)':<34s} {total:7.2f} s wall   target < 30 s on 2 cores")
    print(f"checks: {len(problems)} problem(s)")

    print(
        f"\ncorrespondences in memory: {corr.nbytes / 2**20:,.0f} MiB (Arrow), Parquet file {size_mb:,.1f} MiB"
    )
    print(
        f"evaluated pairs: {int(pairs.evaluated.sum()):,} of {len(pairs):,}; four-choice items: {len(four):,}"
    )
    print(counts.to_string(index=False))
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"\npeak memory (maxrss): {peak_gb:.2f} GB   target < 4 GB")


if __name__ == "__main__":
    main()
