"""Parquet IO manager over fsspec paths, with atomic writes."""

import dagster as dg
import pandas as pd
import pyarrow as pa

from soco_pipeline.storage import join, read_parquet, write_parquet_atomic


class ParquetIOManager(dg.ConfigurableIOManager):
    """Stores each asset as `<base>/<asset>.parquet`, or `<base>/<asset>/<partition>.parquet`."""

    base_path: str

    def _path(self, context: dg.InputContext | dg.OutputContext) -> str:
        key = "/".join(context.asset_key.path)
        if context.has_asset_partitions:
            return join(self.base_path, key, f"{context.asset_partition_key}.parquet")
        return join(self.base_path, f"{key}.parquet")

    def handle_output(self, context: dg.OutputContext, obj: pd.DataFrame | pa.Table | None) -> None:
        if obj is None:
            return
        path = self._path(context)
        write_parquet_atomic(obj, path)
        context.add_output_metadata({"path": dg.MetadataValue.path(path), "rows": len(obj)})

    def load_input(self, context: dg.InputContext) -> pd.DataFrame:
        return read_parquet(self._path(context))
