"""FG-BMK speed at demo scale: rendering the embedded set, global-feature extraction per backbone, probe and
retrieval-projection training; and the estimated probe / projection wall time at the full (published) setting,
from the measured iterations per second at the full batch size (128) and the full grid (24 heads).

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_fgbmk.py [--backbones vit_small_random ...]
        [--subclasses 100] [--device cpu]

Prints one line per step; nothing is asserted (timings depend on the machine and its load).
"""

from __future__ import annotations

import argparse
import tempfile
import time

import numpy as np

from soco_pipeline.backbones import list_specs
from soco_pipeline.tasks.fgbmk.config import load_config
from soco_pipeline.tasks.fgbmk.embedded import ensure_embedded, hierarchy
from soco_pipeline.tasks.fgbmk.global_features import build_extractor, extract_global
from soco_pipeline.tasks.fgbmk.linear_probe import train_probe
from soco_pipeline.tasks.fgbmk.retrieval import train_retrieval


def main() -> None:
    """Run the benchmark."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backbones", nargs="*", default=None, help="spec names in assets/backbones (default: all)")
    ap.add_argument("--subclasses", type=int, default=100, help="first N subclasses of the hierarchy")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    demo, full = load_config(scale="demo"), load_config(scale="full")
    subs = list(hierarchy().subclass[: args.subclasses])
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        items = ensure_embedded(f"{tmp}/set", demo.embedded, demo.seed, subs)
        dt = time.perf_counter() - t0
        print(f"embedded set: {len(items)} images ({items.subclass.nunique()} subclasses) rendered in {dt:.1f} s "
              f"({len(items) / dt:.1f} images/s)", flush=True)
        labels = items.subclass_id.to_numpy()
        train, test = (items.split == "train").to_numpy(), (items.split == "test").to_numpy()
        specs = list_specs()
        total = dt
        for name in args.backbones or list(specs):
            ex = build_extractor(specs[name], demo.global_features, {"data_root": f"{tmp}/set", "device": args.device})
            t0 = time.perf_counter()
            feats = extract_global(ex, items, f"{tmp}/cache", demo.global_features)
            t_ext = time.perf_counter() - t0
            f_tr, f_te = feats.subset(items.image_id[train]), feats.subset(items.image_id[test])
            probe = train_probe(f_tr, labels[train], f_te, labels[test], demo.linear_probe, demo.seed)
            ret = train_retrieval(f_tr, labels[train], f_te, labels[test], demo.retrieval, demo.seed)
            # full setting: batch 128, 24 heads; measure a few iterations at that batch, extrapolate to 10 x 1000
            timing = full.linear_probe.model_copy(update={"epochs": 1, "epoch_length": 20})
            p_full = train_probe(f_tr, labels[train], f_te, labels[test], timing, demo.seed)
            r_timing = full.retrieval.model_copy(update={"epochs": 1, "epoch_length": 20})
            r_full = train_retrieval(f_tr, labels[train], f_te, labels[test], r_timing, demo.seed)
            ips_p, ips_r = p_full.iterations / p_full.seconds, r_full.iterations / r_full.seconds
            dims = [feats.cls_prev.shape[1], feats.cls_last.shape[1], feats.patch_mean.shape[1]]
            total += t_ext + probe.seconds + ret.seconds
            print(f"{name}: global features {len(items)} images in {t_ext:.1f} s ({len(items) / t_ext:.1f} images/s, "
                  f"dims {dims}); demo probe {probe.iterations} it in {probe.seconds:.1f} s (top-1 {probe.top1:.1f}), "
                  f"demo projection {ret.iterations} it in {ret.seconds:.1f} s (recall@1 {ret.recall_at_1:.1f}); "
                  f"full setting: probe {ips_p:.1f} it/s -> {full.linear_probe.max_iter / ips_p / 60:.1f} min, "
                  f"projection {ips_r:.1f} it/s -> {full.retrieval.max_iter / ips_r / 60:.1f} min", flush=True)
        print(f"demo-scale total (render + extract + probe + projection, subclass level only): {total:.1f} s")
        print(f"mean labels per split: train {np.bincount(labels[train]).mean():.1f}, "
              f"test {np.bincount(labels[test]).mean():.1f}")


if __name__ == "__main__":
    main()
