"""Each family's headline (trust/headline.py) and the one-row-per-model summary: the long
`model_headlines` and wide `model_summary` tables from boards shaped like the real ones, their schemas, the
`model` alias of the SQL views, and a toy family that appears with nothing but its `Headline`. The headlines
are the real ones: SOCO's and those the families' `Family` declarations carry."""

from __future__ import annotations

import dagster as dg
import duckdb
import numpy as np
import pandas as pd
import pytest

from soco_pipeline.defs.definitions import group_folders
from soco_pipeline.defs.shared.checks import schema_problems
from soco_pipeline.defs.shared.family import declared_families
from soco_pipeline.defs.summary.assets import declared_headlines
from soco_pipeline.trust.headline import (
    Headline,
    model_headlines,
    model_summary,
    summary_columns,
    wilson_interval,
)
from soco_pipeline.trust.headline_schemas import ModelHeadlineSchema, ModelSummarySchema

pytestmark = pytest.mark.pipeline  # one test materializes the summary assets (a toy family)

WHEN = pd.Timestamp("2026-12-01 10:00", tz="UTC")
HEADLINES = declared_headlines(declared_families(group_folders()))


def boards() -> dict[str, pd.DataFrame]:
    """One small board per family, with the columns the real boards have."""
    return {
        "leaderboard": pd.DataFrame(
            {
                "backbone": ["dense_sift", "oracle_part"],
                "soc": [20.0, 99.0],
                "ci95_lo_boot_category_soc": [15.0, 97.5],
                "ci95_hi_boot_category_soc": [25.0, 100.0],
            }
        ),
        "lvlm_leaderboard": pd.DataFrame(
            {
                "model": ["tiny_vlm", "GPT-4o", "random"],
                "kind": ["evaluated", "reference", "random"],
                "vis_average": [40.0, 70.0, 25.0],
            }
        ),
        "mmvm_leaderboard": pd.DataFrame(
            {
                "data_source": "simulated (embedded renderer)",
                "model": ["oracle", "dense_sift", "dense_sift", "oracle_part", "tiny_vlm"],
                "kind": ["oracle", "backbone", "backbone", "backbone", "lvlm"],
                "method": ["oracle", "zero_shot", "contrastive_head", "zero_shot", "lvlm"],
                "status": ["ok", "ok", "ok", "not_applicable", "ok"],
                "accuracy": [100.0, 30.0, 45.0, np.nan, 50.0],
                "n_items": [100, 100, 100, 0, 100],
            }
        ),
        "fgbmk_leaderboard": pd.DataFrame(
            {
                "kind": ["backbone", "lvlm"],
                "model": ["dense_sift", "tiny_vlm"],
                "top1_subclass": [12.5, np.nan],
                "choice_subclass": [np.nan, 60.0],
                "simulated": [True, True],
            }
        ),
        "tpips_leaderboard": pd.DataFrame(
            {
                "model": ["dense_sift", "dense_sift", "oracle_part"],
                "method": ["cosine", "mid", "n/a"],
                "ooo": [40.0, 48.0, np.nan],
                "ooo_err": [2.0, 1.5, np.nan],
                "judgements": ["simulated"] * 3,
            }
        ),
    }


def test_each_family_headline_from_its_board():
    assert [h.family for h in HEADLINES] == ["soco", "soco_lvlm", "fgbmk", "mmvm", "tpips"]
    long = model_headlines(boards(), dict.fromkeys(boards(), WHEN), HEADLINES, embedded=True)
    assert schema_problems(long, ModelHeadlineSchema) == []
    got = long.set_index(["model", "family"])
    assert got.loc[("oracle_part", "soco"), ["value", "ci_low", "ci_high"]].tolist() == [99.0, 97.5, 100.0]
    assert got.loc[("tiny_vlm", "soco_lvlm"), "value"] == 40.0
    assert "GPT-4o" not in long.model.tolist() and "random" not in long.model.tolist()  # references, chance
    mmvm = got.loc[("dense_sift", "mmvm")]
    assert mmvm.value == 45.0 and mmvm.metric.endswith("[contrastive_head]") and mmvm.n == 100
    lo, hi = wilson_interval(np.array([45.0]), np.array([100]))
    assert (mmvm.ci_low, mmvm.ci_high) == pytest.approx((lo[0], hi[0])) and 35 < lo[0] < 45 < hi[0] < 55
    assert ("oracle", "mmvm") not in got.index and ("oracle_part", "mmvm") not in got.index  # n/a: no value
    assert (
        got.loc[("dense_sift", "fgbmk"), "value"] == 12.5 and got.loc[("tiny_vlm", "fgbmk"), "value"] == 60.0
    )
    tp = got.loc[("dense_sift", "tpips")]
    assert (tp.value, tp.ci_low, tp.ci_high) == (48.0, 46.5, 49.5) and tp.simulated
    assert got.simulated.all()  # embedded SOCO data, simulated family data
    assert (long.materialized_at == WHEN).all()


