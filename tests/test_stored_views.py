"""`soco sql` sees every table the pipeline wrote, a task family's too, without importing the definitions
(a family's tables are registered by its declaration, which only the definitions import).
tests/test_results_cli.py checks it in a fresh interpreter."""

from __future__ import annotations

import duckdb
import pandas as pd
import pytest

from soco_pipeline.results_db import create_views, stored_tables
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
