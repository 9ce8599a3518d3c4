"""Atomic reads and writes through fsspec paths (local, s3://, memory:// ...): every write goes to a temporary
sibling and is then moved into place, so a crash never leaves a half-written file where a reader looks."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import os
import re
import shutil
import socket
import time
import uuid
from collections.abc import Iterator
from typing import IO

import fsspec
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import xxhash

from soco_pipeline.settings import PROJECT_ROOT as PROJECT_ROOT
from soco_pipeline.settings import default_storage_root, is_remote, join, variable

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_ABSOLUTE = r"^(/|[A-Za-z][A-Za-z0-9+.-]*://)"  # an absolute local path or a URL


def _root_prefixes(root: str) -> list[str]:
    """The spellings of a storage root that stored paths may start with (a local root also as an absolute path)."""
    prefixes = [str(root).rstrip("/") + "/"]
    if not is_remote(root):
        prefixes.append(os.path.abspath(root).rstrip("/") + "/")
    return list(dict.fromkeys(prefixes))


def relative_to_root(path: str, root: str) -> str:
    """`path` as a table stores it: relative to the storage `root` when under it, else absolute."""
    for prefix in _root_prefixes(root):
        if str(path).startswith(prefix):
            return str(path)[len(prefix) :]
    return str(path)


def resolve(path: str, root: str) -> str:
    """A stored path as a location: relative ones under the storage `root`, absolute, URL or "" as is."""
    path = str(path)
    return path if not path or path.startswith("/") or _URL.match(path) else join(root, path)


def relativize_paths(table: pa.Table, root: str) -> tuple[pa.Table, list[str]]:
    """`table` with its paths under the storage `root` stored relative to it, and the columns changed: only
    string columns of absolute paths or URLs (or empty) with at least one under `root`."""

    def paths_only(values) -> bool:
        return pc.all(pc.or_(pc.match_substring_regex(values, _ABSOLUTE), pc.equal(values, ""))).as_py()

    changed = []
    for i, name in enumerate(table.column_names):
        col = table.column(i)
        text = pa.types.is_string(col.type) or pa.types.is_large_string(col.type)
        if not text or col.null_count == len(col):
            continue
        if not paths_only(col.slice(0, 64)) or not paths_only(col):  # the head first: ids, names fail fast
            continue
        new = col
        for prefix in _root_prefixes(root):
            new = pc.replace_substring_regex(new, f"^{re.escape(prefix)}", "", max_replacements=1)
        if not pc.all(pc.equal(new, col)).as_py():
            table = table.set_column(i, name, new)
            changed.append(name)
    return table, changed


def resolve_paths(table: pa.Table, root: str, columns: list[str]) -> pa.Table:
    """`table` with the relative values of `columns` (those relativize_paths changed) resolved under `root`."""
    prefix = pa.scalar(str(root).rstrip("/") + "/")
    for name in columns:
        if name not in table.column_names:
            continue  # a read of some columns only
        i = table.column_names.index(name)
        col = table.column(i)
        relative = pc.and_(pc.invert(pc.match_substring_regex(col, _ABSOLUTE)), pc.not_equal(col, ""))
        table = table.set_column(
            i, name, pc.if_else(relative, pc.binary_join_element_wise(prefix, col, ""), col)
        )
    return table


def _norm(path: str) -> str:
    return str(path).rstrip("/") if is_remote(path) else os.path.abspath(path)


def _root_from_file(path: str, root: str) -> str | None:
    """Where the storage `root` is from the folder of the file at `path` (`..`, `../..`); None if outside."""
    rel = relative_to_root(_norm(path), _norm(root))
    return None if rel == _norm(path) else "/".join([".."] * rel.count("/")) or "."


def _root_of_file(path: str, up: str) -> str:
    """The storage root of the file at `path`, `up` (`..`, `../..`, `.`) from its folder."""
    levels = 1 + sum(1 for part in up.split("/") if part == "..")
    return str(path).rstrip("/").rsplit("/", levels)[0]


def filesystem(path: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """The fsspec filesystem and the path inside it."""
    fs, _, paths = fsspec.get_fs_token_paths(str(path))
    return fs, paths[0]


TMP_PREFIX = ".tmp-"


def is_temporary(path: str) -> bool:
    """Whether a path is an unpublished temporary file of open_atomic (readers and listers skip these)."""
    return str(path).rstrip("/").rsplit("/", 1)[-1].startswith(TMP_PREFIX)


def list_published(path: str) -> list[str]:
    """Every file under `path` (recursively), without open_atomic's temporary files."""
    fs, p = filesystem(path)
    return sorted(f for f in fs.find(p) if not is_temporary(f))


