"""The DuckDB results file: views (not copies) over the Parquet outputs.

Readers open it read-only. The pipeline opens a writer only for the moment it (re)creates the
views, so no long-lived process holds it.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from soco_pipeline.storage import exists, join
from soco_pipeline.tables import TABLES, Table


class ResultsError(RuntimeError):
    """The results file or a table in it is missing; the message says what to materialize."""


def _source(tables_root: str, table: Table) -> str | None:
    """The path or glob a view reads, or None when the table has not been written yet."""
    if table.partitioned:
        fs_path = join(tables_root, table.relative_path())
        import fsspec

        fs, _, paths = fsspec.get_fs_token_paths(fs_path)
        if not fs.exists(paths[0]) or not fs.glob(paths[0] + "/*.parquet"):
            return None
        return join(fs_path, "*.parquet")
    path = table.path(tables_root)
    return path if exists(path) else None


def refresh_views(db_path: str | Path, tables_root: str) -> list[str]:
    """(Re)create one view per existing result table in the file at `db_path`; returns the view names."""
    db_path = Path(db_path)
    db_path.parent.mkdir(parents=True, exist_ok=True)
    with duckdb.connect(str(db_path)) as con:
        return create_views(con, tables_root)


def create_views(con: duckdb.DuckDBPyConnection, tables_root: str) -> list[str]:
    """(Re)create one view per existing result table (and eval_pairs) on an open writable connection."""
    created = []
    for table in TABLES:
        view = table.view
        src = _source(tables_root, table)
        if src is None:
            con.execute(f"DROP VIEW IF EXISTS {view}")
            continue
        src_sql = src.replace("'", "''")
        con.execute(
            f"CREATE OR REPLACE VIEW {view} AS SELECT * FROM read_parquet('{src_sql}', union_by_name=true)"
        )
        created.append(view)
    if "pairs" in created:  # the evaluated sample (200 pairs per category by default)
        con.execute("CREATE OR REPLACE VIEW eval_pairs AS SELECT * FROM pairs WHERE evaluated")
        created.append("eval_pairs")
    else:
        con.execute("DROP VIEW IF EXISTS eval_pairs")
    return created


def connect_readonly(db_path: str | Path) -> duckdb.DuckDBPyConnection:
    """Open the results file read-only, with a clear error when it does not exist yet."""
    db_path = Path(db_path)
    if not db_path.exists():
        raise ResultsError(
            f"no results file at {db_path}: run `make demo` (or materialize the pipeline) first"
        )
    return duckdb.connect(str(db_path), read_only=True)


def query(db_path: str | Path, sql: str):
    """Run one SQL statement against the results file and return a pandas DataFrame."""
    with connect_readonly(db_path) as con:
        try:
            return con.execute(sql).df()
        except duckdb.CatalogException as e:
            views = [
                r[0]
                for r in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()
            ]
            raise ResultsError(f"{e}\navailable tables: {', '.join(sorted(views)) or '(none yet)'}") from None
        except duckdb.Error as e:
            raise ResultsError(f"SQL error: {e}") from None
