"""The official scorer's loop against the pipeline: same exported release, same weights, one script.

1. The embedded demo set's tables (the first `--categories` categories) are exported in the SOCO release
   layout (`export_soco_release`, as `soco export-release` does) into a temporary folder.
2. The official structure (GenIntel/SOCO `scripts/evaluate_dinov2.py`, written here from its description):
   for every pair file under PairAnnotations/{intra,cross}, open both images from Images/, preprocess
   each (the official PIL path), encode each (one forward per pair side: two per pair), sample the source
   keypoints of `semantic_overlap` (grid_sample, bilinear, align_corners=True at 2p - 1), cosine against
   every target patch, argmax, PCK@0.1 per pair; then pair -> category -> mean.
3. The pipeline on the same images and pairs: `extract_features` (each image encoded once, into a feature
   cache), `matching.predict` (one matrix product per target image) and `compute_metrics`.

Both use one timm model (`--model`, seeded random weights) at the same S; the official loop calls the
pipeline's own backbone for each side, so the features are the same and only the loop structure differs.
Prints the pair and image counts (pairs per image), the encodes each side ran, both wall times (one run
each, on the same machine in the same process), their ratio, and SOC / Cross-SOC from both.

    .venv/bin/python benchmarks/bench_official_loop.py --categories 4 [--size 224] [--data-root ...]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from PIL import Image

from soco_pipeline.backbones import build_backbone, parse_spec
from soco_pipeline.data.soco_export import export_soco_release
from soco_pipeline.evaluation.geometry import scale_keypoints
from soco_pipeline.evaluation.matching import predict
from soco_pipeline.evaluation.metrics import compute_metrics
from soco_pipeline.evaluation.protocol import load_protocol
from soco_pipeline.features import FeatureStore, extract_features
from soco_pipeline.storage import default_storage_root
from soco_pipeline.taxonomy import load_taxonomy

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_resize import demo_tables  # noqa: E402 - the same demo tables as the resize benchmark

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def official_loop(release: Path, backbone, alpha: float = 0.1) -> tuple[dict[str, float], int]:
    """SOC PCK (intra, cross) by the official loop structure over the release's pair files; encodes run."""
    size = backbone.input_size(0, 0)
    per_pair, encodes = [], 0
    for level in ("intra", "cross"):
        for path in sorted((release / "PairAnnotations" / level).glob("*/*.json")):
            d = json.loads(path.read_text())
            names = list(d["semantic_overlap"])
            if not names:
                continue
            feats = []
            for side in ("src", "trg"):  # one encode per pair side, as the official script does
                image = np.asarray(
                    Image.open(release / "Images" / d[f"{side}_category"] / d[f"{side}_image"]).convert("RGB")
                )
                w, h = d[f"{side}_imsize"]
                rec = pd.DataFrame(
                    [
                        {
                            "image_id": d[f"{side}_image"],
                            "width": w,
                            "height": h,
                            "category": d[f"{side}_category"],
                        }
                    ]
                )
                feats.append(backbone.extract([image], rec)[0].half().float())  # as the cache stores it
                encodes += 1
            fs, ft = feats
            src = {k["name"]: k["pos"] for k in d["src_keypoints"]}
            trg = {k["name"]: k["pos"] for k in d["trg_keypoints"]}
            uv = scale_keypoints(np.array([src[n] for n in names]), np.array(d["src_imsize"]), size)
            grid = torch.from_numpy(2 * uv - 1).float().view(1, 1, -1, 2)
            desc = F.grid_sample(fs[None], grid, mode="bilinear", align_corners=True)[0, :, 0].T
            sim = desc @ ft.flatten(1)
            gh, gw = ft.shape[1:]
            idx = sim.argmax(1).numpy()
            pred = np.stack([(idx % gw) / gw, (idx // gw) / gh], axis=1)  # the patch's top-left corner
            gt = scale_keypoints(np.array([trg[n] for n in names]), np.array(d["trg_imsize"]), size)
            left, top, right, bottom = d["trg_bndbox"]
            radius = alpha * max(right - left, bottom - top) / max(d["trg_imsize"])
            per_pair.append(
                (level, d["pair_group"], float((np.linalg.norm(pred - gt, axis=1) < radius).mean()))
            )
    df = pd.DataFrame(per_pair, columns=["level", "group", "pck"])
    means = df.groupby(["level", "group"]).pck.mean().groupby("level").mean()
    return {
        "soc": 100 * float(means.get("intra", np.nan)),
        "cross_soc": 100 * float(means.get("cross", np.nan)),
    }, encodes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--categories", type=int, default=4, help="the first N demo categories (0 = all 16)")
    ap.add_argument("--model", default="vit_small_patch14_dinov2")
    ap.add_argument("--size", type=int, default=224, help="input side S (nearest multiple of the patch)")
    ap.add_argument("--data-root", default=None, help="default storage/embedded/demo-seed0")
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    root = args.data_root or os.path.join(default_storage_root(), "embedded", "demo-seed0")
    images, keypoints, pairs, corr = demo_tables(root)
    if args.categories:
        keep = set(sorted(images.category.unique())[: args.categories])
        images = images[images.category.isin(keep)].reset_index(drop=True)
        pairs = pairs[pairs.src_image.isin(images.image_id) & pairs.trg_image.isin(images.image_id)]
        keypoints = keypoints[keypoints.image_id.isin(images.image_id)]
        corr = corr[corr.pair_id.isin(pairs.pair_id)]
    tax, protocol = load_taxonomy(), load_protocol()
    spec = parse_spec(
        {
            "kind": "timm",
            "model": args.model,
            "input": {"nearest_multiple": args.size},
            "device": "cpu",
            "batch_size": 8,
        },
        "bench_vit",
    )
    backbone = build_backbone(spec)
    evaluated = pairs[pairs.evaluated.astype(bool)]
    n_img = len(set(evaluated.src_image) | set(evaluated.trg_image))
    print(
        f"{len(evaluated)} evaluated pairs over {n_img} images ({len(evaluated) / n_img:.1f} pairs per image), "
        f"{images.category.nunique()} categories; {args.model} (random, seed 0) at S={backbone.input_size(0, 0)}, "
        f"CPU, torch threads {torch.get_num_threads()}"
    )
    with tempfile.TemporaryDirectory(prefix="soco-bench-official-") as tmp:
        release = Path(tmp) / "release"
        export_soco_release(images, keypoints, pairs, corr, str(release), tax)
        t = time.perf_counter()
        theirs, encodes = official_loop(release, backbone)
        t_official = time.perf_counter() - t

        t = time.perf_counter()
        manifest = extract_features(
            spec,
            images[images.image_id.isin(set(evaluated.src_image) | set(evaluated.trg_image))],
            os.path.join(tmp, "cache"),
            backbone=backbone,
        )
        t_extract = time.perf_counter() - t
        store = FeatureStore.from_manifest(os.path.join(tmp, "cache"), manifest)
        preds = predict(pairs, corr, keypoints, images, store, protocol, spec.name)
        m = compute_metrics(preds, None, corr, keypoints, images, pairs, tax, protocol)
        t_pipeline = time.perf_counter() - t
    m = m[(m.reduction == "official") & (m.scope == "all") & np.isclose(m.alpha, 0.1)].set_index("metric")[
        "value"
    ]
    print(f"official loop: {t_official:.1f} s ({encodes} encodes, 2 per pair)")
    print(
        f"pipeline:      {t_pipeline:.1f} s ({len(manifest)} encodes, 1 per image; extraction {t_extract:.1f} s, "
        f"matching and scoring {t_pipeline - t_extract:.1f} s)"
    )
    print(
        f"ratio official / pipeline: {t_official / t_pipeline:.1f}x (encodes {encodes / len(manifest):.1f}x)"
    )
    for k in ("soc", "cross_soc"):
        print(f"  {k:10s} official loop {theirs[k]:7.3f}  pipeline {float(m.get(k, np.nan)):7.3f}")


if __name__ == "__main__":
    main()
