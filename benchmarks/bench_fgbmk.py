"""FG-BMK speed at demo scale, step by step as the demo runs it per backbone: rendering the embedded set,
global-feature extraction, the probe + retrieval grid at every level (fgbmk_metrics), the robustness step
(fgbmk_robustness: two probes, FGSM / PGD / noise); and the estimated probe / projection wall time at the
full (published) setting, from the iterations per second measured at the full batch size (128) and the full
grid (24 heads), times the number of probes the full setting trains.

    nice HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_fgbmk.py [--backbones vit_small_random ...]
        [--scale demo|full] [--device cpu]

Prints one line per step with its wall time and the process's CPU time (user + system, all threads and worker processes): on a
busy machine the wall time is inflated by the other processes, the CPU time much less so (torch's intra-op
threads spin while they wait, so a loaded machine inflates it too; `--threads 1` avoids that). Also prints
`uptime`'s load. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable

import pandas as pd
import torch

from soco_pipeline.backbones import list_specs
from soco_pipeline.features.global_cache import extract_global
from soco_pipeline.features.global_extractors import build_global_extractor
from soco_pipeline.tasks.fgbmk.config import load_config
from soco_pipeline.tasks.fgbmk.embedded import ensure_embedded
from soco_pipeline.tasks.fgbmk.findings import check_findings, findings_markdown
from soco_pipeline.tasks.fgbmk.linear_probe import train_probe
from soco_pipeline.tasks.fgbmk.machine_eval import evaluate_backbone, level_labels, tasks_of
from soco_pipeline.tasks.fgbmk.retrieval import train_retrieval
from soco_pipeline.tasks.fgbmk.robustness import robustness_for_backbone


def load() -> str:
    """The 1-minute load average (what `uptime` prints first)."""
    return f"{os.getloadavg()[0]:.2f}"


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and its finished children (the renderer's worker pool)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def heads(train) -> int:
    """Heads in a TrainConfig's grid."""
    return len(train.learning_rates) * len(train.n_last_blocks) * len(train.avgpool)


class Clock:
    """Wall and CPU seconds of each step, summed into a total."""

    def __init__(self):
        self.wall = self.cpu = 0.0

    def __call__(self, fn: Callable, *args, **kwargs):
        """fn(*args, **kwargs), its wall and CPU seconds."""
        w, c = time.perf_counter(), cpu_seconds()
        out = fn(*args, **kwargs)
        dw, dc = time.perf_counter() - w, cpu_seconds() - c
        self.wall, self.cpu = self.wall + dw, self.cpu + dc
        return out, dw, dc


def fmt(wall: float, cpu: float) -> str:
    """'12.3 s (cpu 20.1 s)'."""
    return f"{wall:.1f} s (cpu {cpu:.1f} s)"


