"""The feature-extraction payload: one backbone's dense features of every image into the shared cache."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from soco_pipeline.payloads.registry import PayloadResult, table_checksum


def extract(inputs: dict[str, Any], log: Callable[[str], None]) -> PayloadResult:
    """Inputs: `spec_file`, `images` (image_set rows), `cache_root` and `backbone_context`; the manifest and
    metadata (rows, spec hash, kind, checksum, device time). Resumable: cached images are kept."""
    from soco_pipeline.backbones import spec_hash
    from soco_pipeline.backbones.validate import checked_spec
    from soco_pipeline.features import extract_features
    from soco_pipeline.runtime.gpu_time import gpu_timer

    spec = checked_spec(inputs["spec_file"])
    context = inputs["backbone_context"]
    device = context.get("device")
    with gpu_timer(spec.device if device in (None, "", "auto") else device) as gpu:
        manifest = extract_features(spec, inputs["images"], inputs["cache_root"], context=context, log=log)
    return PayloadResult(
        manifest,
        {
            "rows": len(manifest),
            "spec_hash": spec_hash(spec),
            "kind": spec.kind,
            "checksum": table_checksum(manifest, "image_id", "checksum"),
            **gpu.metadata(),
        },
    )
