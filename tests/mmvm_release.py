"""Small official-layout MMVM releases made from generated items, with foreign names: case folders named like
the release's (not ours), no extra JSON keys (what a real `match_bench/` holds), and VLMEvalKit's TSV."""

from __future__ import annotations

import base64
import io
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image

from soco_pipeline.tasks.mmvm.generator import generate
from soco_pipeline.tasks.mmvm.official import TSV_NAME, export_match_bench, export_vlmevalkit
from soco_pipeline.tasks.mmvm.prompt import QUESTION, build_items, build_options

OURS = ("label", "mmvm_item_id", "mmvm_case_id")


def generated(cfg, root: Path) -> dict[str, pd.DataFrame]:
    """Generated tables with items (frames under root)."""
    t = generate(cfg, str(root / "gen"))
    t["items"] = build_items(t["cases"], t["objects"], t["images"], cfg, str(root / "marked"))
    return t


def foreign_match_bench(t: dict[str, pd.DataFrame], out: Path) -> pd.DataFrame:
    """The test items as `match_bench/` + mllm_match_eval_full.tsv, folders renamed `vid<k>_clip`, our extra
    JSON keys removed, the TSV's index starting at 1000; returns the TSV table."""
    test = t["items"][t["items"]["split"] == "test"].reset_index(drop=True)
    tsv = export_match_bench(test, t["cases"], t["objects"], t["images"], str(out))
    for k in range(len(tsv)):
        old, new = out / "match_bench" / f"case_{k:05d}", out / "match_bench" / f"vid{k}_clip"
        shutil.move(old, new)
        for name in ("FRAME00.json", "FRAME01_CAND.json"):
            doc = json.loads((new / name).read_text())
            (new / name).write_text(
                json.dumps([{k2: v for k2, v in e.items() if k2 not in OURS} for e in doc])
            )
        paths = repr([f"match_bench/vid{k}_clip/FRAME00.jpg", f"match_bench/vid{k}_clip/FRAME01_CAND.jpg"])
        tsv.loc[k, ["image_path", "image_path_v3"]] = paths
    tsv["index"] = tsv["index"] + 1000
    tsv.to_csv(out / TSV_NAME, sep="\t", index=False)
    return tsv


def vlmevalkit_tsv(t: dict[str, pd.DataFrame], path: Path) -> pd.DataFrame:
    """The test items as VLMEvalKit's MMVMBench.tsv (index from 500)."""
    test = t["items"][t["items"]["split"] == "test"].reset_index(drop=True)
    table = export_vlmevalkit(test, str(path))
    table["index"] = table["index"] + 500
    table.to_csv(path, sep="\t", index=False)
    return table


def jpeg_b64(seed: int) -> str:
    """A small seeded noise JPEG, base64 (a frame that decodes)."""
    arr = np.random.default_rng(seed).integers(0, 255, (24, 32, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="JPEG")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def small_mmvmbench_tsv(path, n_rows: int = 4) -> pd.DataFrame:
    """A hand-made VLMEvalKit MMVMBench.tsv of `n_rows` (<= 4) rows with 4 candidates each (fast: no
    generation); returns the table written."""
    _, options, _ = build_options([3, 1, 2, 4])
    table = pd.DataFrame(
        {
            "index": np.arange(n_rows),
            "question": QUESTION + options,
            "answer": ["A", "B", "E", "C"][:n_rows],
            "match_type": "[1]",
            "image": [repr([jpeg_b64(2 * k), jpeg_b64(2 * k + 1)]) for k in range(n_rows)],
        }
    )
    table.to_csv(path, sep="\t", index=False)
    return table