def main() -> None:
    """Run the benchmark."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--backbones", nargs="*", default=None, help="spec names in assets/backbones (default: all)"
    )
    ap.add_argument("--scale", default="demo", choices=["demo", "full"], help="the config scale to time")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--no-full-estimate", action="store_true", help="skip the full-setting iteration timing")
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg, full = load_config(scale=args.scale), load_config(scale="full")
    gf = cfg.global_features
    print(
        f"scale {cfg.scale}: {cfg.embedded.images_per_subclass}, subclasses_per_class "
        f"{cfg.embedded.subclasses_per_class}, input resize {gf.resize} crop {gf.crop}, probe "
        f"{cfg.linear_probe.max_iter} it x {heads(cfg.linear_probe)} heads, retrieval "
        f"{cfg.retrieval.max_iter} it x {heads(cfg.retrieval)} heads, robustness "
        f"eps {list(cfg.robustness.epsilons)} pgd {cfg.robustness.pgd_steps} steps on "
        f"{cfg.robustness.max_images or 'all'} images; dense-only input {gf.dense_input or 'own'}; torch threads "
        f"{torch.get_num_threads()} (extraction and attacks: {gf.threads or 'the same'}); load {load()}",
        flush=True,
    )
    clock = Clock()
    with tempfile.TemporaryDirectory() as tmp:
        items, w, c = clock(ensure_embedded, f"{tmp}/set", cfg.embedded, cfg.seed)
        print(
            f"embedded set: {len(items)} images ({items.subclass.nunique()} subclasses) rendered in {fmt(w, c)}",
            flush=True,
        )
        specs = list_specs()
        train, test = (items.split == "train").to_numpy(), (items.split == "test").to_numpy()
        labels = level_labels(items, "subclass")
        all_metrics, all_rob = [], []
        for name in args.backbones or list(specs):
            spec = specs[name]
            start = clock.wall, clock.cpu
            ex, wb, cb = clock(
                build_global_extractor, spec, gf, {"data_root": f"{tmp}/set", "device": args.device}
            )
            feats, we, ce = clock(extract_global, ex, items, f"{tmp}/cache", gf)
            (metrics, _), wm, cm = clock(evaluate_backbone, name, feats, items, cfg)
            rob, wr, cr = clock(
                robustness_for_backbone,
                name,
                ex,
                ex.cache_folder(f"{tmp}/cache", gf),
                items,
                cfg,
                reads_pixels=spec.kind != "oracle",
            )
            all_metrics.append(metrics)
            all_rob.append(rob)
            across = metrics[metrics.scope == "across"].set_index("level")
            sub = across.loc["subclass"]
            worst = rob[rob.attack != "clean"].groupby("level").accuracy.min().round(1).to_dict()
            clean = rob[rob.attack == "clean"].groupby("level").accuracy.first().round(1).to_dict()
            dims = [feats.cls_prev.shape[1], feats.cls_last.shape[1], feats.patch_mean.shape[1]]
            print(
                f"{name}: all {fmt(clock.wall - start[0], clock.cpu - start[1])} = build {fmt(wb, cb)} + global "
                f"features {fmt(we, ce)} ({len(items) / we:.1f} images/s, dims {dims}) + metrics ({len(metrics)} probe + "
                f"retrieval tasks) {fmt(wm, cm)} (training: probe {metrics.probe_seconds.sum():.1f} s, projection "
                f"{metrics.retrieval_seconds.sum():.1f} s) + robustness {fmt(wr, cr)}",
                flush=True,
            )
            print(
                f"  top-1 superclass/class/subclass {across.top1.get('superclass', float('nan')):.1f}/"
                f"{across.top1.get('class', float('nan')):.1f}/{sub.top1:.1f} (subclass chance "
                f"{sub.chance_top1:.1f}), subclass mAP {sub['map']:.1f} recall@1 {sub.recall_at_1:.1f}; "
                f"robustness clean {clean} worst {worst}; load {load()}",
                flush=True,
            )
            if args.no_full_estimate:
                continue
            # Full setting: batch 128, 24 heads; a few iterations at that batch, extrapolated to 10 x 1000 per
            # probe, times the probes the full setting trains (every metrics task + one per robustness level).
            f_tr, f_te = feats.subset(items.image_id[train]), feats.subset(items.image_id[test])
            p = train_probe(
                f_tr,
                labels[train],
                f_te,
                labels[test],
                full.linear_probe.model_copy(update={"epochs": 1, "epoch_length": 20}),
                cfg.seed,
            )
            r = train_retrieval(
                f_tr,
                labels[train],
                f_te,
                labels[test],
                full.retrieval.model_copy(update={"epochs": 1, "epoch_length": 20}),
                cfg.seed,
            )
            ips_p, ips_r = p.iterations / p.seconds, r.iterations / r.seconds
            n_tasks = len(tasks_of(items))  # the same levels and superclasses at full scale
            n_probes = n_tasks + len(full.robustness.levels)
            est = full.linear_probe.max_iter / ips_p * n_probes + full.retrieval.max_iter / ips_r * n_tasks
            print(
                f"  full setting ({full.linear_probe.max_iter} it per head grid): probe {ips_p:.1f} it/s -> "
                f"{full.linear_probe.max_iter / ips_p / 60:.1f} min per probe, projection {ips_r:.1f} it/s -> "
                f"{full.retrieval.max_iter / ips_r / 60:.1f} min per grid; {n_probes} probes + {n_tasks} "
                f"projection grids -> {est / 60:.0f} min for this backbone",
                flush=True,
            )
        print(
            "\nthe paper's findings on these backbones (SIMULATED data):\n"
            + findings_markdown(
                check_findings(
                    pd.concat(all_metrics, ignore_index=True),
                    pd.concat(all_rob, ignore_index=True),
                    cfg.findings,
                )
            )
        )
        print(
            f"{cfg.scale}-scale total (render + build + extract + metrics + robustness): "
            f"{fmt(clock.wall, clock.cpu)}; load {load()}"
        )


if __name__ == "__main__":
    main()
