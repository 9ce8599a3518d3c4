"""`soco sql` sees every table the pipeline wrote, a task family's too, without importing the definitions
(a family's tables are registered by its declaration, which only the definitions import).
tests/test_results_cli.py checks it in a fresh interpreter."""

from __future__ import annotations

import duckdb
import pandas as pd
import pytest

from soco_pipeline.report.results_db import create_views, refresh_views, stored_tables
from soco_pipeline.tables import TABLES, Table

pytestmark = pytest.mark.unit


def write_family_like_tables(tables) -> None:
    """Tables as a family and SOCO write them, plus files that are no table."""
    (tables / "toy_scores").mkdir(parents=True)
    pd.DataFrame({"model": ["a"], "score": [1.0]}).to_parquet(tables / "toy_scores" / "a.parquet")
    pd.DataFrame({"model": ["b"], "score": [2.0]}).to_parquet(tables / "toy_scores" / "b.parquet")
    pd.DataFrame({"model": ["a"], "accuracy": [3.0]}).to_parquet(tables / "mmvm_leaderboard.parquet")
    pd.DataFrame({"x": [1]}).to_parquet(tables / ".tmp-123-mmvm_leaderboard.parquet")  # a writer's temp file
    pd.DataFrame({"x": [1]}).to_parquet(tables / "Not A View.parquet")
    (tables / "empty_folder").mkdir()
    (tables / "notes.txt").write_text("not a table")
    pd.DataFrame({"backbone": ["a"], "metric": ["soc"], "value": [1.0]}).to_parquet(
        tables / "leaderboard.parquet"
    )


def test_unregistered_tables_are_found_from_the_files(tmp_path):
    tables = tmp_path / "tables"
    write_family_like_tables(tables)
    found = stored_tables(str(tables), TABLES)
    assert found == [
        Table("mmvm_leaderboard", "mmvm_leaderboard", False),
        Table("toy_scores", "toy_scores", True),
    ]
    with duckdb.connect() as con:
        views = create_views(con, str(tables))
        assert {"leaderboard", "mmvm_leaderboard", "toy_scores"} <= set(views)
        assert con.execute("select model, score from toy_scores order by model").fetchall() == [
            ("a", 1.0),
            ("b", 2.0),
        ]


def test_a_registered_table_is_not_found_twice(tmp_path):
    tables = tmp_path / "tables"
    write_family_like_tables(tables)
    registered = (*TABLES, Table("mmvm_leaderboard", "mmvm_leaderboard", False))
    assert [t.asset for t in stored_tables(str(tables), registered)] == ["toy_scores"]
    assert stored_tables(str(tmp_path / "missing"), TABLES) == []


def test_socos_history_is_the_soco_history_view_and_model_history_its_old_name(tmp_path):
    """SOCO's regression history (asset `model_history`, one file per backbone) is the view `soco_history`, as
    each family's `<family>_history`; `model_history` stays as a view of the same rows for one release. Through
    `soco sql` in a fresh process (the console script), as docs/sql.md shows it."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    tables = tmp_path / "storage" / "tables"
    (tables / "model_history").mkdir(parents=True)
    for model, value in (("a", 60.0), ("b", 55.0)):
        row = {"model": [model], "metric": ["soc"], "value": [value], "data_version": ["v1"]}
        pd.DataFrame(row).to_parquet(tables / "model_history" / f"{model}.parquet")
    with duckdb.connect() as con:
        views = create_views(con, str(tables))
        assert {"soco_history", "model_history"} <= set(views)
        got = con.execute("select model, value from soco_history order by model").fetchall()
        assert got == [("a", 60.0), ("b", 55.0)]
        assert con.execute("select model, value from model_history order by model").fetchall() == got
    refresh_views(tmp_path / "storage" / "results.duckdb", str(tables))  # what results_database writes
    soco = Path(sys.executable).with_name("soco")
    env = {**os.environ, "SOCO_STORAGE": str(tmp_path / "storage")}
    sql = "select model, value from soco_history order by model"
    done = subprocess.run(
        [str(soco), "sql", sql, "--format", "csv"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["model,value", "a,60.0", "b,55.0"]


def test_a_query_builds_only_the_views_it_reads_and_every_view_when_one_is_missing(tmp_path):
    """`query` reads each named view's files only (a board in 0.02 s instead of 0.12 s over the demo's
    tables); a name that is not there, or a catalog query, sees every view as before."""
    from soco_pipeline.report.results_db import ResultsError, connect_readonly, query, read_views

    tables = tmp_path / "tables"
    write_family_like_tables(tables)
    db = tmp_path / "results.duckdb"
    duckdb.connect(str(db)).close()
    assert read_views("select * from toy_scores t join mmvm_leaderboard m on t.model = m.model") == {
        "toy_scores",
        "mmvm_leaderboard",
    }
    assert read_views("show tables") is None and read_views("select * from duckdb_views()") is None
    # DuckDB's parser binds a USING join, which fails without the tables: then every view is built
    assert read_views("select * from toy_scores t join mmvm_leaderboard m using (model)") is None
    with connect_readonly(db, str(tables), {"toy_scores"}) as con:
        shown = {
            r[0] for r in con.execute("select view_name from duckdb_views() where not internal").fetchall()
        }
    assert shown == {"toy_scores"}
    assert query(db, "select sum(score) as s from toy_scores", str(tables)).s.tolist() == [3.0]
    every = set(query(db, "show tables", str(tables)).name)
    assert {"leaderboard", "mmvm_leaderboard", "toy_scores"} <= every
    with pytest.raises(ResultsError) as missing:
        query(db, "select * from toy_score", str(tables))
    listed = str(missing.value).split("available tables:")[1]
    assert "leaderboard" in listed and "toy_scores" in listed  # every view, as before
