"""The table registry agrees with the asset graph, and an unregistered asset fails loudly."""

import pytest

from soco_pipeline.defs.definitions import defs
from soco_pipeline.tables import all_tables, table_for

pytestmark = pytest.mark.unit

pytestmark = pytest.mark.unit

NO_TABLE = {
    "embedded_dataset",
    "results_database",  # they return MaterializeResult, no Parquet table
    "results_record",
    "lvlm_results_record",
    "results_report",
}  # JSON records, the HTML page


def test_every_table_asset_is_registered_and_every_registered_table_is_an_asset():
    graph = defs.resolve_asset_graph()
    assets = {k.path[-1]: graph.get(k) for k in graph.get_all_asset_keys() if graph.get(k).is_materializable}
    for name in set(assets) - NO_TABLE:
        table = table_for(name)
        assert table.partitioned == (assets[name].partitions_def is not None), name
    tables = all_tables()  # the core ones and those the family declarations registered
    assert {t.asset for t in tables} <= set(assets)
    assert len({t.view for t in tables}) == len(tables)
    families = {t.asset for t in tables if t.asset.split("_")[0] in ("mmvm", "fgbmk", "tpips")}
    assert (
        len(families) == 36
    )  # MMVM 11, FG-BMK 11, TPIPS 14 (with <family>_history): none in tables.py by hand


def test_paths_follow_the_asset_and_partition():
    assert table_for("image_set").path("s3://b/tables") == "s3://b/tables/image_set.parquet"
    assert table_for("metrics").path("/x/tables", "sift") == "/x/tables/metrics/sift.parquet"


def test_an_unregistered_asset_names_the_registry():
    with pytest.raises(KeyError, match="soco_pipeline/tables.py"):
        table_for("renamed_metrics")
