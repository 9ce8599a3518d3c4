"""GPU check: extraction throughput, CPU-vs-GPU agreement and memory, in one short command (< 5 minutes).

On a machine with a GPU it runs, on a slice of the embedded demo set (generated first if absent):

- a random ViT-B/14 at 798 px and the tiny diffusion backbone, extracted on the GPU: whole
  extract_features images/s against the forward pass alone on pre-made device tensors (target >= 0.8),
  both over the same `--n` images (also for each option below);
- the peak GPU memory of each extraction;
- CPU-vs-GPU agreement: cosine of the cached fp16 maps cell by cell, and the fraction of identical
  argmax cells (free-mode predictions) on the demo pairs among the first `--agree` images;
- each GPU option of the spec (autocast bf16 / fp16, channels_last for the convolutional diffusion
  model, torch.compile) against the fp32 GPU result: fraction of identical argmax cells, and images/s.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/gpu_check.py                  # on the GPU machine
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/gpu_check.py --device cpu --size 56 --n 8 ...  # anywhere

tests/test_gpu_check.py runs it on the CPU with tiny settings so that it cannot rot.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tempfile
import time

import numpy as np
import pandas as pd
import torch

from soco_pipeline.backbones import BackboneContext, BackboneSpec, build_backbone, parse_spec
from soco_pipeline.features import FeatureStore, extract_features, load_image
from soco_pipeline.settings import Settings
from soco_pipeline.storage import join

os.environ.setdefault("HF_HUB_OFFLINE", "1")
OPTIONS = {  # option name -> (spec fields, kinds it applies to)
    "bf16": ({"precision": "bf16"}, ("timm", "diffusion")),
    "fp16": ({"precision": "fp16"}, ("timm", "diffusion")),
    "channels_last": ({"channels_last": True}, ("diffusion",)),
    "compile": ({"compile": True}, ("timm", "diffusion")),
}


@dataclasses.dataclass
class Tables:
    """The slice of the embedded data set the check runs on."""

    images: pd.DataFrame
    keypoints: pd.DataFrame
    pairs: pd.DataFrame
    corr: pd.DataFrame


def demo_tables(root: str, categories: list[str] | None, per_category: int | None) -> Tables:
    """image_set, keypoints, evaluated pairs and correspondences of the embedded set at `root` (generated
    there if absent or different), built by the pipeline's own functions."""
    from soco_pipeline.data.embedded import ensure_dataset
    from soco_pipeline.data.imageset import build_image_set
    from soco_pipeline.data.keypoints import aggregate_keypoints
    from soco_pipeline.pairs import PairConfig, build_correspondences, build_image_pairs
    from soco_pipeline.sources import SourceConfig, read_candidates, read_raw_keypoints
    from soco_pipeline.taxonomy import load_taxonomy

    ensure_dataset(root, size="demo", seed=0, categories=categories, images_per_category=per_category)
    cfg, tax = SourceConfig.embedded(root), load_taxonomy()
    images, _ = build_image_set(read_candidates(cfg, tax), cfg, tax)
    keypoints, _ = aggregate_keypoints(read_raw_keypoints(cfg, tax), images, tax, cfg)
    pairs = build_image_pairs(images, keypoints, tax, PairConfig(seed=0))
    corr = build_correspondences(pairs, keypoints, tax, evaluated_only=True).to_pandas()
    return Tables(images, keypoints, pairs[pairs.evaluated.astype(bool)], corr)


def subset(t: Tables, n: int) -> Tables:
    """The first n images and the evaluated pairs between them."""
    images = t.images.iloc[:n].reset_index(drop=True)
    ids = set(images.image_id)
    pairs = t.pairs[t.pairs.src_image.isin(ids) & t.pairs.trg_image.isin(ids)]
    return Tables(images, t.keypoints, pairs, t.corr[t.corr.pair_id.isin(set(pairs.pair_id))])


