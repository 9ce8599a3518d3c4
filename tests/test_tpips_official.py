"""Real data in: a small set in TPIPS's official layout (foreign names, written by the test) scores through the
tpips asset group with `source: official`: every image and line read as written, the pruned lines counted and
named, the board printed with the source's judgements marker (issue #35)."""

from __future__ import annotations

import shutil

import dagster as dg
import pandas as pd
import pytest
import yaml

from soco_pipeline.defs.definitions import build_definitions
from soco_pipeline.tasks.tpips.config import DEFAULT_PATH
from tests.tpips_helpers import write_official_fixture

pytestmark = pytest.mark.pipeline

DATA = [
    "tpips_images",
    "tpips_triplets",
    "tpips_afc_items",
    "tpips_ooo",
    "tpips_afc",
    "tpips_pixel_baselines",
]
PER_BACKBONE = ["tpips_features", "tpips_baseline_scores", "tpips_learned"]


def test_an_official_layout_set_scores_through_the_assets(tmp_path, monkeypatch):
    expect = write_official_fixture(tmp_path / "release")
    doc = yaml.safe_load(DEFAULT_PATH.read_text())
    # the votes stand in for a release's human ones; relative paths are read from the config file's folder
    doc["source"] = {"kind": "official", "path": "release", "judgements": "human"}
    doc["afc"]["sources"] = ["editing", "novel_view"]
    doc["learned"]["epochs"] = 3
    doc["retrieval"].update(queries=2, compositions=[["colour", "pose"]])
    cfg_path = tmp_path / "tpips.yaml"
    cfg_path.write_text(yaml.safe_dump(doc, allow_unicode=True))
    monkeypatch.setenv("SOCO_TPIPS_CONFIG", str(cfg_path))
    backbones = tmp_path / "backbones"
    backbones.mkdir()
    shutil.copy(DEFAULT_PATH.parent / "backbones" / "dense_sift.yaml", backbones / "dense_sift.yaml")
    storage = tmp_path / "storage"
    defs = build_definitions(
        storage_root=str(storage), backbones_dir=str(backbones), lvlms_dir=str(tmp_path), device="cpu"
    )
    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
        instance.add_dynamic_partitions("backbones", ["dense_sift"])

        def run(keys, partition=None):
            result = dg.materialize(
                list(defs.assets) + list(defs.asset_checks),
                selection=dg.AssetSelection.assets(*keys),
                instance=instance,
                resources=defs.resources,
                partition_key=partition,
            )
            assert result.success
            return result

        data = run(DATA)
        assert all(c.passed for c in data.get_asset_check_evaluations())
        ooo_meta = data.asset_materializations_for_node("tpips_ooo")[0].metadata
        afc_meta = data.asset_materializations_for_node("tpips_afc")[0].metadata
        run(PER_BACKBONE, partition="dense_sift")
        board_run = run(["tpips_leaderboard"])
        printout = (
            board_run.asset_materializations_for_node("tpips_leaderboard")[0].metadata["leaderboard"].value
        )
    print(printout)
    tables = storage / "tables"
    images = pd.read_parquet(tables / "tpips_images.parquet")
    assert sorted(images.image_id) == sorted(expect["images"])  # foreign names kept as written
    assert set(images.width) == {40, 48}
    ooo = pd.read_parquet(tables / "tpips_ooo.parquet")
    afc = pd.read_parquet(tables / "tpips_afc.parquet")
    assert len(ooo) == expect["ooo_kept"] and len(afc) == expect["afc_kept"]
    assert (ooo.judgements == "human").all() and ooo.triplet_id.str.endswith("-α").all()
    # nothing dropped silently: the pruned line and the tied line are counted and named
    assert ooo_meta["summary"].value["pruned_cannot_tell"] == 1
    assert ooo_meta["summary"].value["pruned_lines"] == [f"{tmp_path.resolve()}/release/ooo.jsonl:5"]
    assert afc_meta["summary"].value["pruned_ties"] == 1
    board = pd.read_parquet(tables / "tpips_leaderboard.parquet")
    assert {"random", "constant", "l2", "ssim", "lpips_style", "cosine", "late", "mid"} <= set(board.method)
    assert "oracle" not in set(board.method)  # it needs the generator's aspect values
    assert (board.judgements == "human").all()
    assert printout.startswith("judgements: human\n") and "simulated" not in printout
    # the constant chooser scores exactly the mean share of the first option on the test rows, 2AFC included
    test = ooo[ooo.split == "test"]
    constant = board[board.method == "constant"].iloc[0]
    assert constant.ooo == pytest.approx(100 * test.y_0.mean())
    assert constant["afc:all"] == pytest.approx(100 * afc.y_0.mean())
