"""Where the feature cache keeps its files: folders, file names, the manifest and its columns."""

from __future__ import annotations

import hashlib
import urllib.parse

import pandas as pd
import xxhash

from soco_pipeline.storage import (
    exists,
    join,
    read_parquet,
)

REQUIRED_COLUMNS = ("image_id", "uri", "width", "height", "category")
MANIFEST = "manifest.parquet"
INFO = "info.json"
MANIFEST_COLUMNS = [
    "backbone",
    "image_id",
    "channels",
    "grid_h",
    "grid_w",
    "input_size",
    "stride",
    "path",
    "checksum",
    "width",
    "height",
    "spec_hash",
    "cls_path",  # "" when the backbone has no class token
    "cls_checksum",  # the class token file's checksum ("" when there is none, or in older manifests)
]
FLUSH_SECONDS = 10.0  # manifest writes while extracting (and always when stopping)
LOG_SECONDS = 5.0  # progress lines at most this often (and at the end)


CHECKSUM_PREFIX = "xxh3_128:"  # manifests written before it hold a bare sha256 hex digest


def file_checksum(data: bytes | memoryview) -> str:
    """The manifest checksum of a cached file's bytes: `xxh3_128:<hex>` (about 50 GB/s, verified on every read)."""
    return CHECKSUM_PREFIX + xxhash.xxh3_128_hexdigest(data)


def checksum_matches(data: bytes | memoryview, checksum: str) -> bool:
    """Whether the bytes match a manifest checksum (xxh3_128, or the sha256 of older manifests)."""
    if checksum.startswith(CHECKSUM_PREFIX):
        return file_checksum(data) == checksum
    return hashlib.sha256(data).hexdigest() == checksum


class FeatureError(RuntimeError):
    """Feature extraction failed for a named image; the message says why and what to do."""


def feature_dir(cache_root: str, backbone: str, hash_: str) -> str:
    """The cache folder of one backbone spec: <cache_root>/<backbone>/<spec_hash>."""
    return join(cache_root, backbone, hash_)


def feature_file(image_id: str) -> str:
    """The file name of an image's features (image ids are URL-quoted to be path-safe)."""
    return urllib.parse.quote(str(image_id), safe="") + ".npy"


def read_manifest(folder: str) -> pd.DataFrame:
    """The manifest of a cache folder (an empty one when none is written yet)."""
    path = join(folder, MANIFEST)
    if not exists(path):
        return pd.DataFrame(columns=MANIFEST_COLUMNS)
    df = read_parquet(path)
    return df.assign(**{c: "" for c in ("cls_path", "cls_checksum") if c not in df.columns})


def listed_files(manifest: pd.DataFrame) -> set[str]:
    """The file names (no folder) a manifest lists: every map and every class token."""
    paths = pd.concat([manifest["path"], manifest["cls_path"].fillna("")])
    return {str(p).rsplit("/", 1)[-1] for p in paths if p}
