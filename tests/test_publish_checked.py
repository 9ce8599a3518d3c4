"""A failed blocking check publishes nothing: the previous table stays and the step says why.

The real image_pairs asset re-imports a SOCO release whose pairs name images the current image set lacks;
its blocking check fails, and image_pairs.parquet on disk is the previous run's, byte for byte.
"""

from pathlib import Path

import dagster as dg
import pytest

from soco_pipeline.data.soco_export import export_soco_release
from soco_pipeline.defs.definitions import build_definitions
from soco_pipeline.storage import join, read_parquet, write_parquet_atomic
from soco_pipeline.tables import table_for
from soco_pipeline.taxonomy import load_taxonomy
from tests.fixtures_data import canonical_tables

# each test materializes the data assets through Dagster
pytestmark = [pytest.mark.pipeline, pytest.mark.timeout(900)]

TAX = load_taxonomy()


@pytest.fixture
def release_and_tables(tmp_path):
    images, keypoints, pairs, corr = canonical_tables(str(tmp_path / "data"), TAX)
    release = join(str(tmp_path), "SOCOv1")
    export_soco_release(images, keypoints, pairs, corr, release, TAX)
    tables = str(tmp_path / "storage" / "tables")
    return images, keypoints, pairs, release, tables


def _materialize(tmp_path, release: str, instance) -> dg.ExecuteInProcessResult:
    defs = build_definitions(
        storage_root=str(tmp_path / "storage"), source="soco_release", soco_release_root=release
    )
    return dg.materialize(
        list(defs.assets),
        selection=["taxonomy", "image_pairs"],  # the run's taxonomy (from the release), then the pairs
        instance=instance,
        resources=defs.resources,
        raise_on_error=False,
    )


def test_a_failed_blocking_check_keeps_the_previous_table(tmp_path, release_and_tables):
    images, keypoints, pairs, release, tables = release_and_tables
    write_parquet_atomic(keypoints, table_for("keypoints").path(tables))
    previous = pairs[pairs.evaluated].head(3)
    pairs_path = Path(table_for("image_pairs").path(tables))
    write_parquet_atomic(previous, str(pairs_path))
    before = pairs_path.read_bytes()
    # The current image set lacks the images of one category: the release's pairs name missing images.
    dropped = images.category.iloc[0]
    write_parquet_atomic(images[images.category != dropped], table_for("image_set").path(tables))

    (tmp_path / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
        result = _materialize(tmp_path, release, instance)
        assert not result.success
        failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
        message = failure.step_failure_data.error.message + str(failure.step_failure_data.user_failure_data)
        assert "image_pairs was not published" in message and "check 'schema' failed" in message
        assert "2 problems" in message and "src_image missing from image_set" in message  # the check's reason
        assert f"{dropped}_0000" in message
        check = instance.event_log_storage.get_latest_asset_check_execution_by_key(
            [dg.AssetCheckKey(dg.AssetKey("image_pairs"), "schema")]
        )
        assert check[dg.AssetCheckKey(dg.AssetKey("image_pairs"), "schema")].status.value == "FAILED"
        records = instance.fetch_materializations(dg.AssetKey("image_pairs"), limit=5).records
        assert records == []
    assert pairs_path.read_bytes() == before  # not published
    assert sorted(p.name for p in pairs_path.parent.iterdir() if p.name.startswith(".tmp-")) == []


def test_a_passing_check_publishes(tmp_path, release_and_tables):
    images, keypoints, pairs, release, tables = release_and_tables
    write_parquet_atomic(keypoints, table_for("keypoints").path(tables))
    write_parquet_atomic(images, table_for("image_set").path(tables))
    (tmp_path / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
        result = _materialize(tmp_path, release, instance)
        assert result.success
    published = read_parquet(table_for("image_pairs").path(tables))
    assert len(published) == int(pairs.evaluated.sum())