def sync(device: torch.device) -> None:
    """Wait for the device's queued work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def forward_rate(backbone, images: pd.DataFrame, repeats: int = 2) -> float:
    """images/s of the forward pass alone (plus the channel normalisation), on pre-made device tensors."""
    from soco_pipeline.backbones.preprocess import preprocess_batch

    bs, dev = backbone.spec.batch_size, backbone.device
    size = backbone.input_size(0, 0)
    groups = [images.iloc[i : i + bs].reset_index(drop=True) for i in range(0, len(images), bs)]
    inputs = [
        preprocess_batch(
            [load_image(u) for u in g.uri], size, backbone.spec.normalisation, dev, backbone.spec.input.resize
        )
        for g in groups
    ]
    if backbone.spec.channels_last:
        inputs = [x.contiguous(memory_format=torch.channels_last) for x in inputs]
    backbone._apply_speed_options()
    best = float("inf")
    with torch.inference_mode(), backbone._autocast():
        for x, g in zip(inputs[:1], groups[:1], strict=True):  # warm (and compile, when asked)
            backbone.forward(x, g, size)
        for _ in range(repeats):
            sync(dev)
            t = time.perf_counter()
            for x, g in zip(inputs, groups, strict=True):
                torch.nn.functional.normalize(backbone.forward(x, g, size).float(), dim=1)
            sync(dev)
            best = min(best, time.perf_counter() - t)
    return len(images) / best


def extract_rate(
    spec: BackboneSpec, backbone, images: pd.DataFrame, cache: str
) -> tuple[float, pd.DataFrame]:
    """(images/s of the whole extract_features into an empty cache, its manifest); warm backbone."""
    extract_features(spec, images.iloc[: spec.batch_size], join(cache, "warm"), backbone=backbone)
    sync(backbone.device)
    t = time.perf_counter()
    manifest = extract_features(spec, images, join(cache, "run"), backbone=backbone)
    sync(backbone.device)
    return len(images) / (time.perf_counter() - t), manifest


def predictions(t: Tables, cache: str, spec: BackboneSpec) -> pd.DataFrame:
    """Free-mode predictions on the pairs of `t` from a feature cache (the pipeline's protocol config)."""
    from soco_pipeline.evaluation.matching import predict
    from soco_pipeline.evaluation.protocol import load_protocol

    store = FeatureStore.for_spec(cache, spec)
    pred = predict(t.pairs, t.corr, t.keypoints, t.images, store, load_protocol(), spec.name)
    return pred[pred["mode"] == "free"].set_index(["pair_id", "src_keypoint"]).sort_index()


def same_cells(a: pd.DataFrame, b: pd.DataFrame) -> float:
    """Fraction of queries whose predicted point (the argmax cell's corner) is identical in a and b."""
    b = b.loc[a.index]
    return float(((a.pred_x == b.pred_x) & (a.pred_y == b.pred_y)).mean()) if len(a) else float("nan")


def map_agreement(t: Tables, cache_a: str, spec_a: BackboneSpec, cache_b: str, spec_b: BackboneSpec) -> dict:
    """Cell-by-cell cosine of two caches' maps (mean and minimum) and their largest absolute difference."""
    sa, sb = FeatureStore.for_spec(cache_a, spec_a), FeatureStore.for_spec(cache_b, spec_b)
    cos, diff = [], 0.0
    for image_id in t.images.image_id:
        fa, fb = sa.get(image_id)[0], sb.get(image_id)[0]
        cos.append((fa * fb).sum(axis=0).ravel())
        diff = max(diff, float(np.abs(fa - fb).max()))
    c = np.concatenate(cos)
    return {"cos_mean": float(c.mean()), "cos_min": float(c.min()), "max_abs": diff}


def check_specs(args) -> list[BackboneSpec]:
    """The random ViT and the tiny diffusion specs at the requested sizes, on the requested device."""
    common = {"weights": "none", "device": args.device, "seed": 0}
    vit = parse_spec(
        {
            **common,
            "kind": "timm",
            "model": args.vit,
            "input": {"nearest_multiple": args.size},
            "normalisation": "imagenet",
            "batch_size": args.batch,
        },
        "vit_random",
    )
    dift = parse_spec(
        {
            **common,
            "kind": "diffusion",
            "model": "tiny",
            "normalisation": "half",
            "input": {"nearest_multiple": args.diffusion_size},
            "ensemble": args.ensemble,
            "batch_size": args.diffusion_batch,
        },
        "tiny_diffusion",
    )
    return [vit, dift]


def with_fields(spec: BackboneSpec, **fields) -> BackboneSpec:
    """The spec with some fields replaced, validated again."""
    doc = {**spec.to_dict(), **fields}
    doc.pop("name")
    return parse_spec(doc, spec.name, spec.source)


def run(args) -> dict:
    """Run the check, print its figures and return them (for the test)."""
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit(
            "no CUDA device here: run with --device cpu (and tiny settings) to exercise the script"
        )
    t0 = time.perf_counter()
    cats = args.categories.split(",") if args.categories else None
    # A folder of its own per category choice (as the pipeline's settings name it): never overwrite another.
    root = (
        args.data_root
        or Settings(
            categories=tuple(cats) if cats else None, images_per_category=args.per_category
        ).embedded_root
    )
    tables = demo_tables(root, cats, args.per_category)
    run_t, agree_t = subset(tables, args.n), subset(tables, args.agree)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(
        f"torch {torch.__version__} on {name}; {len(run_t.images)} images for throughput, "
        f"{len(agree_t.images)} images / {len(agree_t.pairs)} pairs / {len(agree_t.corr)} correspondences "
        f"for agreement (tables in {time.perf_counter() - t0:.0f} s)"
    )
    ctx = BackboneContext(data_root=root)
    out: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        for spec in check_specs(args):
            fig = out[spec.name] = {}
            backbone = build_backbone(spec, ctx)
            size = backbone.input_size(0, 0)
            if device.type == "cuda":
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats(device)
            fwd = forward_rate(backbone, run_t.images)
            whole, _ = extract_rate(spec, backbone, run_t.images, join(tmp, spec.name, "dev"))
            peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else float("nan")
            fig.update(
                forward=fwd,
                whole=whole,
                ratio=whole / fwd,
                peak_gib=peak,
                n_forward=len(run_t.images),
                n_whole=len(run_t.images),
            )
            print(
                f"\n{spec.name} (S={size}, batch {spec.batch_size}, {device}): whole {whole:.2f} images/s, "
                f"forward only {fwd:.2f} images/s, whole/forward {whole / fwd:.3f} (target >= 0.8); "
                f"peak GPU memory {peak:.2f} GiB"
            )

            # CPU reference vs the device, on the agreement slice.
            dev_cache = join(tmp, spec.name, "dev", "run")
            cpu_spec = dataclasses.replace(spec, device="cpu")
            cpu_cache = join(tmp, spec.name, "cpu")
            extract_features(cpu_spec, agree_t.images, cpu_cache, context=ctx)
            maps = map_agreement(agree_t, cpu_cache, cpu_spec, dev_cache, spec)
            ref = predictions(agree_t, dev_cache, spec)
            cells = same_cells(predictions(agree_t, cpu_cache, cpu_spec), ref)
            fig.update(maps, cpu_same_cells=cells)
            print(
                f"  CPU vs {device.type}: map cosine mean {maps['cos_mean']:.6f}, min {maps['cos_min']:.6f}, "
                f"max |diff| {maps['max_abs']:.2e}; identical argmax cells {cells:.4f} of {len(ref)} queries"
            )

            for opt in args.options:
                fields, kinds = OPTIONS[opt]
                if spec.kind not in kinds:
                    continue
                try:
                    ospec = with_fields(spec, **fields)
                    ob = build_backbone(ospec, ctx)
                    ofwd = forward_rate(ob, run_t.images)
                    # Whole and forward-only on the same images; the agreement slice is then completed.
                    rate, _ = extract_rate(ospec, ob, run_t.images, join(tmp, spec.name, opt))
                    extract_features(ospec, agree_t.images, join(tmp, spec.name, opt, "run"), backbone=ob)
                    ocells = same_cells(predictions(agree_t, join(tmp, spec.name, opt, "run"), ospec), ref)
                except Exception as e:  # a check reports what fails instead of stopping the other figures
                    print(f"  option {opt:13s}: FAILED ({type(e).__name__}: {str(e).splitlines()[0][:200]})")
                    fig[opt] = {"error": repr(e)}
                    continue
                fig[opt] = {
                    "same_cells": ocells,
                    "forward": ofwd,
                    "whole": rate,
                    "n_forward": len(run_t.images),
                    "n_whole": len(run_t.images),
                }
                print(
                    f"  option {opt:13s}: identical argmax cells vs fp32 {ocells:.4f}; forward only "
                    f"{ofwd:.2f} images/s ({ofwd / fwd:.2f}x fp32), whole {rate:.2f} images/s"
                )
            del backbone
    print(f"\ngpu_check done in {time.perf_counter() - t0:.0f} s")
    return out


def parser() -> argparse.ArgumentParser:
    """The command line (defaults: the GPU run)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--vit", default="vit_base_patch14_dinov2", help="timm ViT (random weights)")
    ap.add_argument("--size", type=int, default=798, help="ViT input size")
    ap.add_argument("--batch", type=int, default=16, help="ViT batch size")
    ap.add_argument(
        "--diffusion-size", type=int, default=128, help="tiny diffusion input size (attention runs at S/2)"
    )
    ap.add_argument("--diffusion-batch", type=int, default=8)
    ap.add_argument("--ensemble", type=int, default=8)
    ap.add_argument("--n", type=int, default=96, help="images for the throughput figures")
    ap.add_argument(
        "--agree",
        type=int,
        default=32,
        help="images (and their pairs) for the agreement figures; a multiple of the batch sizes",
    )
    ap.add_argument(
        "--categories", default="car,bus,ambulance,tractor", help="demo categories to use ('' = all 16)"
    )
    ap.add_argument(
        "--per-category", type=int, default=None, help="images per category (default: the demo's)"
    )
    ap.add_argument("--options", nargs="*", default=list(OPTIONS), choices=list(OPTIONS))
    ap.add_argument(
        "--data-root",
        default=None,
        help="where the embedded set is (generated if absent); default under $SOCO_STORAGE/embedded",
    )
    return ap


if __name__ == "__main__":
    run(parser().parse_args())
