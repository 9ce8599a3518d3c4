"""Feature extraction throughput and cache size per backbone, on demo-like images.

Builds N images like the embedded demo set (scikit-image photos cropped to a long side of 320-480
px), a matching hand-made ground truth for the oracles, and runs extract_features for the active
specs (assets/backbones/) into a temporary cache. Prints images/s (model load excluded: the backbone
is built before the clock starts) and the fp16 cache size per image, then the projected time for
the demo set (16 categories x 24 images) with every active backbone.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_features.py [--n 24] [--specs dense_sift ...]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np
import pandas as pd
import skimage.data
import torch
from PIL import Image

from soco_pipeline.backbones import BackboneContext, build_backbone, list_specs
from soco_pipeline.features import extract_features
from soco_pipeline.storage import write_parquet_atomic
from soco_pipeline.taxonomy import load_taxonomy

PHOTOS = ("astronaut", "coffee", "chelsea", "rocket", "hubble_deep_field", "immunohistochemistry")
DEMO_IMAGES = 16 * 24


def make_images(root: str, n: int, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """n JPEGs with a long side of 320-480 px, their image rows and random visible car keypoints."""
    rng = np.random.default_rng(seed)
    taxonomy = load_taxonomy()
    category = "car" if "car" in taxonomy.categories else taxonomy.categories[0]
    kps = taxonomy.category_keypoints(category)
    rows, gt = [], []
    for i in range(n):
        photo = getattr(skimage.data, PHOTOS[i % len(PHOTOS)])()
        long_side = int(rng.integers(320, 481))
        short_side = int(long_side * rng.uniform(0.6, 1.0))
        w, h = (long_side, short_side) if i % 2 == 0 else (short_side, long_side)
        img = Image.fromarray(photo[..., :3]).resize((w, h), Image.BICUBIC)
        image_id = f"{category}_{i:04d}"
        uri = os.path.join(root, f"{image_id}.JPEG")
        img.save(uri, quality=90)
        rows.append({"image_id": image_id, "uri": uri, "width": w, "height": h, "category": category})
        xy = rng.uniform(0, 1, size=(len(kps), 2)) * [w, h]
        gt.append(
            pd.DataFrame(
                {
                    "image_id": image_id,
                    "category": category,
                    "keypoint": kps,
                    "x": xy[:, 0],
                    "y": xy[:, 1],
                    "visible": rng.uniform(size=len(kps)) < 0.7,
                    "part_id": 1,
                }
            )
        )
    write_parquet_atomic(pd.concat(gt), os.path.join(root, "ground_truth", "keypoints.parquet"))
    return pd.DataFrame(rows), pd.concat(gt)


def main() -> None:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=24, help="images per backbone")
    parser.add_argument("--specs", nargs="*", default=None, help="active spec names (default: all)")
    args = parser.parse_args()
    specs = list_specs()
    names = args.specs or list(specs)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CUDA {torch.cuda.is_available()}")
    with tempfile.TemporaryDirectory() as tmp:
        images, _ = make_images(tmp, args.n)
        ctx = BackboneContext(data_root=tmp)
        total_demo_s = 0.0
        print(
            f"{'backbone':20s} {'S':>5s} {'grid':>8s} {'C':>5s} {'img/s':>8s} {'MB/img':>8s} {'demo set':>9s}"
        )
        for name in names:
            spec = specs[name]
            backbone = build_backbone(spec, ctx)
            # Warm-up on one image outside the timed run (first-call allocations, OpenCV init).
            extract_features(spec, images.iloc[:1], os.path.join(tmp, "warm"), backbone=backbone)
            cache = os.path.join(tmp, "cache")
            t0 = time.perf_counter()
            manifest = extract_features(spec, images, cache, backbone=backbone)
            dt = time.perf_counter() - t0
            rate = len(images) / dt
            size_mb = np.mean([os.path.getsize(os.path.join(cache, p)) for p in manifest.path]) / 2**20
            r = manifest.iloc[0]
            demo_s = DEMO_IMAGES / rate
            total_demo_s += demo_s
            print(
                f"{name:20s} {r.input_size:5d} {f'{r.grid_h}x{r.grid_w}':>8s} {r.channels:5d} {rate:8.2f} "
                f"{size_mb:8.2f} {demo_s:8.0f}s"
            )
        print(f"projected demo set ({DEMO_IMAGES} images) for these backbones: {total_demo_s:.0f} s")


if __name__ == "__main__":
    main()
