"""CLI: python -m soco_pipeline.synth <root> --size demo|full --seed N."""

from __future__ import annotations

import argparse
import json
import time

from .generate import SIZES, generate_dataset


def main(argv: list[str] | None = None) -> None:
    """Generate the embedded data set and print its counts."""
    ap = argparse.ArgumentParser(prog="python -m soco_pipeline.synth", description=__doc__)
    ap.add_argument("root", help="output folder (any fsspec path)")
    ap.add_argument("--size", choices=sorted(SIZES), default="demo")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--categories", nargs="*", default=None, help="override the size's categories")
    ap.add_argument("--images-per-category", type=int, default=None)
    ap.add_argument("--workers", type=int, default=None)
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    man = generate_dataset(a.root, a.size, a.seed, a.categories, a.images_per_category, workers=a.workers)
    counts = {k: v for k, v in man["counts"].items() if not isinstance(v, dict)}
    print(json.dumps(counts), f"in {time.perf_counter() - t0:.1f}s")


if __name__ == "__main__":
    main()
