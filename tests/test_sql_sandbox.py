"""`soco sql` reads the result tables and nothing else: no writes, no other files, no ATTACH; copies are portable."""

import shutil
from pathlib import Path

import duckdb
import pytest

from soco_pipeline.cli import soco as cli
from soco_pipeline.report.results_db import connect_readonly, refresh_views
from soco_pipeline.storage import read_parquet, write_parquet_atomic
from soco_pipeline.tables import table_for
from tests.faults import metrics_frame

pytestmark = pytest.mark.unit


@pytest.fixture
def storage(tmp_path, monkeypatch):
    root = tmp_path / "storage"
    tables = str(root / "tables")
    for b, seed in (("a", 0), ("b", 1)):
        write_parquet_atomic(metrics_frame(b, 200, seed), table_for("metrics").path(tables, b))
    board = metrics_frame("a", 2).rename(columns={"value": "soc"})
    write_parquet_atomic(board, table_for("leaderboard").path(tables))
    refresh_views(root / "results.duckdb", tables)
    monkeypatch.setenv("SOCO_STORAGE", str(root))
    return root


def _sql(capsys, q: str) -> tuple[int, str, str]:
    rc = cli.main(["sql", q])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _cells(out: str) -> list[str]:
    """The cells of the rows of the printed table (below its header and rule), left to right."""
    rows = [line for line in out.splitlines() if line.startswith("|")][2:]
    return [c.strip() for line in rows for c in line.strip("|").split("|")]


def test_queries_work(storage, capsys):
    rc, out, _ = _sql(capsys, "SELECT backbone, count(*) AS n FROM metrics GROUP BY ALL ORDER BY 1")
    assert rc == 0 and _cells(out) == ["a", "200", "b", "200"]
    rc, out, _ = _sql(capsys, "DESCRIBE leaderboard")
    assert rc == 0 and "soc" in out


def test_copy_to_is_refused_and_the_table_is_unchanged(storage, capsys):
    path = table_for("leaderboard").path(str(storage / "tables"))
    before = Path(path).read_bytes()
    rc, _, err = _sql(capsys, f"COPY (SELECT 'x' AS backbone, 99.9 AS soc) TO '{path}' (FORMAT parquet)")
    assert rc == 2 and "refused" in err and "COPY" in err
    assert Path(path).read_bytes() == before
    rc, _, err = _sql(capsys, f"SELECT 1; EXPORT DATABASE '{storage / 'tables' / 'dump'}'")
    assert rc == 2 and "refused" in err and not (storage / "tables" / "dump").exists()


@pytest.mark.parametrize(
    "q",
    [
        "SELECT * FROM read_csv('/etc/passwd')",
        "SELECT * FROM read_text('/etc/hostname')",
        "SELECT * FROM glob('/root/**')",
        "SELECT * FROM read_text('{tables}/../../secret.txt')",  # a path that climbs out of the tables
    ],
)
def test_reading_outside_the_tables_is_refused(storage, capsys, q):
    (storage.parent / "secret.txt").write_text("not for soco sql")
    rc, out, err = _sql(capsys, q.format(tables=storage / "tables"))
    assert rc == 2 and "refused" in err and "storage root" in err, err
    assert out == "" and "not for soco sql" not in err


def test_attach_set_and_install_are_refused(storage, capsys, tmp_path):
    for q in (
        f"ATTACH '{tmp_path / 'other.db'}' AS o",
        "SET enable_external_access = true",
        "INSTALL httpfs",
    ):
        rc, _, err = _sql(capsys, q)
        assert rc == 2 and "refused" in err, (q, err)
    assert not (tmp_path / "other.db").exists()
    # The sandbox holds on the connection itself, not only in the statement filter.
    with connect_readonly(storage / "results.duckdb") as con:
        with pytest.raises(duckdb.Error, match="disabled|locked"):
            con.execute(f"ATTACH '{tmp_path / 'other.db'}' AS o")
        with pytest.raises(duckdb.Error, match="locked"):
            con.execute("SET enable_external_access = true")


@pytest.mark.parametrize("q", ["", "   ", ";"])
def test_empty_query_is_a_clear_error(storage, capsys, q):
    rc, _, err = _sql(capsys, q)
    assert rc == 2 and "empty query" in err


