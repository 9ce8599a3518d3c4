"""The tpips Dagster group on tiny data: data assets, one backbone partition (and an oracle marked not
applicable), the leaderboard with its figure; the blocking schema checks pass."""

from __future__ import annotations

import shutil

import dagster as dg
import pandas as pd
import pytest
import yaml

from soco_pipeline.defs.definitions import build_definitions
from soco_pipeline.tasks.tpips.config import DEFAULT_PATH
from soco_pipeline.tasks.tpips.learned import KINDS
from soco_pipeline.trust import history
from tests.record_helpers import exported_family_record
from tests.watch_helpers import current_scores, figure, mean_outcome, plant_earlier_version, regression_check

pytestmark = pytest.mark.pipeline

DATA = [
    "tpips_images",
    "tpips_triplets",
    "tpips_afc_items",
    "tpips_ooo",
    "tpips_afc",
    "tpips_pixel_baselines",
]
PER_BACKBONE = [
    "tpips_features",
    "tpips_baseline_scores",
    "tpips_baseline_outcomes",
    "tpips_learned",
    "tpips_learned_outcomes",
    "tpips_history",
]

pytestmark = pytest.mark.pipeline


def test_tpips_group_end_to_end(tmp_path, monkeypatch):
    doc = yaml.safe_load(DEFAULT_PATH.read_text())
    doc["triplets"]["n"], doc["afc"]["n"], doc["learned"]["epochs"] = 8, 4, 5
    doc["retrieval"].update(queries=2, compositions=[["colour", "pose"]])
    doc["features"]["input_size"] = 64
    cfg_path = tmp_path / "tpips.yaml"
    cfg_path.write_text(yaml.safe_dump(doc))
    monkeypatch.setenv("SOCO_TPIPS_CONFIG", str(cfg_path))
    backbones = tmp_path / "backbones"
    backbones.mkdir()
    for name in ("dense_sift", "oracle_part"):
        shutil.copy(DEFAULT_PATH.parent / "backbones" / f"{name}.yaml", backbones / f"{name}.yaml")
    storage = tmp_path / "storage"
    defs = build_definitions(
        storage_root=str(storage), backbones_dir=str(backbones), lvlms_dir=str(tmp_path), device="cpu"
    )
    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
        instance.add_dynamic_partitions("backbones", ["dense_sift", "oracle_part"])

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

        result = run(DATA)
        checks = result.get_asset_check_evaluations()
        assert checks and all(c.passed for c in checks)
        for b in ("dense_sift", "oracle_part"):
            run(PER_BACKBONE, partition=b)
        board_run = run(["tpips_leaderboard"])
        printout = (
            board_run.asset_materializations_for_node("tpips_leaderboard")[0].metadata["leaderboard"].value
        )
        # issue 39: an earlier data version of dense_sift (better on two rows per method): the re-run history
        # compares the per-row agreements with it by the paired test
        earlier = plant_earlier_version(str(storage), "tpips", "dense_sift")
        rerun = run(["tpips_history"], partition="dense_sift")
    tables = storage / "tables"
    ooo = pd.read_parquet(tables / "tpips_ooo.parquet")
    assert (ooo.judgements == "simulated").all() and len(ooo) > 0
    learned = pd.read_parquet(tables / "tpips_learned" / "dense_sift.parquet")
    assert set(learned.method) == set(KINDS)
    oracle = pd.read_parquet(tables / "tpips_learned" / "oracle_part.parquet")
    assert oracle.method.tolist() == ["n/a"] and "SOCO part maps" in oracle.note.item()
    board = pd.read_parquet(tables / "tpips_leaderboard.parquet")
    assert {"lpips_style", "cosine", "mid", "late", "oracle", "random", "constant"} <= set(board.method)
    assert board[board.method == "oracle"].ooo.notna().all()
    # the rater agreement Σ y² is not a ceiling: the oracle reaches the ceiling mean max y, above it
    oracle_row = board[board.method == "oracle"].iloc[0]
    assert oracle_row.ooo == pytest.approx(oracle_row.ceiling) and oracle_row.ooo > oracle_row.rater_agreement
    # the simulated votes say so: on every row of the board and every table, once on top of the printout
    assert (board.judgements == "simulated").all()
    for name in ("tpips_ooo", "tpips_afc", "tpips_pixel_baselines"):
        assert (pd.read_parquet(tables / f"{name}.parquet").judgements == "simulated").all(), name
    assert printout.startswith("judgements: simulated") and printout.count("simulated") == 1
    afc = pd.read_parquet(tables / "tpips_afc.parquet")
    assert len(afc) and "overall" not in set(afc.aspect)
    assert any((storage / "tpips" / "retrieval" / "dense_sift").glob("*_colour.png"))
    assert len(list((storage / "tpips" / "retrieval" / "dense_sift").glob("*+*_colour+pose.png"))) == 1
    # issue 34: the family's results record, in SOCO's record schema
    rec = exported_family_record(storage, backbones, tmp_path, "tpips", "dense_sift")
    mid = learned[(learned.method == "mid") & (learned["eval"] == "ooo") & (learned.aspect == "all")]
    assert rec["results"]["ooo/mid"]["value"] == mid.agreement.item()
    # issue 39: each method's agreement per OOO test row; its mean is the method's headline on the board
    outcomes = pd.concat(
        [
            pd.read_parquet(tables / t / "dense_sift.parquet")
            for t in ("tpips_baseline_outcomes", "tpips_learned_outcomes")
        ]
    )
    test_rows = ooo[ooo.split == "test"]
    headline = board[board.model == "dense_sift"].set_index("method").ooo
    assert set(headline.index) == set(outcomes.method)
    for method, grp in outcomes.groupby("method"):
        assert len(grp) == len(test_rows) and set(grp.triplet_id) == set(test_rows.triplet_id.astype(str))
        assert mean_outcome(grp.agreement) == pytest.approx(headline[method], abs=1e-9)
    for t in ("tpips_baseline_outcomes", "tpips_learned_outcomes"):
        assert pd.read_parquet(tables / t / "oracle_part.parquet").empty  # not applicable: no rows
    # the regression watch: the paired test's "after" figures are the board's headline values, "before" the
    # earlier snapshot's; both snapshots in the history, the current one with its interval
    metrics = sorted(f"ooo/{m}" for m in headline.index)
    _, current = current_scores(str(storage), "tpips", "dense_sift")
    old_scores = history.snapshot_scores(str(storage), "tpips", "dense_sift", "earlier")
    test = history.regression_test(current, old_scores, metrics, reduction="pooled", n_boot=200).set_index(
        "metric"
    )
    for method in headline.index:
        assert test.at[f"ooo/{method}", "value_a"] == pytest.approx(headline[method], abs=1e-9)
        assert test.at[f"ooo/{method}", "value_b"] == pytest.approx(earlier[f"ooo/{method}"], abs=1e-9)
        assert test.at[f"ooo/{method}", "n_units"] == len(test_rows)
    hist = pd.read_parquet(tables / "tpips_history" / "dense_sift.parquet")
    now = hist[hist.data_version != "earlier"].set_index("metric")
    assert now.at["ooo/mid", "value"] == pytest.approx(mid.agreement.item())
    assert set(now.index) == set(metrics) and (now.previous_data_version == "earlier").all()
    assert ((now.delta_ci_low <= now.delta) & (now.delta <= now.delta_ci_high) & (now.delta <= 0)).all()
    check = regression_check(rerun, "tpips_history")
    assert check.metadata["paired_test"].value.startswith("paired difference per sample")
    before, after, delta, lo, hi = figure(check.metadata["ooo/mid"].value)
    assert (before, after) == (round(earlier["ooo/mid"], 1), round(headline["mid"], 1))
    assert (delta, lo, hi) == tuple(
        round(now.at["ooo/mid", c], 1) for c in ("delta", "delta_ci_low", "delta_ci_high")
    )
    assert pd.read_parquet(tables / "tpips_history" / "oracle_part.parquet").empty  # not applicable
    assert rec["n-samples"]["ooo"]["requested"] == int((ooo.split == "test").sum())
