"""Analysis speed: the correlation bootstrap and the global-feature metrics.

1. Bootstrap: the correlation table on the OmniProbe reference table with assets/analysis.yaml
   (10,000 resamples; Pearson and Spearman CIs for every benchmark x downstream (task, metric) pair,
   paired delta r for SOC - kNN; both model subsets). Target: < 5 s.
2. Global metrics on a `full`-sized image set (100 categories x 40 images, the taxonomy's categories and
   families): a feature cache of random L2-normalised fp16 maps of a realistic shape is written to a
   temporary folder (extracting real features for 4,000 images would take far longer than the metric),
   then kNN (k = 20, 100, 200) and retrieval mAP on mean-pooled maps (and class tokens with --cls), both
   tracks. Prints the pooling time (reading the cache) and the scoring time. Target: < 10 s per backbone.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_analysis.py [--channels 384 --grid 24] [--cls]
"""

from __future__ import annotations

import argparse
import tempfile
import time

import numpy as np
import pandas as pd

from soco_pipeline.analysis import global_metrics as gm
from soco_pipeline.analysis.correlation import correlation_table, load_analysis_config
from soco_pipeline.analysis.reference import combine_scores, load_downstream, load_name_map, load_omniprobe
from soco_pipeline.features import MANIFEST_COLUMNS, FeatureStore, feature_file
from soco_pipeline.features.extract import _encode
from soco_pipeline.storage import join, write_bytes_atomic, write_parquet_atomic
from soco_pipeline.taxonomy import load_taxonomy


def bench_bootstrap(repeats: int) -> None:
    scores = combine_scores(load_omniprobe(), load_downstream(), name_map=load_name_map())
    cfg = load_analysis_config()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        table = correlation_table(scores, cfg)
        times.append(time.perf_counter() - t0)
    n_pairs = len(table[table.statistic != "spearman"])
    print(
        f"bootstrap: {cfg.n_resamples} resamples, {len(cfg.subsets)} subsets, "
        f"{n_pairs} (benchmark or delta) x (task, metric) pairs, Pearson + Spearman CIs "
        f"({len(table)} rows): best {min(times):.2f} s, median {np.median(times):.2f} s of {repeats} (target < 5 s)"
    )


def write_random_cache(
    root: str, images: pd.DataFrame, channels: int, grid: int, cls: bool, seed: int
) -> FeatureStore:
    """A FeatureStore-compatible cache of random L2-normalised fp16 maps (and class tokens)."""
    rng = np.random.default_rng(seed)
    rows = []
    folder = join(root, "random", "bench")
    for r in images.itertuples(index=False):
        arr = rng.standard_normal((channels, grid, grid), dtype=np.float32)
        arr /= np.linalg.norm(arr, axis=0, keepdims=True)
        data, checksum = _encode(arr.astype(np.float16))
        name = feature_file(r.image_id)
        write_bytes_atomic(join(folder, name), data)
        cls_path = ""
        if cls:
            tok = rng.standard_normal(channels).astype(np.float32)
            write_bytes_atomic(
                join(folder, name[:-4] + ".cls.npy"),
                _encode((tok / np.linalg.norm(tok)).astype(np.float16))[0],
            )
            cls_path = f"random/bench/{name[:-4]}.cls.npy"
        rows.append(
            {
                "backbone": "random",
                "image_id": r.image_id,
                "channels": channels,
                "grid_h": grid,
                "grid_w": grid,
                "input_size": grid * 14,
                "stride": 14.0,
                "path": f"random/bench/{name}",
                "checksum": checksum,
                "width": r.width,
                "height": r.height,
                "spec_hash": "bench",
                "cls_path": cls_path,
            }
        )
    write_parquet_atomic(pd.DataFrame(rows, columns=MANIFEST_COLUMNS), join(folder, "manifest.parquet"))
    return FeatureStore(root, "random", "bench")


def bench_global(channels: int, grid: int, cls: bool, per_category: int) -> None:
    tax = load_taxonomy()
    rng = np.random.default_rng(0)
    cats = list(tax.categories)
    images = pd.DataFrame(
        {
            "image_id": [f"{c}_{i:04d}" for c in cats for i in range(per_category)],
            "category": np.repeat(cats, per_category),
            "width": rng.integers(320, 481, len(cats) * per_category),
            "height": rng.integers(320, 481, len(cats) * per_category),
        }
    )
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        store = write_random_cache(tmp, images, channels, grid, cls, 0)
        mb = channels * grid * grid * 2 * len(images) / 2**20
        print(
            f"global metrics: {len(images)} images ({len(cats)} categories), random fp16 maps "
            f"{channels} x {grid} x {grid} ({mb:.0f} MiB cache, written in {time.perf_counter() - t0:.1f} s)"
        )
        ids = images["image_id"].tolist()
        t0 = time.perf_counter()
        gm.pooled_features(FeatureStore(tmp, "random", "bench"), ids)
        t_pool = time.perf_counter() - t0
        t0 = time.perf_counter()
        table = gm.global_metrics(
            FeatureStore(tmp, "random", "bench"), images, "random", family_of=tax.family
        )
        t_all = time.perf_counter() - t0
        kinds = ", ".join(sorted(set(table.feature)))
        print(f"  pooling alone (reading the cache): {t_pool:.2f} s")
        print(
            f"  global_metrics end to end ({kinds}; category + fine-grained tracks; k = 20, 100, 200; mAP): "
            f"{t_all:.2f} s (target < 10 s per backbone)"
        )
        chance = table[(table.metric == "knn_top1") & (table.k == 20) & (table.track == "category")]
        print(
            f"  sanity: random-feature kNN top-1 (k = 20) = {chance.value.round(2).tolist()} % (chance 1 %)"
        )
    del store


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--channels", type=int, default=384, help="map channels (384: the demo's ViT-S)")
    p.add_argument("--grid", type=int, default=24, help="grid side (24: the demo's ViT-S at S = 336)")
    p.add_argument("--cls", action="store_true", help="also store and score class tokens")
    p.add_argument("--per-category", type=int, default=40)
    p.add_argument("--skip-global", action="store_true")
    a = p.parse_args()
    bench_bootstrap(a.repeats)
    if not a.skip_global:
        bench_global(a.channels, a.grid, a.cls, a.per_category)


if __name__ == "__main__":
    main()
