"""A storage folder holding every table the results page renders, written from DataFrames (no pipeline run),
with `markup` put into every text column of every table (and into the model names) when asked."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image

from soco_pipeline.settings import Settings

MODELS = ["efficientnet_lite0", "efficientnet_lite0_320", "vit_small_random", "oracle_part", "dense_sift"]


def _boards(markup: str | None) -> dict[str, pd.DataFrame]:
    n = len(MODELS)
    rng = np.random.default_rng(0)
    names = [f"{m}{markup}" if markup else m for m in MODELS]
    soco = pd.DataFrame({"backbone": names})
    for c in (
        "cc",
        "soc",
        "soc_geo",
        "cross_soc",
        "cross_cc",
        "four_choice",
        "four_choice_circular",
        "knn_top1",
    ):
        soco[c] = rng.uniform(5, 95, n).round(3)
    for m in ("cc", "soc", "soc_geo", "cross_soc", "four_choice"):
        soco[f"ci95_lo_boot_category_{m}"] = soco[m] - 4.2
        soco[f"ci95_hi_boot_category_{m}"] = soco[m] + 3.9
    soco["partial"] = [False, True, False, False, False]
    soco["subset"] = ["", "limit=2/category", "", "", ""]
    soco["spec_present"] = True
    mmvm = pd.DataFrame(
        {
            "data_source": "simulated: procedural MMVM cases with seeded cues, not the published MMVMBench images",
            "model": names,
            "kind": "backbone",
            "method": "zero_shot_cosine",
            "status": ["ok"] * (n - 1) + ["not_applicable"],
            "reason": [""] * (n - 1) + ["dense SIFT has no global features"],
            "accuracy": [*rng.uniform(20, 80, n - 1).round(2), np.nan],
            "random_expected": 25.0,
            "n_items": 120,
        }
    )
    for k in range(24):
        mmvm[f"cue:matching_cue_number_{k}"] = rng.uniform(0, 100, n)
    fgbmk = pd.DataFrame(
        {
            "kind": "backbone",
            "model": names,
            "top1_subclass": rng.uniform(10, 90, n),
            "map_subclass": rng.uniform(10, 90, n),
            "top1_within": rng.uniform(10, 90, n),
            "top1_drop_across": rng.uniform(0, 20, n),
            "simulated": True,
        }
    )
    tpips = pd.DataFrame(
        {
            "model": names,
            "method": ["late_fusion"] * (n - 1) + ["n/a"],
            "conditioned": pd.array([True] * (n - 1) + [None], dtype="boolean"),  # NULL on the n/a row
            "ooo": [*rng.uniform(30, 50, n - 1), np.nan],
            "ooo_err": [*rng.uniform(0.5, 2, n - 1), np.nan],
            "consensus": 0.61,
            "judgements": "simulated",
            "note": [""] * (n - 1) + ["not applicable: a reason from the TPIPS config"],
        }
    )
    lvlm = pd.DataFrame(
        {
            "model": ["oracle_vlm", "random_vlm", "random"],
            "kind": ["evaluated", "evaluated", "random"],
            "vis_average": [100.0, 24.8, 25.0],
            "vis_circular": [100.0, 0.4, 0.39],
            "source": ["this pipeline", "this pipeline", "chance: 1/4 and (1/4)^4"],
        }
    )
    findings = pd.DataFrame(
        {
            "finding": [1, 2],
            "claim": [
                "within-superclass retrieval beats across",
                "CLIP-like models lead fine-grained probing",
            ],
            "paper": ["+12.3", "yes"],
            "measured": ["+8.1", "n/a (no CLIP here)"],
            "holds": ["yes", "cannot tell"],
            "why": ["", "no contrastive backbone among this run's models"],
            "models": [n, 0],
            "simulated": True,
        }
    )
    boards = {
        "leaderboard": soco,
        "mmvm_leaderboard": mmvm,
        "fgbmk_leaderboard": fgbmk,
        "tpips_leaderboard": tpips,
        "lvlm_leaderboard": lvlm,
        "fgbmk_findings": findings,
    }
    if markup:  # every text column of every table
        for df in boards.values():
            for c in df.columns:
                if df[c].dtype == object and c not in ("backbone", "model"):
                    df[c] = [f"{v}{markup}" for v in df[c]]
    return boards


def write_storage(root: Path, markup: str | None = None) -> tuple[Settings, dict[str, pd.DataFrame]]:
    """Write the tables, two results records, a correlation figure and two panels under `root`."""
    tables = root / "tables"
    tables.mkdir(parents=True)
    boards = _boards(markup)
    for name, df in boards.items():
        df.to_parquet(tables / f"{name}.parquet", index=False)
    records = root / "results" / "records"
    records.mkdir(parents=True)
    for b in MODELS[:2]:  # file names: the plain names
        rec = {
            "subset": {"partial": False, "description": "all pairs"},
            "results": {
                m: {"value": 50.0 + i, "ci95_boot_category": [45.0 + i, 55.0 + i]}
                for i, m in enumerate(["cc", "soc", "cross_soc"])
            },
        }
        (records / f"{b}.json").write_text(json.dumps(rec))
    (root / "figures").mkdir()
    Image.new("RGB", (900, 400), (200, 220, 240)).save(root / "figures" / "correlation_all.png")
    panels = root / "report" / "panels" / MODELS[0]
    panels.mkdir(parents=True)
    for k in ("wheel_front_left", "wheel_rear_right"):
        Image.new("RGB", (780, 330), (240, 240, 240)).save(panels / f"car_1-car_2__{k}.png")
    return Settings(storage_root=str(root), categories=["car", "dog"]), boards
