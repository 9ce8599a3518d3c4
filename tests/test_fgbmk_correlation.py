"""FG-BMK scores in the correlation study: the `correlation` asset reads fgbmk_leaderboard beside the SOCO
leaderboard and correlates each backbone's fine-grained scores with its SOCO scores (task `fgbmk`)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import numpy as np
import pandas as pd
import pytest

from soco_pipeline.analysis.correlation import correlation_table, load_analysis_config, task_markdown
from soco_pipeline.analysis.reference import combine_scores, leaderboard_scores
from soco_pipeline.defs.definitions import build_definitions
from soco_pipeline.storage import write_parquet_atomic
from soco_pipeline.tables import table_for
from soco_pipeline.tasks.fgbmk.leaderboard import correlation_scores

pytestmark = pytest.mark.pipeline

BACKBONES = [f"b{i}" for i in range(6)]
SOC = np.array([10.0, 25.0, 30.0, 52.0, 61.0, 80.0])


def _boards() -> tuple[pd.DataFrame, pd.DataFrame]:
    soco = pd.DataFrame({"backbone": BACKBONES, "soc": SOC, "cc": SOC[::-1].copy(), "knn_top1": SOC / 2})
    fine = pd.DataFrame(
        {
            "kind": "backbone",
            "model": BACKBONES,
            "top1_subclass": 2.0 * SOC + 5.0,
            "top1_drop_across": SOC[::-1] / 10,
            "simulated": True,
        }
    )
    lvlm = pd.DataFrame([{"kind": "lvlm", "model": "some_lvlm", "choice_subclass": 40.0, "simulated": True}])
    return soco, pd.concat([fine, lvlm], ignore_index=True)


def test_fgbmk_rows_correlate_with_the_pipeline_soco_columns():
    soco, fine = _boards()
    scores = combine_scores(leaderboard_scores(soco, ["soc", "cc", "knn_top1"]), correlation_scores(fine))
    assert "some_lvlm" not in set(scores.model)  # backbones only: LVLMs have no SOCO feature scores
    table = correlation_table(scores, load_analysis_config(n_resamples=200))
    r = (
        table[(table.task == "fgbmk") & (table.statistic == "pearson") & (table.subset == "all")]
        .set_index(["benchmark", "metric"])
        .estimate
    )
    assert np.isclose(r["pipeline_soc", "top1_subclass"], 1.0)
    assert np.isclose(r["pipeline_cc", "top1_subclass"], np.corrcoef(SOC[::-1], 2 * SOC)[0, 1])
    # a lower-is-better metric (the within -> across drop) is sign-flipped, as the table says
    flipped = table[(table.task == "fgbmk") & (table.metric == "top1_drop_across")]
    assert flipped.sign_flipped.all() and (flipped.metric_shown == "-(top1_drop_across)").all()
    md = task_markdown(table, "fgbmk")
    assert "| top1_subclass | pipeline_soc | 1.00" in md and "| 6 |" in md
    assert "no pearson rows" in task_markdown(table, "no_such_task")


def test_correlation_asset_reads_the_fgbmk_leaderboard(tmp_path):
    soco, fine = _boards()
    storage = tmp_path / "storage"
    tables = str(storage / "tables")
    write_parquet_atomic(soco, table_for("leaderboard").path(tables))
    write_parquet_atomic(fine, table_for("fgbmk_leaderboard").path(tables))
    (tmp_path / "home").mkdir()
    defs = build_definitions(storage_root=str(storage), backbones_dir=str(tmp_path / "none"))
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
        result = dg.materialize(
            list(defs.assets),
            selection=dg.AssetSelection.assets("correlation"),
            instance=instance,
            resources=defs.resources,
            run_config={"ops": {"correlation": {"config": {"n_resamples": 200}}}},
        )
        assert result.success
        meta = (
            instance.fetch_materializations(dg.AssetKey("correlation"), limit=1)
            .records[0]
            .asset_materialization.metadata
        )
        table = pd.read_parquet(table_for("correlation").path(tables))
        fg = table[(table.task == "fgbmk") & (table.statistic == "pearson") & (table.subset == "all")]
        assert set(fg.benchmark) >= {"pipeline_soc", "pipeline_cc", "pipeline_knn"} and (fg.n == 6).all()
        assert np.isclose(
            fg.set_index(["benchmark", "metric"]).estimate["pipeline_soc", "top1_subclass"], 1.0
        )
        assert "| top1_subclass | pipeline_soc | 1.00" in meta["table_fgbmk"].value
        # before the family has run (no fgbmk_leaderboard yet) the study runs without it
        Path(table_for("fgbmk_leaderboard").path(tables)).unlink()
        assert dg.materialize(
            list(defs.assets),
            selection=dg.AssetSelection.assets("correlation"),
            instance=instance,
            resources=defs.resources,
            run_config={"ops": {"correlation": {"config": {"n_resamples": 200}}}},
        ).success
    table = pd.read_parquet(table_for("correlation").path(tables))
    assert len(table) and not (table.task == "fgbmk").any()


def test_the_correlation_asset_reuses_its_stored_rows_and_figures(tmp_path):
    """Materialized again, the study resamples no row and redraws no figure; with a seventh backbone only the
    rows that backbone enters are resampled, and the table equals one made on a fresh storage."""
    soco, fine = _boards()
    run_config = {"ops": {"correlation": {"config": {"n_resamples": 200}}}}

    def materialize(storage: Path, home: Path) -> tuple[pd.DataFrame, dict]:
        defs = build_definitions(storage_root=str(storage), backbones_dir=str(tmp_path / "none"))
        with dg.instance_for_test(temp_dir=str(home)) as instance:
            assert dg.materialize(
                list(defs.assets),
                selection=dg.AssetSelection.assets("correlation"),
                instance=instance,
                resources=defs.resources,
                run_config=run_config,
            ).success
            record = instance.fetch_materializations(dg.AssetKey("correlation"), limit=1).records[0]
            meta = {k: getattr(v, "value", v) for k, v in record.asset_materialization.metadata.items()}
        return pd.read_parquet(table_for("correlation").path(str(storage / "tables"))), meta

    def boards(storage: Path, soco: pd.DataFrame, fine: pd.DataFrame) -> None:
        write_parquet_atomic(soco, table_for("leaderboard").path(str(storage / "tables")))
        write_parquet_atomic(fine, table_for("fgbmk_leaderboard").path(str(storage / "tables")))

    storage, home = tmp_path / "storage", tmp_path / "home"
    home.mkdir()
    boards(storage, soco, fine)
    first, meta1 = materialize(storage, home)
    png = storage / "figures" / "correlation_all.png"
    stamps = {p: p.stat().st_mtime_ns for p in (png, png.with_suffix(".svg"))}
    assert meta1["rows_reused"] == 0 and meta1["png_sha256_all"]

    again, meta2 = materialize(storage, home)
    pd.testing.assert_frame_equal(again, first)
    assert meta2["rows_reused"] == len(first) and meta2["figure_all"] == meta1["figure_all"]
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps  # the figures were not drawn again

    seventh_soco = pd.concat(
        [soco, pd.DataFrame({"backbone": ["b6"], "soc": [45.0], "cc": [33.0], "knn_top1": [20.0]})],
        ignore_index=True,
    )
    seventh_fine = pd.concat(
        [fine, pd.DataFrame([{"kind": "backbone", "model": "b6", "top1_subclass": 60.0, "simulated": True}])],
        ignore_index=True,
    )
    boards(storage, seventh_soco, seventh_fine)
    grown, meta3 = materialize(storage, home)
    resampled = grown[~grown.inputs_sha.isin(first.inputs_sha)]  # b6 has one FG-BMK metric: its rows only
    assert set(resampled.metric) == {"top1_subclass"} and (resampled.n == 7).all()
    assert meta3["rows_reused"] == len(grown) - len(resampled) and meta3["figure_all"] == meta1["figure_all"]
    fresh_home = tmp_path / "fresh_home"
    fresh_home.mkdir()
    boards(tmp_path / "fresh", seventh_soco, seventh_fine)
    fresh, _ = materialize(tmp_path / "fresh", fresh_home)
    pd.testing.assert_frame_equal(grown, fresh)
    # a table stored by the code before `inputs_sha` (an upgraded storage): every row resampled, no error
    write_parquet_atomic(
        grown.drop(columns="inputs_sha"), table_for("correlation").path(str(storage / "tables"))
    )
    upgraded, meta4 = materialize(storage, home)
    assert meta4["rows_reused"] == 0
    pd.testing.assert_frame_equal(upgraded, grown)
