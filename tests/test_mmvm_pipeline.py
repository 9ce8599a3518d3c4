"""The `mmvm` Dagster group materialized on tiny data: scenes, items, a feature backbone and a SOCO oracle
(not applicable), one LVLM behind a loopback server, metrics and the family's leaderboard."""

import shutil

import dagster as dg
import pandas as pd
import pytest
import yaml

from soco_pipeline.defs.definitions import build_definitions
from soco_pipeline.lvlm.server import serve
from soco_pipeline.report.results_db import query
from soco_pipeline.storage import PROJECT_ROOT
from soco_pipeline.tables import table_for
from tests.record_helpers import exported_family_record
from tests.test_mmvm_core import tiny_config

pytestmark = pytest.mark.pipeline

DATA = ["mmvm_cases", "mmvm_images", "mmvm_objects", "mmvm_items"]


def test_mmvm_group_materializes(tmp_path):
    cfg = tiny_config(cases={"train": 1, "test": 2})
    (tmp_path / "mmvm.yaml").write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    backbones, lvlms = tmp_path / "backbones", tmp_path / "lvlms"
    backbones.mkdir()
    lvlms.mkdir()
    for b in ("dense_sift", "oracle_part"):
        shutil.copy(PROJECT_ROOT / "assets" / "backbones" / f"{b}.yaml", backbones)
    with serve(lambda request, body: "A") as srv:
        (lvlms / "always_a.yaml").write_text(
            yaml.safe_dump(
                {"backend": "openai", "model": "m", "base_url": srv.base_url, "timeout": 5, "retries": 1}
            )
        )
        defs = build_definitions(
            storage_root=str(tmp_path / "storage"),
            backbones_dir=str(backbones),
            lvlms_dir=str(lvlms),
            mmvm_config_path=str(tmp_path / "mmvm.yaml"),
            device="cpu",
        )
        job = defs.resolve_implicit_global_asset_job_def()
        (tmp_path / "home").mkdir()
        with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
            instance.add_dynamic_partitions("backbones", ["dense_sift", "oracle_part"])
            instance.add_dynamic_partitions("lvlms", ["always_a"])
            keys = [dg.AssetKey(k) for k in DATA]
            assert job.execute_in_process(instance=instance, asset_selection=keys).success
            for b in ("dense_sift", "oracle_part"):
                sel = [dg.AssetKey(k) for k in ("mmvm_features", "mmvm_predictions", "mmvm_backbone_metrics")]
                assert job.execute_in_process(instance=instance, asset_selection=sel, partition_key=b).success
            sel = [dg.AssetKey("mmvm_answers"), dg.AssetKey("mmvm_lvlm_metrics")]
            assert job.execute_in_process(
                instance=instance, asset_selection=sel, partition_key="always_a"
            ).success
            assert job.execute_in_process(
                instance=instance, asset_selection=[dg.AssetKey("mmvm_leaderboard")]
            ).success
            # results_database (the one writer of results.duckdb) follows the family's leaderboard
            graph = defs.resolve_asset_graph()
            assert dg.AssetKey("mmvm_leaderboard") in graph.get(dg.AssetKey("results_database")).parent_keys
            assert job.execute_in_process(
                instance=instance, asset_selection=[dg.AssetKey("results_database")]
            ).success
            checks = instance.get_latest_materialization_event(dg.AssetKey("mmvm_items"))
            assert checks is not None
    tables = tmp_path / "storage" / "tables"
    board = pd.read_parquet(tables / table_for("mmvm_leaderboard").relative_path())
    rows = {(r.model, r.method): r for r in board.itertuples()}
    assert rows[("instance_oracle", "zero_shot")].accuracy == 100
    assert rows[("oracle_part", "zero_shot")].status == "not_applicable"
    assert {("dense_sift", "zero_shot"), ("dense_sift", "contrastive_head"), ("always_a", "answer")} <= set(
        rows
    )
    items = pd.read_parquet(tables / "mmvm_items.parquet")
    test = items[items.split == "test"]
    assert rows[("always_a", "answer")].accuracy == 100 * (test["answer"] == "A").mean()
    assert board["data_source"].str.startswith("simulated").all()
    in_sql = query(
        str(tmp_path / "storage" / "results.duckdb"), "SELECT model, method, accuracy FROM mmvm_leaderboard"
    )
    assert len(in_sql) == len(board) and set(in_sql.model) == set(board.model)
    views = set(query(str(tmp_path / "storage" / "results.duckdb"), "SHOW TABLES").name)
    assert {"mmvm_items", "mmvm_predictions", "mmvm_answers", "mmvm_backbone_metrics"} <= views
    assert (board["random_expected"].dropna() > 0).all()
    # issue 34: the family's results records (a backbone and an LVLM), in SOCO's record schema
    storage = tmp_path / "storage"
    rec = exported_family_record(storage, backbones, lvlms, "mmvm", "dense_sift")
    assert {"accuracy/zero_shot", "accuracy/contrastive_head"} <= set(rec["results"])
    assert rec["n-samples"]["items"]["requested"] == len(test) == len(rec["sample_hashes"]["items"])
    zs = rec["results"]["accuracy/zero_shot"]
    assert zs["value"] == rows[("dense_sift", "zero_shot")].accuracy
    lo, hi = zs["ci95_boot_category"]
    assert lo <= zs["value"] <= hi
    rec = exported_family_record(storage, backbones, lvlms, "mmvm", "always_a")
    assert rec["results"]["accuracy"]["value"] == rows[("always_a", "answer")].accuracy
