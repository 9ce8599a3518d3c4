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
    "fgbmk_probe": "soco_pipeline.payloads.fgbmk_probe:train",
    "tpips_heads": "soco_pipeline.payloads.tpips_heads:train",
}


@dataclass
class PayloadResult:
    """What a payload hands back: the output table, JSON-able metadata (it must name `checksum`) and, for a
    step of several tables, the others by name (`extra`)."""

    table: pd.DataFrame
    metadata: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, pd.DataFrame] = field(default_factory=dict)


def table_checksum(df: pd.DataFrame, key: str, value: str) -> str:
    """sha256 over the (`key`, `value`) pairs of a table sorted by key (process- and machine-independent)."""
    pairs = sorted(zip(df[key].astype(str), df[value].astype(str), strict=True))
    return hashlib.sha256("\n".join(f"{k}\t{v}" for k, v in pairs).encode()).hexdigest()


def frame_checksum(*frames: pd.DataFrame) -> str:
    """sha256 over each table's column names and row hashes (index left out): the same in any process."""
    h = hashlib.sha256()
    for df in frames:
        h.update("\t".join(map(str, df.columns)).encode())
        h.update(pd.util.hash_pandas_object(df, index=False).to_numpy().tobytes())
    return h.hexdigest()


def run_payload(name: str, inputs: dict[str, Any], log: Callable[[str], None]) -> PayloadResult:
    """Run the payload `name` (a key of PAYLOADS) on `inputs`; ValueError naming the known ones otherwise."""
    if name not in PAYLOADS:
        raise ValueError(f"unknown payload {name!r}; known: {sorted(PAYLOADS)}")
    module, func = PAYLOADS[name].split(":")
    fn = getattr(importlib.import_module(module), func)
    return fn(inputs, log)
