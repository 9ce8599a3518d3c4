"""A storage root copied elsewhere reads its own files, never the original's (issue 38, observed row).

A copy of the shared core (tests/core.py) is root A; its data tables are materialized there again, A is
copied to B and deleted, and B is read: no table names A, the image hashes equal the core's, a `soco`
command copies B's images, and a backbone whose feature cache was dropped extracts again from B's images.
"""

from __future__ import annotations

import shutil

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from soco_pipeline.cli import soco as cli
from soco_pipeline.defs.definitions import build_definitions
from soco_pipeline.storage import read_parquet
from soco_pipeline.tables import table_for
from soco_pipeline.trust.hashes import image_digests
from tests.core import Core

pytestmark = [pytest.mark.pipeline, pytest.mark.timeout(900)]

BACKBONE = "oracle_part"
DATA_TABLES = ["source_images", "image_set", "rejected_images"]  # the tables that name image files


def _materialize(core: Core, instance: dg.DagsterInstance, selection, partition=None) -> None:
    defs = build_definitions(**core.overrides)
    result = dg.materialize(
        list(defs.assets),
        selection=selection,
        instance=instance,
        resources=defs.resources,
        partition_key=partition,
    )
    assert result.success


def _data_version(instance: dg.DagsterInstance, asset: str) -> str:
    event = instance.get_latest_materialization_event(dg.AssetKey(asset))
    return event.asset_materialization.tags["dagster/data_version"]


def _strings(table: pa.Table) -> list[str]:
    return [
        v
        for col in table.columns
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type)
        for v in col.to_pylist()
        if v
    ]


def test_a_copied_storage_root_reads_its_own_files(materialized_core, tmp_path, monkeypatch):
    a = materialized_core.copy_to(tmp_path / "a")
    with a.instance() as instance:
        _materialize(a, instance, dg.AssetSelection.assets(*DATA_TABLES))
        versions = {t: _data_version(instance, t) for t in DATA_TABLES}
    with materialized_core.instance() as instance:  # a table's data version does not depend on its root
        assert versions == {t: _data_version(instance, t) for t in DATA_TABLES}

    b = a.copy_to(tmp_path / "b")
    shutil.rmtree(a.root)
    for path in sorted(b.tables.rglob("*.parquet")):
        named = [
            v for v in _strings(pq.read_table(path)) if str(a.root) in v or str(materialized_core.root) in v
        ]
        assert not named, f"{path.relative_to(b.tables)} names another root: {named[:2]}"

    images = read_parquet(table_for("image_set").path(str(b.tables)))
    assert images.uri.str.startswith(f"{b.storage}/").all()
    core_images = read_parquet(table_for("image_set").path(str(materialized_core.tables)))
    assert image_digests(images).equals(image_digests(core_images))  # per-sample hashes: contents, not paths

    monkeypatch.setenv("SOCO_STORAGE", str(b.storage))  # a `soco` command on B copies B's images
    release = tmp_path / "release"
    assert cli.main(["export-release", str(release)]) == 0
    assert len(list((release / "Images").rglob("*.*"))) == len(images)

    # The backbone's cache dropped: extraction reads every image again, from B.
    shutil.rmtree(b.storage / "features")
    with b.instance() as instance:
        _materialize(b, instance, dg.AssetSelection.assets("feature_manifest"), BACKBONE)
    manifest = read_parquet(table_for("feature_manifest").path(str(b.tables), BACKBONE))
    core_manifest = read_parquet(table_for("feature_manifest").path(str(materialized_core.tables), BACKBONE))
    key = ["image_id", "checksum"]
    assert (
        manifest[key].sort_values(key).values.tolist() == core_manifest[key].sort_values(key).values.tolist()
    )
    assert len(manifest) == len(images)