def exists(path: str) -> bool:
    """Whether a path exists."""
    if not is_remote(path):  # fsspec's local exists is os.path.exists behind its path parsing
        return os.path.exists(path)
    fs, p = filesystem(path)
    return fs.exists(p)


STALE_SECONDS = 3600.0  # a temp file of another machine (or an unknown writer) older than this is stale
_HOST = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]


class StorageFullError(OSError):
    """A write failed for lack of space (ENOSPC/EDQUOT); the message names the storage root and the bytes."""


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists on this machine (signal 0; another user's counts as alive)."""
    try:
        with contextlib.suppress(PermissionError):  # another user's process
            os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _is_stale(fs: fsspec.AbstractFileSystem, path: str, now: float) -> bool:
    """A temp file whose writer is gone: a dead pid on this host, or older than STALE_SECONDS."""
    parts = path.rsplit("/", 1)[-1][len(TMP_PREFIX) :].split("-", 3)
    if len(parts) == 4 and parts[0] == _HOST and parts[1].isdigit():
        return not pid_alive(int(parts[1]))
    try:
        mtime = fs.modified(path).timestamp()
    except (NotImplementedError, FileNotFoundError, OSError):
        return False
    return now - mtime > STALE_SECONDS


def remove_stale_temps(folder: str, name: str | None = None) -> list[str]:
    """Delete and return the `.tmp-*` files (of `name`, else any) in `folder` whose writer died."""
    fs, p = filesystem(folder)
    try:
        candidates = _temps(fs, p.rstrip("/"), name)
    except FileNotFoundError:
        return []
    now = time.time()
    removed = []
    for c in candidates:
        if _is_stale(fs, c, now):
            with contextlib.suppress(FileNotFoundError):
                fs.rm(c)
                removed.append(c)
    return removed


def _temps(fs: fsspec.AbstractFileSystem, folder: str, name: str | None) -> list[str]:
    """open_atomic's temporary files (of `name`, else any) in `folder`."""
    suffix = f"-{name}" if name else ""
    if is_remote(folder):
        return fs.glob(f"{folder}/{TMP_PREFIX}*{suffix}")
    # fsspec's glob compiles a pattern and stats every entry, on every atomic write; the local folder's names
    # are all it needs (docs/benchmarks.md, "No work that cannot change a result")
    with os.scandir(folder) as entries:
        return [
            f"{folder}/{e.name}"
            for e in entries
            if len(e.name) >= len(TMP_PREFIX) + len(suffix)
            and e.name.startswith(TMP_PREFIX)
            and e.name.endswith(suffix)
        ]


def published(paths: list[str]) -> list[str]:
    """The paths whose file name is not hidden (drops `.tmp-*` files of writes in flight or killed)."""
    return [x for x in paths if not x.rstrip("/").rsplit("/", 1)[-1].startswith(".")]


def _mount_of(path: str) -> str:
    """The mount point holding a local path (its nearest existing folder's mount)."""
    p = os.path.abspath(path)
    while not os.path.exists(p):
        p = os.path.dirname(p)
    while not os.path.ismount(p):
        p = os.path.dirname(p)
    return p


def _no_space(path: str, needed: int | None, e: OSError) -> StorageFullError:
    size = f"{needed:,} bytes" if needed is not None else "more space"
    if is_remote(path):
        where, free = path.rsplit("/", 1)[0], "no space left"
    else:
        where = f"mount {_mount_of(path)}"  # the full disk may be a mount inside the storage root
        try:
            free = f"{shutil.disk_usage(_mount_of(path)).free:,} bytes free"
        except OSError:
            free = "free space unknown"
    return StorageFullError(
        e.errno,
        f"no space left writing {path}: it needs {size}, the disk holding it ({where}) has {free}; free space "
        f"there or point SOCO_STORAGE (now {default_storage_root()}) at a larger disk, then re-run (nothing "
        f"was published)",
    )


class StorageMovedError(FileNotFoundError):
    """The storage root a run writes into was moved or deleted while it ran; nothing was written."""


_SEEN_INSTANCES: set[str] = set()  # the instance files (dagster.yaml) this process has seen in their root


def storage_gone(path: str | None = None) -> str:
    """Why writes (under `path`) must stop, else "": the storage root holds $DAGSTER_HOME, whose dagster.yaml
    this process saw before and is gone now (the root was moved or deleted under a run). Two stats at most."""
    root, home = default_storage_root(), variable("DAGSTER_HOME")
    if not home or is_remote(root) or (path is not None and is_remote(path)):
        return ""
    r = os.path.abspath(root)
    inside = [os.path.abspath(x) for x in (home, *([path] if path is not None else []))]
    if not all(x == r or x.startswith(r + os.sep) for x in inside):
        return ""
    instance = os.path.join(os.path.abspath(home), "dagster.yaml")
    if os.path.isfile(instance):
        _SEEN_INSTANCES.add(instance)
        return ""
    if instance not in _SEEN_INSTANCES:
        return ""
    return (
        f"the storage root {root} is gone or no longer holds its Dagster instance ({instance} is missing): "
        "it was moved or deleted while this run was writing to it. Nothing more is written there (no half "
        "tree at the old path). If you moved it, point SOCO_STORAGE (and DAGSTER_HOME) at the new place, or "
        "run from the moved project, and run again: it resumes from what is materialized there"
    )


@contextlib.contextmanager
def open_atomic(path: str, clean_stale: bool = True, size_hint: int | None = None) -> Iterator[IO[bytes]]:
    """A binary handle on a `.tmp-` sibling of `path`, moved onto it if the block succeeds (`clean_stale`:
    first drop killed writers' temps); StorageMovedError (moved root) or StorageFullError."""
    fs, p = filesystem(path)
    parent, name = p.rsplit("/", 1)
    if gone := storage_gone(path):  # never re-create a moved storage root's tree at its old path
        raise StorageMovedError(errno.ENOENT, f"not writing {path}: {gone}")
    # A local file through os: fsspec's opener, mv and exists cost 0.2 ms a write of the LVLM answer cache
    local = not is_remote(path)
    if not local or not os.path.isdir(parent):  # a stat, not a failing mkdir (0.1 ms) per write
        fs.makedirs(parent, exist_ok=True)
    if clean_stale:
        remove_stale_temps(parent, name)
    # A hidden sibling named after its writer (_is_stale reads it), never the final key: on S3 `mv` is
    # copy-then-delete, and the copy appears whole.
    tmp = f"{parent}/{TMP_PREFIX}{_HOST}-{os.getpid()}-{uuid.uuid4().hex[:12]}-{name}"
    written: int | None = size_hint
    try:
        with open(tmp, "wb") if local else fs.open(tmp, "wb") as f:
            try:
                yield f
            finally:
                with contextlib.suppress(Exception):
                    written = written if written is not None else f.tell()
        if local:
            os.replace(tmp, p)
        else:
            fs.mv(tmp, p)
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT) and not isinstance(e, StorageFullError):
            raise _no_space(path, written, e) from e
        raise
    finally:
        with contextlib.suppress(OSError):
            if local and os.path.lexists(tmp):
                os.remove(tmp)
            elif not local and fs.exists(tmp):
                fs.rm(tmp)


