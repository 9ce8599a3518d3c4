"""Paths under the storage root are stored relative to it and resolved against the root a table is read from
(storage.write_parquet_atomic / read_parquet, issue 38): a copied root reads its own files."""

from __future__ import annotations

import io
import json
import shutil

import pandas as pd
import pyarrow.parquet as pq
import pytest

from soco_pipeline.defs.shared.checks import content_version
from soco_pipeline.storage import (
    STORAGE_PATHS_KEY,
    join,
    read_bytes,
    read_parquet,
    relative_to_root,
    resolve,
    write_parquet_atomic,
)

pytestmark = pytest.mark.unit


def _table(root: str) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "image_id": ["a", "b", "c"],
            "uri": [join(root, "embedded/a.jpg"), "/data/imagenet3d/b.JPEG", join(root, "embedded/c.jpg")],
            "annotation_uri": ["", "", join(root, "embedded/c.npz")],
            "path": ["a.jpg", "b.JPEG", "c.jpg"],  # names inside a data set: relative already, never touched
            "endpoint": ["http://127.0.0.1:1/v1"] * 3,  # URLs elsewhere: kept
            "n": [1, 2, 3],
        }
    )


def _stored(path: str) -> tuple[pd.DataFrame, dict]:
    data = read_bytes(path)
    meta = pq.read_metadata(io.BytesIO(data)).metadata
    return pq.read_table(io.BytesIO(data)).to_pandas(), json.loads(meta[STORAGE_PATHS_KEY])


@pytest.mark.parametrize("kind", ["local", "memory"])
def test_paths_under_the_root_are_stored_relative_and_read_back_resolved(tmp_path, kind):
    root = str(tmp_path / "storage") if kind == "local" else f"memory://soco-{tmp_path.name}/storage"
    df = _table(root)
    path = join(root, "tables", "image_set", "p.parquet")
    write_parquet_atomic(df, path, storage_root=root)

    raw, meta = _stored(path)
    assert raw.uri.tolist() == ["embedded/a.jpg", "/data/imagenet3d/b.JPEG", "embedded/c.jpg"]
    assert raw.annotation_uri.tolist() == ["", "", "embedded/c.npz"]
    assert raw.path.tolist() == df.path.tolist() and raw.endpoint.tolist() == df.endpoint.tolist()
    assert meta == {"columns": ["uri", "annotation_uri"], "root": "../.."}
    pd.testing.assert_frame_equal(read_parquet(path), df)
    assert read_parquet(path, columns=["n", "uri"]).uri.tolist() == df.uri.tolist()


def test_a_copied_root_resolves_into_the_copy_and_outside_paths_stay(tmp_path):
    a, b = tmp_path / "a" / "storage", tmp_path / "b" / "storage"
    write_parquet_atomic(_table(str(a)), join(str(a), "tables", "image_set.parquet"), storage_root=str(a))
    shutil.copytree(a, b)
    shutil.rmtree(a)
    got = read_parquet(join(str(b), "tables", "image_set.parquet"))
    assert got.uri.tolist() == [f"{b}/embedded/a.jpg", "/data/imagenet3d/b.JPEG", f"{b}/embedded/c.jpg"]
    assert got.annotation_uri.tolist() == ["", "", f"{b}/embedded/c.npz"]


def test_a_table_of_absolute_paths_written_before_reads_as_it_is(tmp_path):
    root = str(tmp_path / "storage")
    path = join(root, "tables", "image_set.parquet")
    write_parquet_atomic(_table(root), path)  # no storage root: the layout of tables written before
    assert STORAGE_PATHS_KEY not in (pq.read_metadata(path).metadata or {})
    pd.testing.assert_frame_equal(read_parquet(path), _table(root))


def test_a_file_outside_the_root_keeps_its_paths(tmp_path):
    root = str(tmp_path / "storage")
    path = str(tmp_path / "elsewhere" / "t.parquet")
    write_parquet_atomic(_table(root), path, storage_root=root)
    assert pq.read_table(path).column("uri").to_pylist() == _table(root).uri.tolist()


def test_the_one_helper_pair(tmp_path):
    root = str(tmp_path / "storage")
    assert relative_to_root(f"{root}/embedded/x.jpg", root) == "embedded/x.jpg"
    assert relative_to_root(f"{root}-other/x.jpg", root) == f"{root}-other/x.jpg"  # a sibling is not inside
    assert relative_to_root("s3://bucket/soco/x.jpg", "s3://bucket/soco/") == "x.jpg"
    assert relative_to_root("s3://other/soco/x.jpg", "s3://bucket/soco") == "s3://other/soco/x.jpg"
    assert resolve("embedded/x.jpg", root) == f"{root}/embedded/x.jpg"
    assert resolve("embedded/x.jpg", "s3://bucket/soco") == "s3://bucket/soco/embedded/x.jpg"
    assert resolve("/data/x.jpg", root) == "/data/x.jpg" and resolve("s3://b/x", root) == "s3://b/x"
    assert resolve("", root) == ""


def test_data_versions_agree_across_copied_roots(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    assert content_version(_table(a), a) == content_version(_table(b), b)
    assert content_version(_table(a), a) != content_version(_table(a).assign(n=[1, 2, 4]), a)
    assert content_version(_table(a)) != content_version(_table(b))  # without the root: the absolute text
