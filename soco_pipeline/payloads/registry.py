"""The payload registry and the one result type every payload returns."""

from __future__ import annotations

import hashlib
import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

# name -> "module:function"; a payload takes (inputs: dict, log) and returns a PayloadResult
PAYLOADS = {
    "features": "soco_pipeline.payloads.features:extract",
    "global_features": "soco_pipeline.payloads.global_features:extract",
}


@dataclass
class PayloadResult:
    """What a payload hands back: the output table and JSON-able metadata (it must name `checksum`)."""

    table: pd.DataFrame
    metadata: dict[str, Any] = field(default_factory=dict)


def table_checksum(df: pd.DataFrame, key: str, value: str) -> str:
    """sha256 over the (`key`, `value`) pairs of a table, sorted by key: the same content gives the same
    checksum whatever process or machine computed it (a feature manifest: image_id and the file checksum)."""
    pairs = sorted(zip(df[key].astype(str), df[value].astype(str), strict=True))
    return hashlib.sha256("\n".join(f"{k}\t{v}" for k, v in pairs).encode()).hexdigest()


def run_payload(name: str, inputs: dict[str, Any], log: Callable[[str], None]) -> PayloadResult:
    """Run the payload `name` (a key of PAYLOADS) on `inputs`; ValueError naming the known ones otherwise."""
    if name not in PAYLOADS:
        raise ValueError(f"unknown payload {name!r}; known: {sorted(PAYLOADS)}")
    module, func = PAYLOADS[name].split(":")
    fn = getattr(importlib.import_module(module), func)
    return fn(inputs, log)
