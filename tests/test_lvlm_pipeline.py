"""LVLM evaluation through Dagster: the spec sensor (empty folder, new spec), eager automation of the new
partition only, items -> answers -> metrics -> leaderboard against a loopback server, DuckDB views, and
no key in any file the run leaves (tables, cache, Dagster's event log)."""

import dagster as dg
import pytest

from soco_pipeline.defs.definitions import build_definitions
from soco_pipeline.defs.shared.automation import InvalidSpecError
from soco_pipeline.lvlm.server import serve
from soco_pipeline.report.results_db import query
from soco_pipeline.storage import read_parquet, write_parquet_atomic
from tests.automation_ticks import evaluate
from tests.lvlm_helpers import OracleAnswerer, answer_key, small_tables

# a whole pipeline runs in a module fixture (the first test's setup)
pytestmark = [pytest.mark.pipeline, pytest.mark.timeout(900)]

SECRET = "sk-pipeline-" + "c0ffee" * 6
UPSTREAM = ["image_set", "keypoints", "image_pairs", "correspondences", "four_choice", "descriptions"]


@pytest.fixture()
def setup(tmp_path, monkeypatch):
    monkeypatch.setenv("SOCO_PIPELINE_TEST_KEY", SECRET)
    storage = tmp_path / "storage"
    tables = small_tables(tmp_path / "data")
    for name in UPSTREAM:
        write_parquet_atomic(tables[name], str(storage / "tables" / f"{name}.parquet"))
    lvlms = tmp_path / "lvlms"
    lvlms.mkdir()
    overrides = dict(storage_root=str(storage), lvlms_dir=str(lvlms))
    (tmp_path / "dagster_home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster_home")) as instance:
        yield {
            "tmp": tmp_path,
            "instance": instance,
            "overrides": overrides,
            "lvlms": lvlms,
            "storage": storage,
        }


def _materialize(defs, instance, *keys, partition=None):
    result = dg.materialize(
        list(defs.assets),
        selection=dg.AssetSelection.assets(*keys),
        instance=instance,
        resources=defs.resources,
        partition_key=partition,
    )
    assert result.success
    return result


def test_spec_folder_to_leaderboard(setup):
    instance, lvlms = setup["instance"], setup["lvlms"]
    defs = build_definitions(**setup["overrides"])
    resources = {"soco": defs.resources["soco"]}
    sensor = defs.resolve_sensor_def("lvlm_specs_sensor")

    # An empty spec folder: nothing to add, nothing to run.
    empty = sensor(dg.build_sensor_context(instance=instance, definitions=defs, resources=resources))
    assert not empty.dynamic_partitions_requests and not empty.run_requests

    _materialize(defs, instance, "lvlm_items")
    items = read_parquet(str(setup["storage"] / "tables" / "lvlm_items.parquet"))  # paths resolved
    assert set(items.setting) == {"vis", "vis_desc", "desc"}
    tick = evaluate(defs=defs, instance=instance)

    with serve(OracleAnswerer(answer_key(items))) as srv:
        (lvlms / "oracle_vlm.yaml").write_text(
            f"backend: openai\nmodel: oracle\nbase_url: {srv.base_url}\napi_key_env: SOCO_PIPELINE_TEST_KEY\n"
            f"max_concurrency: 4\nretries: 1\nbackoff_base: 0.01\n"
        )
        (lvlms / "broken.yaml").write_text("backend: openai\nmodel: x\n")  # no base_url: reported, not added
        result = sensor(dg.build_sensor_context(instance=instance, definitions=defs, resources=resources))
        assert [r.partition_keys for r in result.dynamic_partitions_requests] == [["oracle_vlm"]]
        instance.add_dynamic_partitions("lvlms", ["oracle_vlm"])
        # nothing valid left to do: the tick fails with the bad file's reason (the UI's sensor page shows it)
        with pytest.raises(InvalidSpecError, match="broken.yaml: "):
            sensor(
                dg.build_sensor_context(
                    instance=instance, definitions=defs, cursor=result.cursor, resources=resources
                )
            )
        (lvlms / "broken.yaml").unlink()
        again = sensor(
            dg.build_sensor_context(
                instance=instance, definitions=defs, cursor=result.cursor, resources=resources
            )
        )
        assert not again.dynamic_partitions_requests and not again.run_requests

        evaluation = evaluate(defs=defs, instance=instance, cursor=tick.cursor)
        assert evaluation.get_requested_partitions(dg.AssetKey("lvlm_answers")) == {"oracle_vlm"}
        assert evaluation.get_num_requested(dg.AssetKey("lvlm_items")) == 0

        _materialize(defs, instance, "lvlm_answers", "lvlm_metrics", partition="oracle_vlm")
        sent = srv.requests
        assert sent == len(items)
        # A comment changes the file, not the spec's data version (lvlm/specs.spec_version): nothing runs.
        spec = lvlms / "oracle_vlm.yaml"
        spec.write_text(spec.read_text() + "# touched\n")
        commented = sensor(
            dg.build_sensor_context(
                instance=instance, definitions=defs, cursor=again.cursor, resources=resources
            )
        )
        assert not commented.run_requests
        # A changed spec re-runs that model; every answer comes from the cache.
        spec.write_text(spec.read_text() + "description: touched\n")
        changed = sensor(
            dg.build_sensor_context(
                instance=instance, definitions=defs, cursor=commented.cursor, resources=resources
            )
        )
        assert [r.partition_key for r in changed.run_requests] == ["oracle_vlm"]
        _materialize(defs, instance, "lvlm_answers", "lvlm_metrics", partition="oracle_vlm")
        assert srv.requests == sent
    _materialize(defs, instance, "lvlm_leaderboard", "results_database")
    for asset in ("lvlm_items", "lvlm_answers"):
        key = dg.AssetCheckKey(dg.AssetKey(asset), "schema")
        record = instance.event_log_storage.get_latest_asset_check_execution_by_key([key])[key]
        assert record.event.dagster_event.event_specific_data.passed, asset

    db = defs.resources["soco"].settings().duckdb_path
    board = query(db, "select * from lvlm_leaderboard").set_index("model")
    assert board.loc["oracle_vlm", "vis_circular"] == 100 and board.loc["oracle_vlm", "desc_average"] == 100
    assert board.loc["oracle_vlm", "spec_present"]
    assert board.loc["random", "vis_circular"] == pytest.approx(0.390625)
    assert board.loc["GPT-4o", "vis_desc_circular"] == 30.9
    n = query(
        db,
        "select count(*) as n from lvlm_answers a join lvlm_items i using (setting, index) "
        "where a.parsed = i.answer",
    )
    assert int(n.n[0]) == len(items)
    per_cat = query(db, "select count(*) as n from lvlm_metrics where scope = 'category'")
    assert int(per_cat.n[0]) == 3 * 2 * 3  # categories x metrics x settings

    for path in setup["tmp"].rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
