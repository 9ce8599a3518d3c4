"""The `mmvm` group on an official-layout source (MMVMEvalKit match_bench/, foreign names) through Dagster:
the items asset reads the release, a feature backbone scores it with the None rule carried from the
generated training split, an LVLM answers it, and the leaderboard says where the data came from."""

import shutil

import dagster as dg
import pandas as pd
import pytest
import yaml

from soco_pipeline.defs.definitions import build_definitions
from soco_pipeline.lvlm.server import serve
from soco_pipeline.storage import PROJECT_ROOT
from soco_pipeline.tables import table_for
from tests.mmvm_release import foreign_match_bench, generated
from tests.test_mmvm_core import tiny_config

pytestmark = [pytest.mark.pipeline, pytest.mark.timeout(900)]

DATA = ["mmvm_cases", "mmvm_images", "mmvm_objects", "mmvm_items"]


def test_match_bench_source_through_the_assets(tmp_path):
    cfg = tiny_config(cases={"train": 1, "test": 2})
    tsv = foreign_match_bench(generated(cfg, tmp_path / "made"), tmp_path / "release")
    doc = cfg.model_dump(mode="json") | {"source": {"kind": "match_bench", "path": str(tmp_path / "release")}}
    (tmp_path / "mmvm.yaml").write_text(yaml.safe_dump(doc))
    backbones, lvlms = tmp_path / "backbones", tmp_path / "lvlms"
    backbones.mkdir()
    lvlms.mkdir()
    shutil.copy(PROJECT_ROOT / "assets" / "backbones" / "dense_sift.yaml", backbones)
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
            instance.add_dynamic_partitions("backbones", ["dense_sift"])
            instance.add_dynamic_partitions("lvlms", ["always_a"])
            assert job.execute_in_process(
                instance=instance, asset_selection=[dg.AssetKey(k) for k in DATA]
            ).success
            sel = [dg.AssetKey(k) for k in ("mmvm_features", "mmvm_predictions", "mmvm_backbone_metrics")]
            assert job.execute_in_process(
                instance=instance, asset_selection=sel, partition_key="dense_sift"
            ).success
            sel = [dg.AssetKey("mmvm_answers"), dg.AssetKey("mmvm_lvlm_metrics")]
            assert job.execute_in_process(
                instance=instance, asset_selection=sel, partition_key="always_a"
            ).success
            assert job.execute_in_process(
                instance=instance, asset_selection=[dg.AssetKey("mmvm_leaderboard")]
            ).success
    tables = tmp_path / "storage" / "tables"
    items = pd.read_parquet(tables / "mmvm_items.parquet")
    test = items[items["split"] == "test"]
    assert test["case_id"].tolist() == [f"vid{k}_clip" for k in range(len(tsv))]
    assert test["answer"].tolist() == tsv["answer"].tolist()
    pred = pd.read_parquet(tables / table_for("mmvm_predictions").relative_path("dense_sift"))
    carried = pred[pred["split"] == "test"]
    assert (carried["none_mode"] == "carried").all() and carried["none_rule"].str.contains("generated").all()
    board = pd.read_parquet(tables / table_for("mmvm_leaderboard").relative_path())
    rows = {(r.model, r.method): r for r in board.itertuples()}
    assert board["data_source"].str.startswith("imported: ").all()
    assert rows[("dense_sift", "zero_shot")].none_mode == "carried"
    assert rows[("instance_oracle", "zero_shot")].accuracy == 100
    assert rows[("always_a", "answer")].accuracy == pytest.approx(100 * (tsv["answer"] == "A").mean())
    assert rows[("always_a", "answer")].n_items == len(tsv)
