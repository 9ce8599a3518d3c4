"""Atomic reads and writes through fsspec paths (local, s3://, memory:// ...).

Every write goes to a temporary sibling path first and is then moved into place, so a crash never
leaves a half-written table or tensor where a reader would find it.
"""

from __future__ import annotations

import contextlib
import io
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import fsspec
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def default_storage_root() -> str:
    """The storage root: $SOCO_STORAGE or <project>/storage."""
    return os.environ.get("SOCO_STORAGE", str(PROJECT_ROOT / "storage"))


def join(root: str, *parts: str) -> str:
    """Join path parts onto an fsspec path."""
    return "/".join([str(root).rstrip("/"), *[p.strip("/") for p in parts]])


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
    fs, p = filesystem(path)
    return fs.exists(p)


@contextlib.contextmanager
def open_atomic(path: str) -> Iterator[IO[bytes]]:
    """A binary file handle on a temporary sibling of `path`, moved onto `path` only if the block succeeds.

    Temporary names start with `.tmp-`, so readers that list published files can skip them.
    """
    fs, p = filesystem(path)
    parent = p.rsplit("/", 1)[0]
    fs.makedirs(parent, exist_ok=True)
    # A sibling, never the final key: on S3 `mv` is copy-then-delete, and the copy appears whole.
    tmp = f"{parent}/{TMP_PREFIX}{uuid.uuid4().hex}-{p.rsplit('/', 1)[-1]}"
    try:
        with fs.open(tmp, "wb") as f:
            yield f
        fs.mv(tmp, p)
    finally:
        if fs.exists(tmp):
            fs.rm(tmp)


def write_bytes_atomic(path: str, data: bytes) -> None:
    """Write bytes to a temporary sibling, then move it onto `path`."""
    with open_atomic(path) as f:
        f.write(data)


def read_bytes(path: str) -> bytes:
    """Read a whole file."""
    fs, p = filesystem(path)
    with fs.open(p, "rb") as f:
        return f.read()


def write_parquet_atomic(df: pd.DataFrame | pa.Table, path: str) -> None:
    """Write a table as one Parquet file atomically."""
    table = df if isinstance(df, pa.Table) else pa.Table.from_pandas(df, preserve_index=False)
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    write_bytes_atomic(path, buf.getvalue())


def read_parquet(path: str, columns: list[str] | None = None) -> pd.DataFrame:
    """Read a Parquet file through fsspec into pandas."""
    fs, p = filesystem(path)
    if not fs.exists(p):
        raise FileNotFoundError(f"{path} does not exist: materialize the asset that writes it first")
    with fs.open(p, "rb") as f:
        return pq.read_table(f, columns=columns).to_pandas()