def test_a_copied_storage_root_queries_its_own_tables(storage, capsys, tmp_path, monkeypatch):
    copy = tmp_path / "copy"
    shutil.copytree(storage, copy)
    stored = duckdb.connect(str(copy / "results.duckdb"), read_only=True)
    sql = stored.execute("SELECT sql FROM duckdb_views() WHERE view_name = 'metrics'").fetchone()[0]
    stored.close()
    assert str(storage) not in sql and "tables/metrics/a.parquet" in sql  # stored relative
    leaderboard = table_for("leaderboard").path(str(copy / "tables"))
    write_parquet_atomic(read_parquet(leaderboard).assign(soc=-1.0), leaderboard)
    shutil.rmtree(storage)  # the original is gone: nothing may still point at it
    monkeypatch.setenv("SOCO_STORAGE", str(copy))
    rc, out, err = _sql(capsys, "SELECT min(soc) AS s, (SELECT count(*) FROM metrics) AS n FROM leaderboard")
    assert rc == 0, err
    assert _cells(out) == ["-1.000", "400"]  # a fraction-scale column: three decimals


def test_the_dagster_duckdb_resource_reads_the_relative_views(storage, monkeypatch, tmp_path):
    from soco_pipeline.defs.definitions import build_definitions

    monkeypatch.chdir(tmp_path)  # not the storage root: the views must not depend on the working directory
    resource = build_definitions(storage_root=str(storage)).resources["duckdb"]
    with resource.get_connection() as con:
        assert con.execute("SELECT count(*) FROM metrics").fetchone()[0] == 400


@pytest.fixture
def bucket(monkeypatch):
    """Result tables in an object store (fsspec's memory:// filesystem), as in the distributed profile."""
    import fsspec

    fs = fsspec.filesystem("memory")
    root = "memory://results-bucket/storage"
    tables = f"{root}/tables"
    for b, seed in (("a", 0), ("b", 1)):
        write_parquet_atomic(metrics_frame(b, 200, seed), table_for("metrics").path(tables, b))
    write_parquet_atomic(metrics_frame("x", 3, 2), "memory://results-bucket/private/secret.parquet")
    monkeypatch.setenv("SOCO_STORAGE", root)
    yield root
    fs.rm("/results-bucket", recursive=True)


def test_sql_over_tables_in_an_object_store(bucket, capsys):
    """No results file: `soco sql` builds the views over the bucket, readable there and nowhere else."""
    # What the results_database / lvlm_leaderboard / correlation assets do there: build and check the views.
    assert refresh_views(":memory:", f"{bucket}/tables") == ["metrics"]
    rc, out, err = _sql(capsys, "SELECT backbone, count(*) AS n FROM metrics GROUP BY ALL ORDER BY 1")
    assert rc == 0, err
    assert _cells(out) == ["a", "200", "b", "200"]
    for q in (
        "SELECT * FROM read_parquet('memory://results-bucket/private/secret.parquet')",
        "SELECT * FROM read_csv('/etc/passwd')",
    ):
        rc, _, err = _sql(capsys, q)
        assert rc == 2 and "refused" in err, err
    rc, _, err = _sql(capsys, "CREATE TABLE t AS SELECT 1")
    assert rc == 2 and "refused" in err


# Issue 58: `EXPLAIN ANALYZE COPY ... TO <a stored table>` overwrote the leaderboard through the word list.
WRITES = {
    "copy": "COPY (SELECT 'x' AS backbone) TO '{path}' (FORMAT parquet)",
    "export": "EXPORT DATABASE '{dump}'",
    "attach": "ATTACH '{dump}.duckdb' AS o",
    "install": "INSTALL httpfs",
    "load": "LOAD httpfs",
    "set": "SET enable_external_access = true",
    "pragma": "PRAGMA threads = 1",
    "call": "CALL pragma_version()",
    "create": "CREATE TABLE t AS SELECT 1 AS x",
}
WRAPPERS = {
    "plain": "{w}",
    "explain": "EXPLAIN {w}",
    "explain_analyze": "EXPLAIN ANALYZE {w}",
    "explain_options": "EXPLAIN (FORMAT json) {w}",
    "after_a_cte_query": "WITH x AS (SELECT 1) SELECT * FROM x; {w}",
    "multi_statement": "SELECT 1; {w}",
}


