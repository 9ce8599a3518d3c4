"""A model's stored per-model table, read for reuse by another model (defs/shared/reuse.py), relabelled."""

from __future__ import annotations

import pandas as pd

from soco_pipeline.storage import exists, read_parquet
from soco_pipeline.tables import table_for

MODEL_COLUMNS = ("backbone", "model")  # the column that names the model in a per-model table


def stored_exists(tables_root: str, asset: str, partition: str) -> bool:
    """Whether the table `asset` of `partition` is stored under `tables_root`."""
    return exists(table_for(asset).path(tables_root, partition))


def stored_table(tables_root: str, asset: str, partition: str | None = None) -> pd.DataFrame:
    """The stored table `asset` (of `partition` for a per-model table), read where the IO manager wrote it."""
    return read_parquet(table_for(asset).path(tables_root, partition))


def stored_as(tables_root: str, asset: str, source: str, target: str) -> pd.DataFrame:
    """The stored table `asset` of partition `source` (checksum verified), relabelled to model `target`."""
    out = stored_table(tables_root, asset, source)
    for col in MODEL_COLUMNS:
        if col in out.columns:
            out[col] = out[col].where(out[col] != source, target)
    return out