def write_bytes_atomic(path: str, data: bytes, clean_stale: bool = True) -> None:
    """Write bytes to a temporary sibling, then move it onto `path`."""
    with open_atomic(path, clean_stale=clean_stale, size_hint=len(data)) as f:
        f.write(data)


def read_bytes(path: str) -> bytes:
    """Read a whole file."""
    if not is_remote(path):  # a local file without fsspec's opener: 10 us a small read instead of 30-45 us
        with open(path, "rb") as f:
            return f.read()
    fs, p = filesystem(path)
    with fs.open(p, "rb") as f:
        return f.read()


# Parquet footer key: xxh3_128 of the file's bytes before the footer
CONTENT_CHECKSUM_KEY = b"soco.content_xxh3"


class TableIntegrityError(ValueError):
    """A stored table whose bytes do not match its content checksum, or that has none where one is required."""


# Parquet footer key: {"columns": [...], "root": "../.."}: the columns holding paths relative to the storage
# root, and where that root is from the file's folder (read_parquet resolves them: a copied root reads its own)
STORAGE_PATHS_KEY = b"soco.storage_paths"


def parquet_bytes(table: pa.Table, metadata: dict[bytes, bytes] | None = None) -> bytes:
    """A table as Parquet bytes (zstd), its footer holding `metadata` and the xxh3 of every byte before it."""
    buf = io.BytesIO()
    with pq.ParquetWriter(buf, table.schema, compression="zstd") as writer:
        writer.write_table(table)
        writer.add_key_value_metadata(
            {**(metadata or {}), CONTENT_CHECKSUM_KEY: xxhash.xxh3_128_hexdigest(buf.getbuffer())}
        )
    return buf.getvalue()


