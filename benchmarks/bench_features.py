"""Feature extraction: where the time goes, per backbone, on the embedded demo set.

For each spec (default: the active specs in assets/backbones/) and each of `--repeats` rounds, one run
measures on the same N demo images (spread over the categories):

- decode        JPEG decode of every image (load_image), one thread;
- preprocess    the official input protocol (pad, resize to S, normalise) on the decoded images;
- bare forward  the model alone on pre-made input tensors (warm: one batch runs first), backbone.forward;
- cache write   fp16 conversion, .npy encoding, the xxh3_128 checksum and the atomic file write of every map;
- whole         extract_features into an empty cache folder (the backbone built beforehand);
- whole/bare    the ratio of the last two (target for the ViT and EfficientNet specs: <= 1.25).

Best-of-N per figure and the spread of the ratio are printed at the end (the machine may be shared).
The embedded demo set is generated under storage/embedded/demo-seed0 on first use (~2 minutes).

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_features.py [--n 48] [--repeats 3] [--specs ...]
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_features.py --specs vit_small_random --size 798
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import tempfile
import time

import numpy as np
import pandas as pd
import torch

from soco_pipeline.backbones import BackboneContext, BackboneSpec, build_backbone, list_specs, parse_spec
from soco_pipeline.backbones.preprocess import preprocess_batch
from soco_pipeline.features import extract_features, load_image
from soco_pipeline.features.extract import _encode
from soco_pipeline.storage import default_storage_root, join, write_bytes_atomic

os.environ.setdefault("HF_HUB_OFFLINE", "1")
STAGES = ("decode", "preprocess", "bare forward", "cache write", "whole")


def demo_images(root: str, n: int) -> pd.DataFrame:
    """n image_set rows of the embedded demo set at `root` (generated there if absent), spread evenly."""
    from soco_pipeline.data.embedded import ensure_dataset
    from soco_pipeline.data.imageset import build_image_set
    from soco_pipeline.sources import SourceConfig, read_candidates
    from soco_pipeline.taxonomy import load_taxonomy

    ensure_dataset(root, size="demo", seed=0)
    cfg, tax = SourceConfig.embedded(root), load_taxonomy()
    images, _ = build_image_set(read_candidates(cfg, tax), cfg, tax)
    n = min(n, len(images))
    pick = np.linspace(0, len(images) - 1, n).round().astype(int)
    return images.iloc[pick].reset_index(drop=True)


def at_size(spec: BackboneSpec, size: int | None) -> BackboneSpec:
    """The spec with input {nearest_multiple: size} for ViTs (kind timm); other kinds unchanged."""
    if size is None or spec.kind != "timm":
        return spec
    doc = {**spec.to_dict(), "input": {"nearest_multiple": size}}
    doc.pop("name")
    return parse_spec(doc, spec.name, spec.source)


def batches(images: pd.DataFrame, size: int) -> list[pd.DataFrame]:
    """The images in batches of `size`, in order."""
    return [images.iloc[i : i + size] for i in range(0, len(images), size)]


def sync(device: torch.device) -> None:
    """Wait for queued device work (CUDA is asynchronous)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Clock:
    """Wall and process CPU seconds of a block (CPU seconds resist other users of a shared machine)."""

    def __init__(self, wall: dict[str, float], cpu: dict[str, float], name: str):
        self.wall, self.cpu, self.name = wall, cpu, name

    def __enter__(self):
        self.t, self.c = time.perf_counter(), time.process_time()

    def __exit__(self, *exc):
        self.wall[self.name] = time.perf_counter() - self.t
        self.cpu[self.name] = time.process_time() - self.c


def one_round(spec: BackboneSpec, backbone, images: pd.DataFrame, tmp: str, r: int):
    """(wall seconds, process CPU seconds) of every stage for one round over `images`."""
    dev = backbone.device
    out: dict[str, float] = {}
    cpu: dict[str, float] = {}
    groups = batches(images, spec.batch_size)
    with Clock(out, cpu, "decode"):
        decoded = [[load_image(u, i) for u, i in zip(g.uri, g.image_id, strict=True)] for g in groups]

    size = backbone.input_size(int(images.width[0]), int(images.height[0]))
    with Clock(out, cpu, "preprocess"):
        if backbone.needs_pixels:
            tensors = [
                preprocess_batch(imgs, size, spec.normalisation, dev, spec.input.resize) for imgs in decoded
            ]
        else:
            tensors = [None] * len(groups)
        sync(dev)

    with torch.inference_mode():
        backbone.forward(tensors[0], groups[0].reset_index(drop=True), size)  # warm
        sync(dev)
        maps = []
        with Clock(out, cpu, "bare forward"):
            for x, g in zip(tensors, groups, strict=True):
                maps.append(backbone.forward(x, g.reset_index(drop=True), size))
            sync(dev)
        maps = [torch.nn.functional.normalize(m.float(), dim=1).cpu() for m in maps]

    folder = join(tmp, f"write{r}")
    with Clock(out, cpu, "cache write"):
        for m, g in zip(maps, groups, strict=True):
            for f, image_id in zip(m, g.image_id, strict=True):
                data, _ = _encode(f.to(torch.float16).numpy())
                write_bytes_atomic(join(folder, f"{image_id}.npy"), data)

    with Clock(out, cpu, "whole"):
        extract_features(spec, images, join(tmp, f"cache{r}"), backbone=backbone)
    return out, cpu


