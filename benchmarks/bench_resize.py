"""The effect of the opt-in tensor resize against the official PIL resize, on the embedded demo set.

For each backbone spec (default: vit_small_random and efficientnet_lite0 from assets/backbones/) the
features of every image are extracted twice, with `input.resize: pil` (the default, the official path)
and `input.resize: tensor` (F.interpolate), into a temporary cache, and the script prints:

- max |d| and the mean cosine between the two L2-normalised maps (the cached fp16 maps, compared in
  float32), over all cells of all images;
- PCK@0.1 (official reduction, all categories) of CC, SOC, SOC-geo and Cross-SOC under each resize and
  the difference in points.

    .venv/bin/python benchmarks/bench_resize.py                    # the demo set, both backbones
    .venv/bin/python benchmarks/bench_resize.py --categories 4     # a quick run on 4 categories
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tempfile
import time

import numpy as np

from soco_pipeline.backbones import load_spec
from soco_pipeline.evaluation.matching import predict
from soco_pipeline.evaluation.metrics import compute_metrics
from soco_pipeline.evaluation.protocol import load_protocol
from soco_pipeline.features import FeatureStore, extract_features
from soco_pipeline.storage import PROJECT_ROOT, default_storage_root
from soco_pipeline.taxonomy import load_taxonomy

os.environ.setdefault("HF_HUB_OFFLINE", "1")

METRICS = ("cc", "soc", "soc_geo", "cross_soc")


def demo_tables(root: str, seed: int = 0):
    """image_set, keypoints, image pairs and evaluated correspondences of the embedded demo set at `root`
    (generated there first when absent), built with the pipeline's own functions and default configs."""
    from soco_pipeline.data.embedded import ensure_dataset
    from soco_pipeline.data.imageset import build_image_set
    from soco_pipeline.data.keypoints import aggregate_keypoints
    from soco_pipeline.pairs import PairConfig, build_correspondences, build_image_pairs
    from soco_pipeline.sources import SourceConfig, read_candidates, read_raw_keypoints

    ensure_dataset(root, size="demo", seed=seed)
    cfg, tax = SourceConfig.embedded(root), load_taxonomy()
    images, _ = build_image_set(read_candidates(cfg, tax), cfg, tax)
    keypoints, _ = aggregate_keypoints(read_raw_keypoints(cfg, tax), images, tax, cfg)
    pairs = build_image_pairs(images, keypoints, tax, PairConfig(seed=seed))
    corr = build_correspondences(pairs, keypoints, tax, evaluated_only=True).to_pandas()
    return images, keypoints, pairs, corr


def scores(metrics) -> dict[str, float]:
    """PCK@0.1 of METRICS, official reduction, scope all."""
    m = metrics[(metrics.reduction == "official") & (metrics.scope == "all") & np.isclose(metrics.alpha, 0.1)]
    return {k: float(m.loc[m.metric == k, "value"].iloc[0]) for k in METRICS if (m.metric == k).any()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backbones", nargs="+", default=["vit_small_random", "efficientnet_lite0"])
    ap.add_argument("--categories", type=int, default=0, help="only the first N categories (0 = all 16)")
    ap.add_argument("--data-root", default=None, help="default storage/embedded/demo-seed0")
    args = ap.parse_args()
    root = args.data_root or os.path.join(default_storage_root(), "embedded", "demo-seed0")
    images, keypoints, pairs, corr = demo_tables(root)
    if args.categories:
        keep = sorted(images.category.unique())[: args.categories]
        images = images[images.category.isin(keep)]
        pairs = pairs[pairs.src_image.isin(images.image_id) & pairs.trg_image.isin(images.image_id)]
        corr = corr[corr.pair_id.isin(pairs.pair_id)]
    n_pairs = int(pairs.evaluated.astype(bool).sum())
    print(
        f"demo set at {root}: {len(images)} images, {images.category.nunique()} categories, "
        f"{n_pairs} evaluated pairs"
    )
    tax, protocol = load_taxonomy(), load_protocol()
    with tempfile.TemporaryDirectory(prefix="soco-bench-resize-") as cache:
        for name in args.backbones:
            base = load_spec(PROJECT_ROOT / "assets" / "backbones" / f"{name}.yaml")
            base = dataclasses.replace(base, device="cpu")
            stores, pck = {}, {}
            for resize in ("pil", "tensor"):
                spec = dataclasses.replace(base, input=dataclasses.replace(base.input, resize=resize))
                t = time.perf_counter()
                manifest = extract_features(spec, images, cache, context={"data_root": root})
                stores[resize] = FeatureStore.from_manifest(cache, manifest)
                preds = predict(pairs, corr, keypoints, images, stores[resize], protocol, name)
                pck[resize] = scores(
                    compute_metrics(preds, None, corr, keypoints, images, pairs, tax, protocol)
                )
                print(f"  {name} resize={resize}: extracted and scored in {time.perf_counter() - t:.0f} s")
            max_d, cos = 0.0, []
            for image_id in images.image_id:
                a, b = stores["pil"].get(image_id)[0], stores["tensor"].get(image_id)[0]
                max_d = max(max_d, float(np.abs(a - b).max()))
                cos.append(float((a * b).sum(0).mean()))
            print(
                f"{name}: S={manifest.input_size.iloc[0]}, max |d| = {max_d:.3g}, "
                f"mean cosine = {np.mean(cos):.6f} (L2-normalised fp16 maps, {len(images)} images)"
            )
            for k in METRICS:
                if k in pck["pil"]:
                    p, q = pck["pil"][k], pck["tensor"][k]
                    print(f"  {k:10s} PCK@0.1 pil {p:7.3f}  tensor {q:7.3f}  tensor - pil {q - p:+.3f}")


if __name__ == "__main__":
    main()
