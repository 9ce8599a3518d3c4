"""Benchmark the MMVM family at demo scale (assets/mmvm.yaml): item generation, then feature-backbone
scoring (extraction into a fresh feature cache, mask pooling, zero-shot and contrastive-head answers)
for every spec in assets/backbones/, each with wall and CPU seconds.

Target: the whole family adds about 35 s to `make demo` on 2 idle cores (the three new families together
under 3 minutes). On a shared machine the CPU seconds are the figure to compare: wall time there depends
on the load (printed first and last).
Usage: nice python benchmarks/bench_mmvm.py
"""

from __future__ import annotations

import os
import resource
import tempfile
import time

from soco_pipeline.backbones import load_spec
from soco_pipeline.storage import PROJECT_ROOT
from soco_pipeline.tasks.mmvm.backbone_eval import backbone_predictions, oracle_predictions
from soco_pipeline.tasks.mmvm.config import load_config
from soco_pipeline.tasks.mmvm.generator import generate
from soco_pipeline.tasks.mmvm.metrics import leaderboard, method_metrics
from soco_pipeline.tasks.mmvm.prompt import build_items


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


def _timed(label: str, fn, totals: list):
    t0, c0 = time.perf_counter(), _cpu()
    out = fn()
    wall, cpu = time.perf_counter() - t0, _cpu() - c0
    totals.append((wall, cpu))
    print(f"{label}: {wall:.1f} s wall, {cpu:.1f} s CPU", flush=True)
    return out


def main() -> None:
    """Generate, build items, score every backbone; print the times and the leaderboard."""
    cfg = load_config()
    totals: list = []
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(prefix="soco-mmvm-") as root:
        t = _timed(
            f"generation ({cfg.cases.train}+{cfg.cases.test} cases, {2 * (cfg.cases.train + cfg.cases.test)} "
            f"frames)",
            lambda: generate(cfg, f"{root}/gen"),
            totals,
        )
        t["items"] = _timed(
            "items (marks, options)",
            lambda: build_items(t["cases"], t["objects"], t["images"], cfg, f"{root}/marked"),
            totals,
        )
        print(f"  {len(t['items'])} items, {int((t['items'].split == 'test').sum())} scored")
        frames = [method_metrics(oracle_predictions(t), "oracle")]
        for path in sorted((PROJECT_ROOT / "assets" / "backbones").glob("*.yaml")):
            spec = load_spec(path)
            pred, _ = _timed(
                f"backbone {spec.name} (extract + score)",
                lambda s=spec: backbone_predictions(s, t, f"{root}/features", device="cpu"),
                totals,
            )
            frames.append(method_metrics(pred, "backbone"))
    import pandas as pd

    board = leaderboard(pd.concat(frames, ignore_index=True))
    wall = sum(w for w, _ in totals)
    cpu = sum(c for _, c in totals)
    print(
        f"total: {wall:.1f} s wall, {cpu:.1f} s CPU (wall on 2 idle cores: between {cpu / 2:.0f} and {cpu:.0f} s)"
    )
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    print(
        board[["model", "method", "status", "accuracy", "random_expected", "query:present_forced"]].to_string(
            index=False
        )
    )


if __name__ == "__main__":
    main()
