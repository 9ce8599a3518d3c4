"""Parquet tables through Dagster's UPathIOManager (any fsspec URL), placed by the table registry."""

from __future__ import annotations

import dagster as dg
import pandas as pd
import pyarrow as pa
from upath import UPath

from soco_pipeline.storage import exists, read_parquet, write_parquet_atomic
from soco_pipeline.tables import table_for

ALLOW_MISSING = {"allow_missing": True}
ALLOW_MISSING_PARTITIONS = {"allow_missing_partitions": True}


class ParquetUPathIOManager(dg.UPathIOManager):
    """`<base>/<asset>.parquet`, or `<base>/<asset>/<partition>.parquet`; written atomically (temp, rename)."""

    extension: str = ".parquet"

    def __init__(self, base_path: UPath, storage_root: str | None = None):
        super().__init__(base_path=base_path)
        self.storage_root = storage_root

    def get_asset_relative_path(self, context: dg.InputContext | dg.OutputContext) -> UPath:
        asset = context.asset_key.path[-1]
        return UPath(table_for(asset).asset)

    def dump_to_path(self, context: dg.OutputContext, obj: pd.DataFrame | pa.Table, path: UPath) -> None:
        write_parquet_atomic(obj, str(path), storage_root=self.storage_root)
        context.add_output_metadata({"rows": len(obj)})  # UPathIOManager records the path

    def load_from_path(self, context: dg.InputContext, path: UPath) -> pd.DataFrame | None:
        if (context.definition_metadata or {}).get("allow_missing") and not exists(str(path)):
            return None  # an optional input that was never materialized
        return read_parquet(str(path))

    def load_input(self, context: dg.InputContext):
        loaded = super().load_input(context)
        if context.has_asset_partitions and not context.has_partition_key:
            # A fan-in (unpartitioned asset reading a partitioned one): always {partition: table}, also for
            # one partition (UPathIOManager then returns the bare table) or none.
            if loaded is None:
                return {}
            if not isinstance(loaded, dict):
                return {context.asset_partition_keys[0]: loaded}
        return loaded


class ParquetIOManager(dg.ConfigurableIOManagerFactory):
    """The tables' IO manager: `base_path` is the tables root (any fsspec URL) under `storage_root`."""

    base_path: str
    storage_root: str | None = None

    def create_io_manager(self, context: dg.InitResourceContext) -> ParquetUPathIOManager:
        return ParquetUPathIOManager(base_path=UPath(self.base_path), storage_root=self.storage_root)
