"""Parquet tables through Dagster's UPathIOManager (any fsspec URL), placed by the table registry."""

from __future__ import annotations

import dagster as dg
import pandas as pd
import pyarrow as pa
from upath import UPath

from soco_pipeline.storage import read_parquet, write_parquet_atomic
from soco_pipeline.tables import table_for


class ParquetUPathIOManager(dg.UPathIOManager):
    """`<base>/<asset>.parquet`, or `<base>/<asset>/<partition>.parquet`; written atomically (temp, rename).

    Assets that return None (they wrote their table themselves, e.g. the streamed correspondences) write
    nothing here.
    """

    extension: str = ".parquet"

    def get_asset_relative_path(self, context: dg.InputContext | dg.OutputContext) -> UPath:
        asset = context.asset_key.path[-1]
        return UPath(table_for(asset).asset)

    def dump_to_path(self, context: dg.OutputContext, obj: pd.DataFrame | pa.Table | None, path: UPath) -> None:
        if obj is None:
            return
        write_parquet_atomic(obj, str(path))
        context.add_output_metadata({"rows": len(obj)})  # UPathIOManager records the path

    def load_from_path(self, context: dg.InputContext, path: UPath) -> pd.DataFrame:
        return read_parquet(str(path))


class ParquetIOManager(dg.ConfigurableIOManagerFactory):
    """The tables' IO manager resource: `base_path` is the tables root (a local path or any fsspec URL)."""

    base_path: str

    def create_io_manager(self, context: dg.InitResourceContext) -> ParquetUPathIOManager:
        return ParquetUPathIOManager(base_path=UPath(self.base_path))