def write_parquet_atomic(df: pd.DataFrame | pa.Table, path: str, storage_root: str | None = None) -> None:
    """One Parquet file written atomically, checksummed; paths under `storage_root` stored relative to it."""
    table = df if isinstance(df, pa.Table) else pa.Table.from_pandas(df, preserve_index=False)
    up = _root_from_file(path, storage_root) if storage_root else None
    metadata = None
    if up is not None:
        table, columns = relativize_paths(table, storage_root)
        if columns:
            metadata = {STORAGE_PATHS_KEY: json.dumps({"columns": columns, "root": up}).encode()}
    write_bytes_atomic(path, parquet_bytes(table, metadata))


def check_parquet(data: bytes, path: str, required: bool = False, fix: str = "") -> None:
    """Verify Parquet bytes against their footer's content checksum (`required`: one must exist)."""
    fix = fix or "re-materialize the asset that writes it"
    footer_len = int.from_bytes(data[-8:-4], "little") if len(data) >= 12 else -1
    start = len(data) - 8 - footer_len
    if data[:4] != b"PAR1" or data[-4:] != b"PAR1" or not 4 <= start <= len(data) - 8:
        raise TableIntegrityError(f"{path} is not a readable Parquet file (damaged or truncated); {fix}")
    meta = pq.read_metadata(io.BytesIO(data)).metadata or {}
    stored = meta.get(CONTENT_CHECKSUM_KEY)
    if stored is None:
        if required:
            raise TableIntegrityError(
                f"{path} has no content checksum: it was written by another tool or altered since (tables "
                f"written by the pipeline carry one); {fix}"
            )
        return
    if xxhash.xxh3_128_hexdigest(memoryview(data)[:start]) != stored.decode():
        raise TableIntegrityError(
            f"{path} was altered after it was written: its contents do not match the checksum stored with "
            f"them; {fix}"
        )


def read_parquet(
    path: str, columns: list[str] | None = None, require_checksum: bool = False, fix: str = ""
) -> pd.DataFrame:
    """A Parquet file as pandas: checksum verified (`require_checksum`: one must exist), paths resolved."""
    fs, p = filesystem(path)
    if not fs.exists(p):
        raise FileNotFoundError(f"{path} does not exist: materialize the asset that writes it first")
    with fs.open(p, "rb") as f:
        data = f.read()
    check_parquet(data, path, require_checksum, fix)
    table = pq.read_table(io.BytesIO(data), columns=columns)
    stored = (pq.read_metadata(io.BytesIO(data)).metadata or {}).get(STORAGE_PATHS_KEY)
    if stored is not None:  # paths relative to the storage root the file lies in
        paths = json.loads(stored)
        table = resolve_paths(table, _root_of_file(path, paths["root"]), paths["columns"])
    return table.to_pandas()


# The longest model name (a spec's file stem) that fits in every file name the pipeline writes with it: a
# component is at most 255 bytes on most file systems, and the longest is an atomic write's temporary name,
# `.tmp-<host 8>-<pid up to 7>-<random 12>-<name>.parquet` (35 + name + 8 bytes); 200 leaves room.
MAX_NAME_LENGTH = 200


def spec_name_problem(name: str, what: str) -> str:
    """ "" when a spec's `name` (its file stem) is fit for the pipeline's file names; else why not and the fix."""
    if not re.fullmatch(r"[A-Za-z0-9_.\-]+", name):
        return f"{what} name {name!r} (the file stem) may only hold letters, digits, '_', '-', '.'"
    if len(name.encode()) <= MAX_NAME_LENGTH:
        return ""
    return (
        f"{what} name (the file stem) is {len(name.encode())} bytes long; at most {MAX_NAME_LENGTH} fit in the "
        "file names the pipeline writes with it (its tables' partitions, the feature cache and their temporary "
        f"files; a file name holds at most 255 bytes). Rename the file to a shorter name, e.g. "
        f"{name[:40]!r}.yaml"
    )
