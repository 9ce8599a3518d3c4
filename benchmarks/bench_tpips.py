"""Benchmark the TPIPS family at demo scale (assets/tpips.yaml): triplet + 2AFC generation and rendering,
feature extraction through the shared cache per applicable backbone, learned-metric training with its
throughput in (triplet, aspect) rows per second, and the test OOO agreement of every metric (pixel baselines,
each backbone's frozen LPIPS-style and cosine, the learned ones). Prints figures; no targets are asserted here.
Usage: python benchmarks/bench_tpips.py [--backbones efficientnet_lite0 dense_sift]
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time

import pandas as pd

from soco_pipeline.backbones import list_specs
from soco_pipeline.tasks.tpips import baselines as b
from soco_pipeline.tasks.tpips.afc import annotate_afc, generate_afc
from soco_pipeline.tasks.tpips.aspect_text import AspectVocab
from soco_pipeline.tasks.tpips.config import load_config
from soco_pipeline.tasks.tpips.evaluate import evaluate_sim_outcomes
from soco_pipeline.tasks.tpips.features import extract_tpips, load_tpips_features, not_applicable
from soco_pipeline.tasks.tpips.images import load_pixels, write_images
from soco_pipeline.tasks.tpips.learned import KINDS, train_metric
from soco_pipeline.tasks.tpips.ooo import annotate_triplets
from soco_pipeline.tasks.tpips.triplets import generate_triplets


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> None:
    """Generate, extract, train; print timings."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--backbones", nargs="*", default=None, help="default: every spec in assets/backbones")
    args = ap.parse_args()
    cfg = load_config()
    with tempfile.TemporaryDirectory(prefix="soco-tpips-") as root:
        t0, c0 = time.perf_counter(), _cpu()
        ts = generate_triplets(cfg)
        ooo, summary = annotate_triplets(ts, cfg)
        values, items = generate_afc(cfg)
        afc, asummary = annotate_afc(values, items, cfg)
        images = write_images(pd.concat([ts.images, values], ignore_index=True), root, cfg)
        dt, cpu = time.perf_counter() - t0, _cpu() - c0
        print(
            f"generation: {len(ts.triplets)} triplets + {len(items)} 2AFC items -> {len(images)} renders "
            f"({cfg.image_size} px) in {dt:.1f} s (CPU {cpu:.1f} s, {1000 * dt / len(images):.0f} ms/render); "
            f"OOO kept {summary['kept']}/{summary['asked']}, 2AFC kept {asummary['kept']}/{asummary['asked']} "
            f"(simulated judgements)"
        )
        specs = list_specs()
        names = args.backbones or list(specs)
        ids = images.image_id.tolist()
        pos = b.ooo_positions(ooo, ids)
        pixels = load_pixels(images.uri.tolist())

        def test_ooo(name: str, method: str, sim) -> float:
            t = evaluate_sim_outcomes(name, method, False, sim, ooo, pos)[0]
            return float(t[(t["eval"] == "ooo") & (t.aspect == "all")].agreement.item())

        t0 = time.perf_counter()
        pix = {
            m: test_ooo("pixels", m, s)
            for m, s in (
                ("random", b.random_sim(cfg.seed)),
                ("l2", b.l2_sim(pixels)),
                ("ssim", b.ssim_sim(pixels)),
            )
        }
        print(
            f"pixel baselines ({time.perf_counter() - t0:.1f} s), test OOO: "
            + ", ".join(f"{k} {v:.1f}" for k, v in pix.items())
            + f"; {int((ooo.split == 'test').sum())} test rows, {int((ooo.split == 'train').sum())} train rows"
        )
        vocab = AspectVocab(cfg.aspects)
        total = 0.0
        for name in names:
            spec = specs[name]
            reason = not_applicable(spec, cfg)
            if reason:
                print(f"{name}: not applicable ({reason})")
                continue
            t0 = time.perf_counter()
            extract_tpips(spec, images, f"{root}/cache", cfg, device="cpu")
            ext = time.perf_counter() - t0
            feats = load_tpips_features(spec, ids, f"{root}/cache", cfg, device="cpu")
            total += ext
            line = [
                f"{name}: extract {len(images)} images x {len(feats.layers)} layer(s) {ext:.1f} s",
                f"lpips_style test OOO {test_ooo(name, 'lpips_style', b.lpips_style_sim(feats)):.1f}",
                f"cosine {test_ooo(name, 'cosine', b.cosine_sim(feats)):.1f}",
            ]
            for kind in KINDS:
                t0 = time.perf_counter()
                m = train_metric(kind, feats, ooo, pos, vocab, cfg.learned)
                total += time.perf_counter() - t0
                agree = test_ooo(name, kind, m.sim)
                line.append(
                    f"{kind} {m.seconds:.2f} s / {m.epochs} epochs = {m.triplets_per_second:.0f} triplets/s "
                    f"(test OOO {agree:.1f})"
                )
            print("; ".join(line))
        print(f"extraction + training over the backbones: {total:.1f} s")


if __name__ == "__main__":
    main()
