"""The DuckDB results file: views over an explicit list of published Parquet files (never a glob: the `.tmp-*`
files of atomic writes), relative to the storage root (docs/sql.md); `connect_readonly` (`soco sql`) is
in-memory views over Arrow datasets, external access off and locked, the statement filter a second wall."""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from soco_pipeline.storage import TMP_PREFIX, exists, filesystem, is_remote, published
from soco_pipeline.tables import Table, all_tables

IN_MEMORY = ":memory:"  # the results "file" when the tables live in an object store
# The storage format the results file is written in: DuckDB 2.0 writes format 69 by default, which the
# duckdb CLI on PyPI (duckdb-cli 1.5.x, the newest there) cannot read; a v1.5.0 file opens in both.
STORAGE_COMPATIBILITY = "v1.5.0"

# `query` runs SELECT statements (DESCRIBE, SHOW and CTEs parse as SELECT), and an EXPLAIN [ANALYZE] only of
# one (EXPLAIN ANALYZE executes what it explains); COPY, EXPORT, ATTACH, SET, INSTALL, CREATE ... are refused.
EXPLAIN_PREFIX = re.compile(r"^\s*EXPLAIN\s+(?:ANALY[SZ]E\s+)?(?:\([^)]*\)\s*)?", re.IGNORECASE)


# Views over views: per category, where a backbone fails (official reduction, alpha 0.1), and its worst
# keypoints in words (SOC hits of the free predictions against the raw ground truth, intra pairs).
DERIVED_VIEWS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("model_history", ("soco_history",), "SELECT * FROM soco_history"),  # its old name, for one release
    (
        "where_it_fails",
        ("metrics",),
        """
SELECT backbone, "group" AS category,
       max(value) FILTER (WHERE metric = 'cc') AS cc,
       max(value) FILTER (WHERE metric = 'soc') AS soc,
       max(value) FILTER (WHERE metric = 'soc_geo') AS soc_geo,
       max(value) FILTER (WHERE metric = 'cross_soc') AS cross_soc,
       max(value) FILTER (WHERE metric = 'cc') - max(value) FILTER (WHERE metric = 'soc') AS cc_to_soc_drop,
       rank() OVER (PARTITION BY backbone ORDER BY max(value) FILTER (WHERE metric = 'soc') ASC NULLS LAST)
           AS soc_rank_worst
FROM metrics
WHERE scope = 'category' AND reduction = 'official' AND abs(alpha - 0.1) < 1e-9
GROUP BY backbone, "group"
""",
    ),
    (
        "worst_keypoints",
        ("predictions", "pairs", "keypoints", "images", "descriptions"),
        """
SELECT p.backbone, pr.trg_category AS category, p.src_keypoint AS keypoint, d.description, count(*) AS n,
       100 * avg(CASE WHEN sqrt((p.pred_x - t.x) ^ 2 + (p.pred_y - t.y) ^ 2)
                          < 0.1 * greatest(i.bbox_r - i.bbox_l, i.bbox_b - i.bbox_t) THEN 1 ELSE 0 END) AS soc_pck_raw
FROM predictions p JOIN pairs pr USING (pair_id)
JOIN keypoints t ON t.image_id = pr.trg_image AND t.keypoint = p.src_keypoint AND t.visible
JOIN images i ON i.image_id = pr.trg_image
LEFT JOIN descriptions d ON d.category = pr.trg_category AND d.keypoint = p.src_keypoint
WHERE p.mode = 'free' AND pr.level = 'intra' AND pr.evaluated
GROUP BY 1, 2, 3, 4
""",
    ),
)


class ResultsError(RuntimeError):
    """The results file or a table in it is missing; the message says what to materialize."""


def table_files(tables_root: str, table: Table) -> list[str]:
    """The published Parquet files of a table (sorted; hidden temp files excluded); [] when not written."""
    if not table.partitioned:
        path = table.path(tables_root)
        return [path] if exists(path) else []
    fs, folder = filesystem(table.path(tables_root))
    if not fs.exists(folder):
        return []
    files = sorted(published([f for f in fs.ls(folder, detail=False) if f.endswith(".parquet")]))
    return [fs.unstrip_protocol(f) for f in files] if is_remote(tables_root) else files


VIEW_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