def test_model_summary_one_row_per_model_one_column_per_family():
    long = model_headlines(boards(), {"leaderboard": WHEN}, HEADLINES, embedded=False)
    wide = model_summary(long, HEADLINES)
    assert schema_problems(wide, ModelSummarySchema) == []
    assert wide.model.tolist() == ["dense_sift", "oracle_part", "tiny_vlm"]
    for family in ("soco", "soco_lvlm", "mmvm", "fgbmk", "tpips"):
        assert set(summary_columns(family)) <= set(wide.columns)
    row = wide.set_index("model").loc["dense_sift"]
    assert (row.soco, row.mmvm, row.fgbmk, row.tpips) == (20.0, 45.0, 12.5, 48.0)
    assert pd.isna(row.soco_lvlm)
    assert (
        not row.soco_simulated and row.mmvm_simulated and row.simulated
    )  # SOCO data from a real source here
    assert str(row.soco_date) == "2026-12-01" and pd.isna(row.mmvm_date)  # only the SOCO board's date given
    oracle = wide.set_index("model").loc["oracle_part"]
    assert oracle.soco == 99.0 and pd.isna(oracle.tpips) and not oracle.simulated


def test_controls_and_ceilings_are_marked_by_spec_kind_and_by_the_tpips_headline(tmp_path):
    """The spec folders mark the oracle backbone (kind `oracle`) and the loopback answerers; TPIPS's own
    Headline marks its `pixels` rows: a ceiling when the aspect oracle is their best method, else a control."""
    from soco_pipeline.storage import PROJECT_ROOT
    from soco_pipeline.trust.roles import demo_lvlm_specs, spec_roles

    lvlms = demo_lvlm_specs(tmp_path)  # where `make demo` writes the loopback answerers' specs
    lvlms.mkdir(parents=True)
    for name in ("loopback_oracle", "loopback_random"):
        text = (PROJECT_ROOT / "assets" / "lvlm_demo" / f"{name}.yaml").read_text()
        (lvlms / f"{name}.yaml").write_text(text.replace("@LOOPBACK_URL@", "http://127.0.0.1:4321/v1"))
    (lvlms / "tiny_vlm.yaml").write_text(
        "backend: openai\nmodel: oracle\nbase_url: https://api.example.org/v1\n"
    )
    (tmp_path / "lvlms").mkdir()
    (tmp_path / "lvlms" / "tiny_vlm.yaml").write_bytes((lvlms / "tiny_vlm.yaml").read_bytes())
    roles = spec_roles(PROJECT_ROOT / "assets" / "backbones", tmp_path / "lvlms", tmp_path)
    assert roles == {
        "oracle_concept": "ceiling",
        "oracle_part": "ceiling",
        "loopback_oracle": "ceiling",
        "loopback_random": "control",
    }  # a remote model named `oracle` is a model
    b = boards()
    pixels = pd.DataFrame(
        {"model": "pixels", "method": ["l2", "oracle"], "ooo": [39.0, 90.0], "ooo_err": 1.0}
    )
    b["tpips_leaderboard"] = pd.concat([b["tpips_leaderboard"], pixels], ignore_index=True)
    long = model_headlines(b, {}, HEADLINES, embedded=True, roles=roles)
    assert schema_problems(long, ModelHeadlineSchema) == []
    got = long.set_index(["model", "family"])["role"]
    assert got[("oracle_part", "soco")] == "ceiling" and got[("pixels", "tpips")] == "ceiling"
    assert got[("dense_sift", "soco")] == "model" and got[("tiny_vlm", "soco_lvlm")] == "model"
    b["tpips_leaderboard"] = b["tpips_leaderboard"][b["tpips_leaderboard"].method != "oracle"]
    long = model_headlines(b, {}, HEADLINES, embedded=True, roles=roles)
    assert long.set_index(["model", "family"]).loc[("pixels", "tpips"), "role"] == "control"  # L2: a baseline
    wide = model_summary(long, HEADLINES).set_index("model")
    assert schema_problems(wide.reset_index(), ModelSummarySchema) == []
    assert wide.role.to_dict() == {
        "dense_sift": "model",
        "oracle_part": "ceiling",
        "pixels": "control",
        "tiny_vlm": "model",
    }


def test_a_bad_headline_table_fails_its_schema():
    long = model_headlines(boards(), {}, HEADLINES, embedded=True)
    bad = pd.concat([long, long.iloc[:1]], ignore_index=True)
    assert any("one_row_per_model_and_family" in p for p in schema_problems(bad, ModelHeadlineSchema))
    wrong = long.assign(value=long.value + 200)
    assert schema_problems(wrong, ModelHeadlineSchema)


