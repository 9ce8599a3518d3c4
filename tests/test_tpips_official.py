"""Real data in: a small set in TPIPS's official layout (foreign names, written by the test) scores through the
tpips asset group with `source: official`: every image and line read as written, the pruned lines counted and
named, the board printed with the source's judgements marker (issue #35). And the release as released (issue
#54): a file of our own in TPIPS's released odd-one-out format with an image root goes through the assets to
tpips_ooo, the metrics and the board, keeping exactly what the format defines, the skipped factors and the
dropped triplet counted and named; `soco export-family tpips` writes it back out (console script), and it
reads back the same, image ids included."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest
import yaml

from soco_pipeline.defs.definitions import build_definitions
from soco_pipeline.defs.tpips.assets import FAMILY
from soco_pipeline.report.page import simulated_parts
from soco_pipeline.tasks.tpips.config import DEFAULT_PATH, load_config
from soco_pipeline.tasks.tpips.source import official_images, official_ooo
from soco_pipeline.trust.headline import headline_rows
from tests.tpips_helpers import write_official_fixture, write_release_fixture

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


def _run_group(tmp_path, monkeypatch, source: dict) -> dict:
    """Materialize the tpips group on `source` (data, dense SIFT's features, baselines and heads, the board);
    the data assets' checks must pass. Returns the tables folder, the config file, the metadata of tpips_ooo,
    tpips_afc, tpips_learned and the board, and the board's printout."""
    doc = yaml.safe_load(DEFAULT_PATH.read_text())
    doc["source"] = source
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

        def meta(result, node):
            return result.asset_materializations_for_node(node)[0].metadata

        data = run(DATA)
        assert all(c.passed for c in data.get_asset_check_evaluations())
        scored = run(PER_BACKBONE, partition="dense_sift")
        board_run = run(["tpips_leaderboard"])
    board_meta = meta(board_run, "tpips_leaderboard")
    print(board_meta["leaderboard"].value)
    return {
        "storage": storage,
        "tables": storage / "tables",
        "config": cfg_path,
        "ooo": meta(data, "tpips_ooo"),
        "afc": meta(data, "tpips_afc"),
        "learned": meta(scored, "tpips_learned"),
        "board": board_meta,
        "printout": board_meta["leaderboard"].value,
    }


def test_an_official_layout_set_scores_through_the_assets(tmp_path, monkeypatch):
    expect = write_official_fixture(tmp_path / "release")
    # the votes stand in for a release's human ones; relative paths are read from the config file's folder
    done = _run_group(tmp_path, monkeypatch, {"kind": "official", "path": "release", "judgements": "human"})
    ooo_meta, afc_meta, printout, tables = done["ooo"], done["afc"], done["printout"], done["tables"]
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
    assert "(our layout): 23 of 24 (triplet, aspect) lines kept, 1 pruned" in printout
    # the constant chooser scores exactly the mean share of the first option on the test rows, 2AFC included
    test = ooo[ooo.split == "test"]
    constant = board[board.method == "constant"].iloc[0]
    assert constant.ooo == pytest.approx(100 * test.y_0.mean())
    assert constant["afc:all"] == pytest.approx(100 * afc.y_0.mean())


def test_the_released_format_goes_through_the_assets_to_the_board_and_back_out(tmp_path, monkeypatch):
    expect = write_release_fixture(tmp_path)
    source = {"kind": "official", "path": "release/ooo_test.jsonl", "image_root": "release/Bild-Wurzel"}
    done = _run_group(tmp_path, monkeypatch, source | {"judgements": "human"})
    tables, printout = done["tables"], done["printout"]
    images = pd.read_parquet(tables / "tpips_images.parquet")
    assert images.image_id.tolist() == expect["images"]  # nested folders, foreign names, as written
    ooo = pd.read_parquet(tables / "tpips_ooo.parquet")
    # the rows, their y and the counts the format defines (worked out by the fixture from the format)
    assert ooo.triplet_id.tolist() == [f"ooo_test.jsonl:{line}" for line, *_ in expect["rows"]]
    assert ooo.aspect.tolist() == [name for _, name, _, _ in expect["rows"]]
    assert ooo[["y_0", "y_1", "y_2"]].to_numpy().tolist() == [y for _, _, y, _ in expect["rows"]]
    assert (ooo.split == "test").all() and (ooo.judgements == "human").all()
    summary = done["ooo"]["summary"].value
    assert summary["skipped_factors"] == expect["skipped"] and summary["dropped_triplets"] == 1
    assert summary["dropped_lines"] == [f"{expect['file'].resolve()}:4"]
    assert summary["renormalised"] == 1 and len(summary["skipped"]) == expect["skipped"]
    assert pd.read_parquet(tables / "tpips_afc.parquet").empty  # a file holds no 2AFC set
    # the board: human judgements, the skipped and dropped named; the heads say why they were not trained
    assert printout.startswith("judgements: human\n") and "simulated" not in printout
    assert f"{expect['skipped']} factors skipped" in printout and "no usable factor (line 4)" in printout
    assert "1 triplets dropped" in printout and "design seed" not in printout
    assert "no OOO train rows" in done["learned"]["not_trained"].value
    board = pd.read_parquet(tables / "tpips_leaderboard.parquet")
    assert {"random", "constant", "l2", "ssim", "lpips_style", "cosine"} <= set(board.method)
    assert (board.judgements == "human").all()
    constant = board[board.method == "constant"].iloc[0]
    assert constant.ooo == pytest.approx(100 * ooo.y_0.mean()) and constant.rater_agreement == pytest.approx(
        100 * (ooo[["y_0", "y_1", "y_2"]] ** 2).sum(1).mean()
    )
    # the summary's and the page's simulated flag follows the data
    heads = headline_rows(FAMILY.headline, board, None)
    assert len(heads) and not heads.simulated.any()
    assert not [
        p for p in simulated_parts(type("S", (), {"source": "official"})(), {"tpips": board}) if "TPIPS" in p
    ]
    # the console script writes the set back out in the released format; read again, the same rows
    env = {**os.environ, "SOCO_STORAGE": str(done["storage"]), "DAGSTER_HOME": str(tmp_path / "home")}
    out = tmp_path / "exported"
    soco = Path(sys.executable).parent / "soco"
    cmd = [str(soco), "export-family", "tpips", str(out), "--format", "release"]
    done_cli = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done_cli.returncode == 0, done_cli.stderr
    assert f"wrote the tpips release format to {out}" in done_cli.stdout
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 2 and "pass --force" in again.stderr
    cfg = load_config(done["config"]).with_updates(
        source={"kind": "official", "path": str(out), "judgements": "human"}
    )
    back, back_summary = official_ooo(cfg)
    pd.testing.assert_frame_equal(back, ooo)
    assert back_summary["skipped_factors"] == back_summary["dropped_triplets"] == 0
    # the image ids (the release's paths) stay the same: the lines carry them as our extra field `image_ids`
    first = json.loads((out / "ooo.jsonl").read_text().splitlines()[0])
    assert [first["image_ids"][k] for k in ("p0", "p1", "p2")] == [first[f"p{k}_path"] for k in range(3)]
    cols = ["image_id", "width", "height", "category", "role"]
    pd.testing.assert_frame_equal(official_images(cfg)[cols], images[cols])
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*.*") if p.suffix != ".jsonl") == sorted(
        expect["images"]
    )