def stored_tables(tables_root: str, registered: tuple[Table, ...]) -> list[Table]:
    """The tables under `tables_root` that `registered` does not name (a family's tables)."""
    fs, root = filesystem(tables_root)
    if not fs.exists(root):
        return []
    taken = {t.asset for t in registered} | {t.view for t in registered}
    found = []
    for entry in fs.ls(root, detail=True):
        name = entry["name"].rstrip("/").rsplit("/", 1)[-1]
        partitioned = entry["type"] == "directory"
        asset = name if partitioned else name.removesuffix(".parquet")
        if (
            asset in taken
            or not VIEW_NAME.match(asset)
            or (not partitioned and not name.endswith(".parquet"))
        ):
            continue
        table = Table(asset, asset, partitioned)
        if table_files(tables_root, table):
            found.append(table)
    return sorted(found, key=lambda t: t.asset)


def every_table(tables_root: str) -> tuple[Table, ...]:
    """Each registered table, then each other one stored under `tables_root`."""
    registered = all_tables()
    return (*registered, *stored_tables(tables_root, registered))


def _tables_and_files(tables_root: str) -> list[tuple[Table, list[str]]]:
    """every_table with its published files ([] when not written)."""
    return [(t, table_files(tables_root, t)) for t in every_table(tables_root)]


def _sql_list(paths: list[str]) -> str:
    return "[" + ", ".join("'" + p.replace("'", "''") + "'" for p in paths) + "]"


def _compatible(types: dict[str, str]) -> str:
    """The `REPLACE (...)` casting tz-aware ns timestamps to TIMESTAMPTZ (for the duckdb 1.5 CLI)."""
    casts = [f'CAST("{c}" AS TIMESTAMPTZ) AS "{c}"' for c, t in types.items() if t == "TIMESTAMPTZ_NS"]
    return f" REPLACE ({', '.join(casts)})" if casts else ""


def _create_views(con: duckdb.DuckDBPyConnection, tables_root: str, base: str | None) -> list[str]:
    """(Re)create one stored view per written table; paths relative to `base` when given. Returns the views."""
    created = []
    for table, files in _tables_and_files(tables_root):
        if not files:
            con.execute(f"DROP VIEW IF EXISTS {table.view}")
            continue
        if base is not None:
            files = [str(Path(f).relative_to(base)) for f in files]
        source = f"read_parquet({_sql_list(files)}, union_by_name=true)"
        types = {r[0]: r[1] for r in con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()}
        # one name for the model in SQL: `model`; SOCO's tables say `backbone`, kept beside it for one release
        alias = "backbone AS model, " if "backbone" in types and "model" not in types else ""
        con.execute(
            f"CREATE OR REPLACE VIEW {table.view} AS SELECT {alias}*{_compatible(types)} FROM {source}"
        )
        created.append(table.view)
    return _derived_views(con, created, drop=True)


# the evaluated sample, then the README's "where it fails" recipes
DERIVED = (("eval_pairs", ("pairs",), "SELECT * FROM pairs WHERE evaluated"), *DERIVED_VIEWS)
# a query that reads the catalog sees every view: it is built over all of them
CATALOG = re.compile(r"duckdb_|information_schema|pg_catalog|sqlite_|pragma", re.IGNORECASE)


def read_views(sql: str) -> set[str] | None:
    """The views one query reads (DuckDB's parser), or None when it reads the catalog or names none."""
    try:
        names = duckdb.get_table_names(sql)
    except duckdb.Error:
        return None
    return names if names and not CATALOG.search(sql) else None


def _derived_views(
    con: duckdb.DuckDBPyConnection,
    created: list[str],
    drop: bool,
    damaged: dict[str, str] | None = None,
) -> list[str]:
    """Add eval_pairs and DERIVED_VIEWS; one that needs a `damaged` table fails with its message."""
    damaged = damaged or {}
    for name, needs, sql in DERIVED:
        broken = [damaged[n] for n in needs if n in damaged]
        if broken:
            _failing_view(con, name, broken[0])
            continue
        if set(needs) <= set(created):
            try:
                con.execute(f"CREATE OR REPLACE VIEW {name} AS {sql}")
                created.append(name)
                continue
            except (
                duckdb.BinderException
            ):  # tables without the columns it reads (e.g. hand-made ones): no view
                pass
        if drop:
            con.execute(f"DROP VIEW IF EXISTS {name}")
    return created


def _failing_view(con: duckdb.DuckDBPyConnection, view: str, message: str) -> None:
    """A view that raises `message` whenever read, so only queries of a damaged table fail."""
    literal = message.replace("'", "''")
    con.execute(
        f"CREATE OR REPLACE VIEW {view} AS SELECT NULL AS damaged FROM range(1) WHERE error('{literal}') IS NULL"
    )


def _local_base(db_path: Path, tables_root: str) -> str | None:
    """The database's folder when the tables live under it (then views store relative paths)."""
    base = db_path.resolve().parent
    if is_remote(tables_root) or not Path(tables_root).resolve().is_relative_to(base):
        return None
    return str(base)


