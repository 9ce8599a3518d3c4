"""The DuckDB results file: views (not copies) over the Parquet outputs.

Readers open it read-only. The pipeline opens a writer only for the moment it (re)creates the
views, so no long-lived process holds it.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from soco_pipeline.storage import exists, join

# view name -> (path relative to the tables root, partitioned by backbone)
RESULT_TABLES: dict[str, tuple[str, bool]] = {
    "images": ("image_set.parquet", False),
    "rejected_images": ("rejected_images.parquet", False),
    "keypoints": ("keypoints.parquet", False),
    "descriptions": ("descriptions.parquet", False),
    "pairs": ("image_pairs.parquet", False),
    "correspondences": ("correspondences.parquet", False),
    "four_choice": ("four_choice.parquet", False),
    "features": ("feature_manifest", True),
    "predictions": ("predictions", True),
    "four_choice_predictions": ("four_choice_predictions", True),
    "metrics": ("metrics", True),
    "leaderboard": ("leaderboard.parquet", False),
    # analysis (soco_pipeline/defs/analysis.py)
    "global_metrics": ("global_metrics", True),
    "probe_metrics": ("probe_metrics", True),
    "correlation": ("correlation.parquet", False),
}


class ResultsError(RuntimeError):
    """The results file or a table in it is missing; the message says what to materialize."""


def _source(tables_root: str, rel: str, partitioned: bool) -> str | None:
    if partitioned:
        fs_path = join(tables_root, rel)
        import fsspec

        fs, _, paths = fsspec.get_fs_token_paths(fs_path)
        if not fs.exists(paths[0]) or not fs.glob(paths[0] + "/*.parquet"):
            return None
        return join(tables_root, rel, "*.parquet")
    path = join(tables_root, rel)
    return path if exists(path) else None


def refresh_views(db_path: str | Path, tables_root: str) -> list[str]:
    """(Re)create one view per existing result table; returns the view names created."""
    db_path = Path(db_path)
    db_path.parent.mkdir(parents=True, exist_ok=True)
    created = []
    with duckdb.connect(str(db_path)) as con:
        for view, (rel, partitioned) in RESULT_TABLES.items():
            src = _source(tables_root, rel, partitioned)
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
