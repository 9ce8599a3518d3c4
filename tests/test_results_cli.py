"""The real duckdb CLI (duckdb-cli from PyPI, a dev dependency) opens storage/results.duckdb, from the project
root and from /tmp, with the one setting docs/results.md gives; and the file is written in a storage format
that CLI reads (results_db.STORAGE_COMPATIBILITY)."""

import importlib.util
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import duckdb
import pandas as pd
import pytest

from soco_pipeline.report.results_db import STORAGE_COMPATIBILITY, query, refresh_views
from soco_pipeline.storage import PROJECT_ROOT, write_parquet_atomic
from soco_pipeline.tables import table_for
from tests.faults import metrics_frame
from tests.needs import need
from tests.test_stored_views import write_family_like_tables

pytestmark = pytest.mark.pipeline


def _cli() -> Path | None:
    """The duckdb binary the duckdb-cli wheel ships (beside its package), if installed."""
    spec = importlib.util.find_spec("duckdb_cli")
    if spec is None or spec.origin is None:
        return None
    binary = Path(spec.origin).parent / "duckdb"
    return binary if binary.is_file() and os.access(binary, os.X_OK) else None


@pytest.fixture
def storage(tmp_path):
    root = tmp_path / "storage"
    tables = str(root / "tables")
    for b, seed in (("a", 0), ("b", 1)):
        write_parquet_atomic(metrics_frame(b, 20, seed), table_for("metrics").path(tables, b))
    refresh_views(root / "results.duckdb", tables)
    return root


def _run(binary: Path, cwd: Path, db: Path, sql: str, search_path: str | None) -> subprocess.CompletedProcess:
    setting = ["-cmd", f"SET file_search_path = '{search_path}'"] if search_path else []
    return subprocess.run(
        [str(binary), "-readonly", "-csv", *setting, os.path.relpath(db, cwd), sql],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("where", ["project_root", "tmp"])
def test_the_duckdb_cli_opens_the_results_file(storage, where):
    binary = _cli()
    need(binary is not None, "the duckdb CLI (pip install duckdb-cli; a dev dependency in pyproject.toml)")
    cwd = PROJECT_ROOT if where == "project_root" else Path(tempfile.gettempdir())
    db = storage / "results.duckdb"
    sql = "select backbone, count(*) as n, round(sum(value), 6) as s from metrics group by all order by 1"
    out = _run(binary, cwd, db, sql, str(storage.resolve()))
    assert out.returncode == 0, out.stderr
    expected = query(db, sql)
    lines = out.stdout.strip().splitlines()
    assert lines[0] == "backbone,n,s" and len(lines) == 1 + len(expected) == 3
    for line, row in zip(lines[1:], expected.itertuples(index=False), strict=True):
        b, n, s = line.split(",")
        assert (b, int(n)) == (row.backbone, row.n) and float(s) == pytest.approx(row.s)
    # Without the setting the stored (relative) paths resolve against the working directory, not the file's.
    bare = _run(binary, cwd, db, sql, None)
    assert bare.returncode != 0 and "No files found" in bare.stderr, bare


def test_the_duckdb_cli_opens_a_file_whose_table_has_nanosecond_utc_timestamps(tmp_path):
    """pandas' `datetime64[ns, UTC]` (model_headlines.materialized_at) is DuckDB 2.0's TIMESTAMPTZ_NS, a type
    the 1.5 CLI does not know: the stored view reads it as TIMESTAMPTZ, so the CLI opens the file."""
    binary = _cli()
    need(binary is not None, "the duckdb CLI (pip install duckdb-cli; a dev dependency in pyproject.toml)")
    root = tmp_path / "storage"
    (root / "tables").mkdir(parents=True)
    stamps = pd.to_datetime(["2026-12-06 03:00:00.123456789"], utc=True)
    pd.DataFrame({"model": ["a"], "materialized_at": stamps}).to_parquet(
        root / "tables" / "model_headlines.parquet", index=False
    )
    refresh_views(root / "results.duckdb", str(root / "tables"))
    sql = "select model, materialized_at from model_headlines"
    out = _run(binary, tmp_path, root / "results.duckdb", sql, str(root.resolve()))
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[1].startswith("a,2026-12-06 03:00:00.123456"), out.stdout


def test_the_results_file_is_written_in_the_compatible_storage_format(storage):
    with duckdb.connect(str(storage / "results.duckdb"), read_only=True) as con:
        tags = con.execute(
            "select tags from duckdb_databases() where database_name = current_database()"
        ).fetchone()
    assert tags[0]["storage_version"].startswith(STORAGE_COMPATIBILITY.rsplit(".", 1)[0]), tags
    assert not [p.name for p in storage.iterdir() if p.name.startswith(".")]  # no temp left beside it


def test_views_need_no_definitions_imported(tmp_path):
    """In a fresh interpreter that never imports the definitions (as `soco sql` does), the family table is
    a view."""
    tables = tmp_path / "tables"
    write_family_like_tables(tables)
    code = (
        "import sys, duckdb\n"
        "from soco_pipeline.report.results_db import create_views\n"
        "con = duckdb.connect()\n"
        f"views = create_views(con, {str(tables)!r})\n"
        "assert not any(m.startswith('soco_pipeline.defs') for m in sys.modules), 'definitions imported'\n"
        "print(con.execute('select accuracy from mmvm_leaderboard').fetchone()[0])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "3.0"