def _register_filesystem(con: duckdb.DuckDBPyConnection, tables_root: str) -> None:
    """Let DuckDB read `tables_root`'s protocol through our fsspec filesystem."""
    fs, _ = filesystem(tables_root)
    names = [fs.protocol] if isinstance(fs.protocol, str) else list(fs.protocol)
    if not set(names) & set(con.list_filesystems()):
        con.register_filesystem(fs)


def refresh_views(db_path: str | Path, tables_root: str) -> list[str]:
    """(Re)create one view per result table in the file at `db_path`; returns the view names."""
    if is_remote(tables_root):
        with duckdb.connect(IN_MEMORY) as con:
            return create_views(con, tables_root)
    db_path = Path(db_path)
    db_path.parent.mkdir(parents=True, exist_ok=True)
    # A fresh file each time, renamed over the old one: it only holds views, and a file once written in a
    # newer storage format stays in it (see STORAGE_COMPATIBILITY); readers never see a half-made file.
    tmp = db_path.with_name(f"{TMP_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:12]}-{db_path.name}")
    try:
        with duckdb.connect(str(tmp), config={"storage_compatibility_version": STORAGE_COMPATIBILITY}) as con:
            views = create_views(con, tables_root)
        os.replace(tmp, db_path)
    finally:
        for leftover in (tmp, tmp.with_name(tmp.name + ".wal")):
            leftover.unlink(missing_ok=True)
    return views


def create_views(con: duckdb.DuckDBPyConnection, tables_root: str) -> list[str]:
    """(Re)create one view per result table on a writable connection, paths relative to the file."""
    if is_remote(tables_root):
        _register_filesystem(con, tables_root)
        return _create_views(con, tables_root, None)
    db_file = con.execute(
        "SELECT path FROM duckdb_databases() WHERE database_name = current_database()"
    ).fetchone()[0]
    base = _local_base(Path(db_file), tables_root) if db_file else None
    if base is not None:
        tables_root = str(Path(tables_root).resolve())
        con.execute(f"SET file_search_path = '{base.replace(chr(39), chr(39) * 2)}'")
    return _create_views(con, tables_root, base)


def connect_readonly(
    db_path: str | Path, tables_root: str | None = None, views: set[str] | None = None
) -> duckdb.DuckDBPyConnection:
    """The results read-only: in-memory views, then external access off and the configuration locked; with
    `views` (the names one query reads), only those views and what they are made of."""
    if tables_root is not None and is_remote(tables_root):  # views over the tables under a URL
        return _sandboxed(duckdb.connect(IN_MEMORY), tables_root, need_views=True, views=views)
    db_path = Path(db_path)
    if not db_path.exists():
        raise ResultsError(
            f"no results file at {db_path}: run `make demo` (or materialize the pipeline) first"
        )
    tables_root = str(Path(tables_root or db_path.resolve().parent / "tables").resolve())
    # The views are rebuilt as temporary views over the tables beside the file, so the file's own (relative)
    # views are not needed: an in-memory connection lists each view once (`show tables`), not twice.
    return _sandboxed(duckdb.connect(IN_MEMORY), tables_root, views=views)


def _sandboxed(
    con: duckdb.DuckDBPyConnection,
    tables_root: str,
    need_views: bool = False,
    views: set[str] | None = None,
) -> duckdb.DuckDBPyConnection:
    """`con` with views over the tables' Arrow datasets, then DuckDB's external access off, locked."""
    try:
        if not _arrow_views(con, tables_root, views) and need_views:
            raise ResultsError(f"no result tables under {tables_root}: materialize the pipeline first")
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
    except BaseException:
        con.close()
        raise
    return con


def _plain(schema: pa.Schema) -> pa.Schema:
    """`schema` with dictionary columns as their values' type (files of one table may differ there)."""
    return pa.schema(
        [f.with_type(f.type.value_type) if pa.types.is_dictionary(f.type) else f for f in schema]
    )


def _dataset(files: list[str], tables_root: str) -> pads.Dataset:
    """The Arrow dataset over a table's files (schemas unioned by name); errors name the bad file."""
    if is_remote(tables_root):
        fs = pafs.PyFileSystem(pafs.FSSpecHandler(filesystem(tables_root)[0]))
        paths = [filesystem(f)[1] for f in files]
    else:
        fs, paths = pafs.LocalFileSystem(), files
    schemas = []
    for path, shown in zip(paths, files, strict=True):
        try:
            schemas.append(_plain(pq.read_schema(path, filesystem=fs)))
        except (pa.ArrowException, OSError) as e:
            raise OSError(f"{shown}: {e}") from None
    schema = pa.unify_schemas(schemas, promote_options="permissive")
    return pads.dataset(paths, schema=schema, format="parquet", filesystem=fs)


