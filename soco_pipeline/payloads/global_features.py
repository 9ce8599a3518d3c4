"""The global-feature payload: one backbone's global features of every image into the shared cache."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import numpy as np

from soco_pipeline.payloads.registry import PayloadResult


def features_checksum(feats: Any) -> str:
    """sha256 over the image ids and the three feature arrays, rows sorted by id (process-independent)."""
    order = np.argsort(feats.image_ids.astype(str), kind="stable")
    h = hashlib.sha256("\n".join(feats.image_ids.astype(str)[order]).encode())
    for arr in (feats.cls_prev, feats.cls_last, feats.patch_mean):
        h.update(np.ascontiguousarray(arr[order]).tobytes())
    return h.hexdigest()


def extract(inputs: dict[str, Any], log: Callable[[str], None]) -> PayloadResult:
    """Inputs: `spec_file`, `images`, `cache_root`, `policy` (GlobalInputPolicy fields), `backbone_context`
    and `backbone`; the asset table and metadata. Resumable: cached images (same spec, policy) are kept."""
    from soco_pipeline.backbones.validate import checked_spec
    from soco_pipeline.features import GlobalInputPolicy, cached_global

    spec = checked_spec(inputs["spec_file"])
    policy = GlobalInputPolicy(**inputs["policy"])
    root = inputs["cache_root"]
    feats, folder = cached_global(spec, inputs["images"], root, policy, inputs["backbone_context"], log)
    table = feats.table(inputs["backbone"], folder, root)  # relative: a copied root reads its own
    return PayloadResult(
        table,
        {
            "rows": len(table),
            "folder": folder,
            "policy": str(policy.cache_key()),
            "checksum": features_checksum(feats),
        },
    )