@pytest.mark.parametrize("wrapper", sorted(WRAPPERS))
@pytest.mark.parametrize("write", sorted(WRITES))
def test_every_write_path_is_refused_and_nothing_changes(storage, capsys, write, wrapper):
    tables = storage / "tables"
    path = table_for("leaderboard").path(str(tables))
    before = {p: p.read_bytes() for p in tables.rglob("*") if p.is_file()}
    q = WRAPPERS[wrapper].format(w=WRITES[write].format(path=path, dump=tables / "dump"))
    rc, out, err = _sql(capsys, q)
    # EXPORT and ATTACH cannot be EXPLAINed: DuckDB's parser refuses those before anything runs
    assert rc == 2 and ("refused" in err or "syntax error" in err), (q, out, err)
    assert {p: p.read_bytes() for p in tables.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize("wrapper", ["plain", "explain_analyze"])
@pytest.mark.parametrize("write", ["copy", "export", "attach", "install", "load"])
def test_the_connection_itself_can_write_no_file(storage, write, wrapper):
    """The second wall is the first: with the statement filter bypassed, the connection opens no file."""
    tables = storage / "tables"
    path = table_for("leaderboard").path(str(tables))
    before = {p: p.read_bytes() for p in tables.rglob("*") if p.is_file()}
    q = WRAPPERS[wrapper].format(w=WRITES[write].format(path=path, dump=tables / "dump"))
    with connect_readonly(storage / "results.duckdb") as con:
        with pytest.raises(duckdb.Error, match="disabled|Permission|syntax error"):
            con.execute(q)
        assert con.execute("SELECT count(*) FROM metrics").fetchone()[0] == 400  # still reads
    assert {p: p.read_bytes() for p in tables.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize(
    "q",
    [
        "EXPLAIN SELECT * FROM leaderboard",
        "EXPLAIN ANALYZE SELECT count(*) FROM metrics",
        "WITH m AS (SELECT * FROM metrics) SELECT count(*) AS n FROM m",
        "SHOW TABLES",
    ],
)
def test_explain_and_ctes_of_queries_still_run(storage, capsys, q):
    rc, out, err = _sql(capsys, q)
    assert rc == 0 and out.strip(), err


def test_a_damaged_table_fails_only_the_queries_that_read_it(storage, capsys):
    """Issue 58: one damaged table made every `soco sql` query fail; now only those that touch it, by name."""
    board = Path(table_for("leaderboard").path(str(storage / "tables")))
    board.write_bytes(board.read_bytes()[: len(board.read_bytes()) // 2])  # truncated: no footer
    rc, out, err = _sql(capsys, "SELECT count(*) AS n FROM metrics")
    assert rc == 0 and _cells(out) == ["400"], err
    rc, out, err = _sql(capsys, "SHOW TABLES")
    assert rc == 0 and {"metrics", "leaderboard"} <= set(_cells(out))
    for q in ("SELECT * FROM leaderboard", "SELECT count(*) FROM leaderboard"):
        rc, out, err = _sql(capsys, q)
        assert rc == 2 and out == "", (q, out)
        assert "leaderboard cannot be read" in err and str(board) in err and "re-materialize" in err, err


def test_explain_analyze_copy_is_refused_from_the_console_script(storage, tmp_path):
    """As a user runs it: the `soco` console script in a fresh process, on the probe's exact statement."""
    import os
    import subprocess
    import sys

    path = table_for("leaderboard").path(str(storage / "tables"))
    before = Path(path).read_bytes()
    soco = Path(sys.executable).with_name("soco")
    q = f"EXPLAIN ANALYZE COPY (SELECT 'x' AS backbone) TO '{path}' (FORMAT parquet)"
    env = {**os.environ, "SOCO_STORAGE": str(storage)}
    done = subprocess.run([str(soco), "sql", q], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 2 and "refused" in done.stderr and "COPY" in done.stderr, done.stderr
    assert Path(path).read_bytes() == before
    board = subprocess.run(
        [str(soco), "sql", "SELECT count(*) AS n FROM leaderboard", "--format", "csv"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert board.returncode == 0 and board.stdout.split()[-1] == "2", board.stderr