def main() -> None:
    """Run the breakdown and print its figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=48, help="demo images per backbone")
    ap.add_argument("--specs", nargs="*", default=None, help="active spec names (default: all)")
    ap.add_argument(
        "--size", type=int, default=None, help="input size for the ViT specs (798: the protocol's)"
    )
    ap.add_argument("--repeats", type=int, default=3, help="rounds per backbone (best-of and spread)")
    ap.add_argument("--batch-size", type=int, default=None, help="override the specs' batch_size")
    ap.add_argument("--device", default=None, help="override the specs' device (cpu, cuda)")
    ap.add_argument(
        "--data-root", default=None, help="the embedded demo set (default storage/embedded/demo-seed0)"
    )
    args = ap.parse_args()

    root = args.data_root or join(default_storage_root(), "embedded", "demo-seed0")
    images = demo_images(root, args.n)
    specs = list_specs()
    names = args.specs or list(specs)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, CUDA {torch.cuda.is_available()}, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; {len(images)} demo images "
        f"({images.width.min()}-{images.width.max()} x {images.height.min()}-{images.height.max()} px)"
    )
    summary = []
    for name in names:
        spec = at_size(specs[name], args.size)
        if args.batch_size:
            spec = dataclasses.replace(spec, batch_size=args.batch_size)
        if args.device:
            spec = dataclasses.replace(spec, device=args.device)
        backbone = build_backbone(spec, BackboneContext(data_root=root))
        size = backbone.input_size(0, 0)
        print(
            f"\n{name} ({spec.kind}, S={size}, batch {spec.batch_size}, {backbone.device}): seconds for "
            f"{len(images)} images"
        )
        print("  round " + "".join(f"{s:>14s}" for s in STAGES) + f"{'whole/bare':>12s}")
        rounds, cpus = [], []
        with tempfile.TemporaryDirectory() as tmp:
            extract_features(spec, images.iloc[:1], join(tmp, "warm"), backbone=backbone)  # warm-up
            for r in range(args.repeats):
                t, c = one_round(spec, backbone, images, tmp, r)
                rounds.append(t)
                cpus.append(c)
                print(
                    f"  {r:5d} "
                    + "".join(f"{t[s]:14.2f}" for s in STAGES)
                    + f"{t['whole'] / t['bare forward']:12.3f}"
                )
                print(
                    "    cpu "
                    + "".join(f"{c[s]:14.2f}" for s in STAGES)
                    + f"{c['whole'] / c['bare forward']:12.3f}  (process CPU seconds)"
                )
        best = {s: min(t[s] for t in rounds) for s in STAGES}
        ratios = [t["whole"] / t["bare forward"] for t in rounds]
        print("  best  " + "".join(f"{best[s]:14.2f}" for s in STAGES) + f"{min(ratios):12.3f}")
        print(
            f"  whole/bare per round: min {min(ratios):.3f}, median {statistics.median(ratios):.3f}, "
            f"max {max(ratios):.3f}; best whole / best bare {best['whole'] / best['bare forward']:.3f}; "
            f"{len(images) / best['whole']:.2f} images/s whole, {len(images) / best['bare forward']:.2f} bare"
        )
        cpu_ratios = [c["whole"] / c["bare forward"] for c in cpus]
        print(
            f"  CPU-seconds whole/bare per round: min {min(cpu_ratios):.3f}, median "
            f"{statistics.median(cpu_ratios):.3f}, max {max(cpu_ratios):.3f}"
        )
        summary.append((name, size, min(ratios), statistics.median(ratios), max(ratios)))
    print(
        "\nbackbone              S   whole/bare min  median     max   (target <= 1.25 for ViT/EfficientNet)"
    )
    for name, size, lo, med, hi in summary:
        print(f"{name:20s} {size:4d} {lo:14.3f} {med:7.3f} {hi:7.3f}")


if __name__ == "__main__":
    main()