def test_a_toy_family_appears_with_its_headline_only(tmp_path):
    """A fourth family: its board and the `headline=` of its `Family` declaration (which fills in the family's
    name and `<name>_leaderboard`); the real summary assets (headline_assets) do the rest."""
    from soco_pipeline.defs.shared.family import Family
    from soco_pipeline.defs.shared.resources import SocoSettings
    from soco_pipeline.defs.summary.assets import headline_assets

    family = Family(
        "toy",
        "toy-1",
        lambda path, soco: None,
        headline=Headline(values=("score",), label="toy score", n="n", simulated=True),
    )
    toy = family.headline
    assert (toy.family, toy.board) == ("toy", "toy_leaderboard")
    with pytest.raises(ValueError, match="does not declare with @FAMILY.board"):
        declared_headlines([family])  # no `@family.board` named toy_leaderboard here
    with pytest.raises(ValueError, match="another family"):
        Family(
            "toy", "1", lambda path, soco: None, headline=Headline(values=("x",), label="x", family="tpips")
        )

    @dg.asset(group_name="toy")
    def toy_leaderboard() -> pd.DataFrame:
        return pd.DataFrame({"model": ["dense_sift", "oracle_part"], "score": [61.0, 80.0], "n": [50, 50]})

    assets = [toy_leaderboard, *headline_assets((toy,))]
    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        result = dg.materialize(
            assets,
            instance=instance,
            resources={
                "soco": SocoSettings(storage_root=str(tmp_path / "storage")),
                "io_manager": dg.FilesystemIOManager(base_dir=str(tmp_path / "io")),
            },
        )
        assert result.success
        wide = result.output_for_node("model_summary")
    assert wide.model.tolist() == ["dense_sift", "oracle_part"]
    assert wide.toy.tolist() == [61.0, 80.0] and wide.toy_simulated.all()
    assert (wide.toy_ci_low < wide.toy).all() and (wide.toy < wide.toy_ci_high).all()
    assert set(summary_columns("toy")) <= set(wide.columns)
    # and beside the built-in families: its columns join theirs
    every = (*HEADLINES, toy)
    long = model_headlines({**boards(), "toy_leaderboard": toy_leaderboard()}, {}, every)
    both = model_summary(long, every)
    assert both.set_index("model").loc["dense_sift", ["soco", "toy"]].tolist() == [20.0, 61.0]


def test_views_call_the_model_model_and_keep_backbone_for_one_release(tmp_path):
    from soco_pipeline.report.results_db import create_views

    tables = tmp_path / "tables"
    (tables / "metrics").mkdir(parents=True)
    pd.DataFrame({"backbone": ["a"], "metric": ["soc"], "value": [1.0]}).to_parquet(
        tables / "metrics" / "a.parquet"
    )
    pd.DataFrame({"model": ["m"], "accuracy": [2.0]}).to_parquet(tables / "mmvm_leaderboard.parquet")
    with duckdb.connect() as con:
        create_views(con, str(tables))
        assert con.execute("select model, backbone, value from metrics").fetchall() == [("a", "a", 1.0)]
        cols = [r[0] for r in con.execute("describe mmvm_leaderboard").fetchall()]
        assert cols == ["model", "accuracy"]  # already `model`: nothing added


def test_select_from_model_summary_over_stored_boards(tmp_path):
    """The real summary assets, IO manager and results database over boards stored as the families store
    them (SOCO-LVLM never materialized: skipped): `select * from model_summary` has one row per model."""
    from soco_pipeline.defs.definitions import build_definitions
    from soco_pipeline.report.results_db import query
    from soco_pipeline.storage import write_parquet_atomic
    from soco_pipeline.tables import table_for

    storage = tmp_path / "storage"
    defs = build_definitions(storage_root=str(storage), backbones_dir=str(tmp_path), lvlms_dir=str(tmp_path))
    for name, board in boards().items():
        if name != "lvlm_leaderboard":
            write_parquet_atomic(board, table_for(name).path(str(storage / "tables")))
    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
        result = dg.materialize(
            list(defs.assets) + list(defs.asset_checks),
            selection=dg.AssetSelection.assets("model_headlines", "model_summary", "results_database"),
            instance=instance,
            resources=defs.resources,
        )
        assert result.success
        assert all(c.passed for c in result.get_asset_check_evaluations())
    db = str(storage / "results.duckdb")
    wide = query(db, "select * from model_summary order by model", str(storage / "tables"))
    assert wide.model.tolist() == ["dense_sift", "oracle_part", "tiny_vlm"]
    assert wide.set_index("model").loc["dense_sift", ["soco", "mmvm", "fgbmk", "tpips"]].tolist() == [
        20.0,
        45.0,
        12.5,
        48.0,
    ]
    assert wide.soco_lvlm.isna().all()
    long = query(
        db, "select family, count(*) as n from model_headlines group by 1 order by 1", str(storage / "tables")
    )
    assert dict(zip(long.family, long.n, strict=True)) == {"fgbmk": 2, "mmvm": 2, "soco": 2, "tpips": 1}
