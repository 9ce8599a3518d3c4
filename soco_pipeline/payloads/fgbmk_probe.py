"""The FG-BMK training payload: one backbone's linear probes and retrieval heads on its global features."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from soco_pipeline.payloads.registry import PayloadResult, frame_checksum

PREDICTIONS = "fgbmk_probe_predictions"  # the extra table's name (the step's second asset)
TIMINGS = ["probe_seconds", "retrieval_seconds"]  # wall-clock columns: left out of the checksum


def train(inputs: dict[str, Any], log: Callable[[str], None]) -> PayloadResult:
    """Inputs: `backbone`, `items` (fgbmk_items rows), `folder` (the global features' cache) and `config`
    (FgbmkConfig JSON); fgbmk_metrics' table, fgbmk_probe_predictions as the extra table, and the metadata."""
    from soco_pipeline.features import read_global
    from soco_pipeline.tasks.fgbmk.config import FgbmkConfig
    from soco_pipeline.tasks.fgbmk.machine_eval import evaluate_backbone, probe_predictions

    backbone, items = inputs["backbone"], inputs["items"]
    cfg = FgbmkConfig.model_validate_json(inputs["config"])
    feats = read_global(inputs["folder"], items.image_id)
    simulated = bool(items.simulated.all())
    log(f"[{backbone}] FG-BMK probes and retrieval heads on {len(items)} images")
    df, probes = evaluate_backbone(backbone, feats, items, cfg, simulated)
    predictions = probe_predictions(backbone, items, probes, simulated)
    across = df[df.scope == "across"].set_index("level")
    return PayloadResult(
        df,
        {
            "rows": len(df),
            **{f"top1/{lv}": round(float(v), 2) for lv, v in across.top1.items()},
            "checksum": frame_checksum(df.drop(columns=TIMINGS), predictions),
        },
        {PREDICTIONS: predictions},
    )
