"""One backbone's metrics in the official scorer's output shape (GenIntel/SOCO `scripts/evaluate_dinov2.py`),
to diff against its result files: semantic_pck = SOC / Cross-SOC, concept_pck = CC / cross CC, 0-100."""

from __future__ import annotations

import dataclasses
import math
from datetime import UTC, datetime

import pandas as pd

from soco_pipeline.evaluation.protocol import ProtocolConfig

# Official name -> our metric, per level.
LEVEL_METRICS = {
    "intra": {"semantic": "soc", "concept": "cc"},
    "cross": {"semantic": "cross_soc", "concept": "cross_cc"},
}


def _value(v: float | None) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def official_results(
    metrics: pd.DataFrame,
    image_pairs: pd.DataFrame,
    backbone: str,
    protocol: ProtocolConfig,
    alpha: float | None = None,
    settings: dict | None = None,
) -> dict:
    """The official scorer's document for `backbone` from its METRIC_COLUMNS rows."""
    alpha = protocol.headline_alpha if alpha is None else float(alpha)
    m = metrics[
        (metrics["backbone"] == backbone)
        & (metrics["reduction"] == "official")
        & ((metrics["alpha"] - alpha).abs() < 1e-9)
    ]
    if m.empty:
        raise ValueError(
            f"no official-reduction metrics of backbone {backbone!r} at alpha {alpha}; materialize its "
            f"metrics (alphas in assets/protocol.yaml) first"
        )
    ev = image_pairs[image_pairs["evaluated"].astype(bool)]
    out: dict[str, dict] = {}
    for level, names in LEVEL_METRICS.items():
        pairs = ev[ev["level"] == level].groupby("pair_group").size()
        cat = {
            kind: m[(m["scope"] == "category") & (m["metric"] == metric)].set_index("group")
            for kind, metric in names.items()
        }
        top = {kind: m[(m["scope"] == "all") & (m["metric"] == metric)] for kind, metric in names.items()}
        groups = sorted(set(pairs.index) | set(cat["semantic"].index) | set(cat["concept"].index))
        per_category = {
            g: {
                "pairs": int(pairs.get(g, 0)),
                "semantic_pck": _value(cat["semantic"]["value"].get(g)),
                "concept_pck": _value(cat["concept"]["value"].get(g)),
                "semantic_keypoints": int(cat["semantic"]["n"].get(g, 0)),
                "concept_keypoints": int(cat["concept"]["n"].get(g, 0)),
            }
            for g in groups
        }
        out[level] = {
            "overall": {
                "pairs": int(pairs.sum()),
                "categories": int(len(set(cat["semantic"].index) | set(cat["concept"].index))),
                "semantic_pck": _value(top["semantic"]["value"].iloc[0]) if len(top["semantic"]) else None,
                "concept_pck": _value(top["concept"]["value"].iloc[0]) if len(top["concept"]) else None,
            },
            "per_category": per_category,
        }
    return {
        "dataset": "SOCOv1",
        "model": backbone,
        "created_at": datetime.now(UTC).isoformat(),
        "settings": {
            "pair_type": "both",
            "threshold": alpha,
            "normalization": "target_bbox_max_dimension",
            "reduction": "pair_then_category",
            "protocol": {
                k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(protocol).items()
            },
            **(settings or {}),
        },
        "metrics": out,
    }
