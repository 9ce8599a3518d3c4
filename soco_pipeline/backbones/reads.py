"""What a computation reads of a backbone spec, and its version: the per-model tables' cache key."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from soco_pipeline.backbones.spec import BackboneSpec, weights_fingerprint

# the libraries whose version can move a figure: an upgrade computes again instead of reusing
COMPUTE_LIBRARIES = (
    "torch",
    "timm",
    "numpy",
    "scipy",
    "pandas",
    "pyarrow",
    "opencv-python-headless",
    "Pillow",
    "scikit-image",
    "transformers",
)
# fields of BackboneSpec.to_dict() that change no computation (spec_hash leaves them out as well)
NOT_COMPUTATION = ("name", "device", "batch_size")


def computation(spec: BackboneSpec) -> dict[str, Any]:
    """Every field of `spec` a computation may read, with the weights' content hash."""
    d = {k: v for k, v in spec.to_dict().items() if k not in NOT_COMPUTATION}
    d["text_encoder"] = spec.text_encoder
    d["weights_content"] = weights_fingerprint(spec.weights)
    return d


def without(fields: Mapping[str, Any], ignored: Iterable[str]) -> dict[str, Any]:
    """`fields` less the keys in `ignored` (the spec fields a family does not read)."""
    drop = set(ignored)
    return {k: v for k, v in fields.items() if k not in drop}


def reads_version(fields: Mapping[str, Any], **inputs: Any) -> str:
    """The version of one computation: sha256 (16 hex digits) of the spec fields it reads and other inputs."""
    payload = json.dumps({"spec": dict(fields), **inputs}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def spec_computation_version(spec: BackboneSpec) -> str:
    """A spec's data version: reads_version of its whole computation (a comment re-runs nothing)."""
    return reads_version(computation(spec))