def _arrow_views(
    con: duckdb.DuckDBPyConnection, tables_root: str, views: set[str] | None = None
) -> list[str]:
    """One view per table over its Arrow dataset; an unreadable one fails naming it. With `views` (one
    query's), only those and what they are made of, unless one is not there: then every view, as without."""
    tables = every_table(tables_root)
    wanted = set(views or ())
    for name, needs, _ in DERIVED:
        if name in wanted:
            wanted |= set(needs)
    first = [t for t in tables if t.view in wanted] if wanted else list(tables)
    created, damaged = _table_views(con, tables_root, first)
    if wanted and not wanted <= {*created, *damaged, *(name for name, _, _ in DERIVED)}:
        more = _table_views(con, tables_root, [t for t in tables if t not in first])
        created, damaged = created + more[0], {**damaged, **more[1]}
    return _derived_views(con, created, drop=False, damaged=damaged)


def _table_views(
    con: duckdb.DuckDBPyConnection, tables_root: str, tables: list[Table]
) -> tuple[list[str], dict[str, str]]:
    """A view per table with files over its Arrow dataset: (the views made, {damaged view: message})."""
    created: list[str] = []
    damaged: dict[str, str] = {}
    for table in tables:
        files = table_files(tables_root, table)
        if not files:
            continue
        try:
            relation = con.from_arrow(_dataset(files, tables_root))
        except (pa.ArrowException, OSError) as e:
            damaged[table.view] = (
                f"table {table.view} cannot be read ({e}); re-materialize the asset {table.asset!r} that writes "
                f"it (Dagster UI, `dagster asset materialize`, or `make demo`); queries of other tables still work"
            )
            _failing_view(con, table.view, damaged[table.view])
            continue
        columns = set(relation.columns)
        # one name for the model in SQL: `model`; SOCO's tables say `backbone`, kept beside it for one release
        if "backbone" in columns and "model" not in columns:
            relation = relation.project("backbone AS model, *")
        relation.create_view(table.view, replace=True)
        created.append(table.view)
    return created, damaged


def _check_read_only(con: duckdb.DuckDBPyConnection, sql: str) -> None:
    """Refuse empty SQL and any statement that is not a query, with a message saying what is allowed."""
    if not sql or not sql.strip():
        raise ResultsError('empty query: pass one SQL query, e.g. soco sql "SELECT * FROM leaderboard"')
    try:
        statements = con.extract_statements(sql)
    except duckdb.Error as e:
        raise ResultsError(f"SQL error: {e}") from None
    if not statements:
        raise ResultsError('empty query: pass one SQL query, e.g. soco sql "SELECT * FROM leaderboard"')
    for st in statements:
        if st.type == duckdb.StatementType.EXPLAIN:  # EXPLAIN ANALYZE runs what it explains: a query only
            explained = EXPLAIN_PREFIX.sub("", st.query, count=1)
            if explained != st.query:
                try:
                    _check_read_only(con, explained)
                except ResultsError as e:
                    raise ResultsError(f"{e} (inside EXPLAIN)") from None
                continue
        if st.type != duckdb.StatementType.SELECT:
            kind = st.type.name
            raise ResultsError(
                f"refused: `soco sql` runs read-only queries (SELECT, DESCRIBE, SHOW, EXPLAIN); {kind} "
                f"statements such as {st.query.strip()[:60]!r} are not allowed (no COPY/EXPORT/ATTACH/SET)"
            )


def query(db_path: str | Path, sql: str, tables_root: str | None = None):
    """Run one read-only SQL query against the results and return a DataFrame."""
    with connect_readonly(db_path, tables_root, read_views(sql)) as con:
        _check_read_only(con, sql)
        try:
            return con.execute(sql).df()
        except duckdb.CatalogException as e:
            views = [
                r[0]
                for r in con.execute(
                    "SELECT DISTINCT view_name FROM duckdb_views() WHERE NOT internal"
                ).fetchall()
            ]
            raise ResultsError(f"{e}\navailable tables: {', '.join(sorted(views)) or '(none yet)'}") from None
        except duckdb.PermissionException as e:
            raise ResultsError(
                f"refused: `soco sql` reads only the result tables under its storage root ({e})"
            ) from None
        except duckdb.Error as e:
            raise ResultsError(f"SQL error: {e}") from None
