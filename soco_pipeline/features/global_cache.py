"""The global-feature output of the shared feature cache: per (backbone, input policy, image) the class token of
each of the last two blocks and the mean of the last block's patch tokens, extracted once for every family
that asks (FG-BMK's probes, SOCO's kNN / retrieval, ...). The extractors are `features.global_extractors`.

Layout, beside the backbone's dense maps: `<cache_root>/<backbone>/<spec_hash>/global_<policy_hash>/` holds
shards `part-<digest>.npy` (fp32 rows [cls_prev | cls_last | patch_mean]), `manifest.parquet` (image_id,
shard, row, checksum, width, height) and `info.json` (dims, policy). Each shard is xxh3-checksummed on
every read; extraction resumes from the images the manifest lists with a valid shard. Families with
different image tables share a folder when they ask for the same policy: the manifest is merged with what is
on disk at every write, so one family's rows never drop another's.
"""

from __future__ import annotations

import hashlib
import io
import json
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from soco_pipeline.backbones import BackboneSpec
from soco_pipeline.backbones.base import BackboneContext
from soco_pipeline.device import cpu_kernels
from soco_pipeline.features.global_extractors import (
    GlobalExtractor,
    build_global_extractor,
    global_folder,
    load_global_pixels,
    spec_identity,
    torch_threads,
)
from soco_pipeline.features.layout import FeatureError, checksum_matches, file_checksum
from soco_pipeline.features.policy import GLOBAL_CODE_VERSION, GlobalInputPolicy
from soco_pipeline.storage import (
    exists,
    join,
    read_bytes,
    read_parquet,
    write_bytes_atomic,
    write_parquet_atomic,
)

PARTS = ("cls_prev", "cls_last", "patch_mean")
MANIFEST_COLUMNS = ["image_id", "shard", "row", "checksum", "width", "height"]


@dataclass
class GlobalFeatures:
    """The global features of a set of images, rows in `image_ids` order."""

    image_ids: np.ndarray
    cls_prev: np.ndarray
    cls_last: np.ndarray
    patch_mean: np.ndarray

    def __len__(self) -> int:
        return len(self.image_ids)

    def probe_input(self, n_blocks: int, avgpool: bool) -> np.ndarray:
        """FG-BMK's create_linear_input: the class tokens of the last n blocks (oldest first), plus the
        last block's patch mean when `avgpool`."""
        if n_blocks not in (1, 2):
            raise ValueError(f"n_blocks must be 1 or 2 (the cache keeps two blocks), got {n_blocks}")
        parts = [self.cls_prev, self.cls_last][-n_blocks:] + ([self.patch_mean] if avgpool else [])
        return np.concatenate(parts, axis=1).astype(np.float32)

    def table(self, backbone: str, folder: str) -> pd.DataFrame:
        """The asset table of these features: one row per image with its cache folder and the part sizes."""
        return pd.DataFrame(
            {
                "backbone": backbone,
                "image_id": self.image_ids.astype(str),
                "folder": folder,
                "dim_cls_prev": self.cls_prev.shape[1],
                "dim_cls_last": self.cls_last.shape[1],
                "dim_patch_mean": self.patch_mean.shape[1],
            }
        )

    def subset(self, image_ids) -> GlobalFeatures:
        """The rows of these image ids, in their order (KeyError naming a missing one)."""
        pos = pd.Index(self.image_ids).get_indexer(list(image_ids))
        if (pos < 0).any():
            missing = np.asarray(list(image_ids))[pos < 0][:5]
            raise KeyError(f"no global features for images {list(missing)}; extract them first")
        return GlobalFeatures(
            self.image_ids[pos], self.cls_prev[pos], self.cls_last[pos], self.patch_mean[pos]
        )


def _read_manifest(folder: str) -> pd.DataFrame:
    path = join(folder, "manifest.parquet")
    return read_parquet(path) if exists(path) else pd.DataFrame(columns=MANIFEST_COLUMNS)


def _shard_ok(folder: str, shard: str, checksum: str) -> bool:
    path = join(folder, shard)
    return exists(path) and checksum_matches(read_bytes(path), checksum)


def _to_extract(folder: str, images: pd.DataFrame) -> pd.DataFrame:
    """The images still to extract: an image counts as cached when the manifest lists it in a shard whose
    checksum holds, at the same width x height."""
    manifest = _read_manifest(folder)
    valid_shards = {
        s
        for s, c in manifest[["shard", "checksum"]].drop_duplicates().itertuples(index=False)
        if _shard_ok(folder, s, c)
    }
    known = manifest[manifest.shard.isin(valid_shards)].set_index("image_id")
    same = images.image_id.isin(known.index)
    if same.any():
        k = known.loc[images.image_id[same]]
        same[same] = (k.width.to_numpy() == images.width[same].to_numpy()) & (
            k.height.to_numpy() == images.height[same].to_numpy()
        )
    return images[~same.to_numpy()]


def _write_manifest(folder: str, ours: pd.DataFrame) -> None:
    """Write the manifest: our rows over what is on disk (the rows of other images stay, whoever wrote them)."""
    on_disk = _read_manifest(folder)
    merged = pd.concat([on_disk[~on_disk.image_id.isin(ours.image_id)], ours], ignore_index=True)
    write_parquet_atomic(merged[MANIFEST_COLUMNS], join(folder, "manifest.parquet"))


def extract_global(
    extractor: GlobalExtractor | Callable[[], GlobalExtractor],
    images: pd.DataFrame,
    cache_root: str,
    config: GlobalInputPolicy,
    log: Callable[[str], None] | None = None,
    folder: str | None = None,
    name: str | None = None,
) -> GlobalFeatures:
    """Global features of every image (image_id, uri, width, height [+ label columns for oracles]), cached.

    `extractor` is built already, or a function that builds it, called only when an image is missing (then
    `folder` and `name` must be given: `cached_global` does that). Images listed in the cache manifest with a
    valid shard of the same size are read back; the rest are extracted in batches of `config.batch_size`,
    each batch one shard, the manifest rewritten after each (an interrupted run keeps every finished batch).
    """
    log = log or (lambda _m: None)
    if isinstance(extractor, GlobalExtractor):
        folder, name = extractor.cache_folder(cache_root, config), extractor.name
    elif folder is None or name is None:
        raise ValueError("extract_global: pass a built extractor, or a builder with its folder and name")
    images = images.reset_index(drop=True)
    if images.image_id.duplicated().any():
        raise ValueError(
            f"extract_global: duplicate image ids {list(images.image_id[images.image_id.duplicated()][:5])}"
        )
    todo = _to_extract(folder, images)
    log(f"[{name}] global features: {len(images) - len(todo)} cached in {folder}, {len(todo)} to extract")
    if len(todo) and not isinstance(extractor, GlobalExtractor):
        extractor = extractor()
    rows = []
    t0 = time.perf_counter()
    for start in range(0, len(todo), config.batch_size):
        recs = todo.iloc[start : start + config.batch_size]
        pixels = load_global_pixels(list(recs.uri), list(recs.image_id), config)
        with torch.inference_mode(), torch_threads(config.threads), cpu_kernels():
            parts = [p.float().cpu().numpy() for p in extractor.forward(pixels, recs)]
        bad = ~np.isfinite(np.concatenate(parts, 1)).all(1)
        if bad.any():
            raise FeatureError(
                f"backbone {name!r} gave NaN/inf global features for image "
                f"{recs.image_id.iloc[int(np.flatnonzero(bad)[0])]!r}; check its weights and input"
            )
        dims = [p.shape[1] for p in parts]
        buf = io.BytesIO()
        np.save(buf, np.concatenate(parts, 1).astype(np.float32), allow_pickle=False)
        data = buf.getvalue()
        shard = "part-" + hashlib.sha256("\n".join(recs.image_id).encode()).hexdigest()[:16] + ".npy"
        write_bytes_atomic(join(folder, shard), data)
        if start == 0:
            write_bytes_atomic(
                join(folder, "info.json"),
                json.dumps(
                    {
                        "backbone": name,
                        "dims": dims,
                        "parts": list(PARTS),
                        "config": config.model_dump(),
                        "identity": extractor.identity(),
                        "code_version": GLOBAL_CODE_VERSION,
                    },
                    default=str,
                ).encode(),
            )
        rows.append(
            pd.DataFrame(
                {
                    "image_id": recs.image_id.to_numpy(),
                    "shard": shard,
                    "row": np.arange(len(recs)),
                    "checksum": file_checksum(data),
                    "width": recs.width.to_numpy(),
                    "height": recs.height.to_numpy(),
                }
            )
        )
        _write_manifest(folder, pd.concat(rows, ignore_index=True))
    if len(todo):
        dt = time.perf_counter() - t0
        log(f"[{name}] {len(todo)} images in {dt:.1f} s ({len(todo) / max(dt, 1e-9):.1f} images/s)")
    return read_global(folder, images.image_id)


def cached_global(
    spec: BackboneSpec,
    images: pd.DataFrame,
    cache_root: str,
    policy: GlobalInputPolicy,
    context: BackboneContext | dict | None = None,
    log: Callable[[str], None] | None = None,
) -> tuple[GlobalFeatures, str]:
    """The shared cache's front door for global features: (the features of `images` in their order, the cache
    folder), extracting only what is missing for this (backbone spec, input policy); the backbone is built
    only then. Every family asks here, so an image is extracted once per (backbone, policy)."""
    folder = global_folder(cache_root, spec.name, spec_identity(spec, policy), policy)
    feats = extract_global(
        lambda: build_global_extractor(spec, policy, context),
        images,
        cache_root,
        policy,
        log,
        folder=folder,
        name=spec.name,
    )
    return feats, folder


def read_global(folder: str, image_ids=None) -> GlobalFeatures:
    """The cached global features of a folder (every shard read xxh3-verified), in `image_ids` order if given;
    only the shards that hold those images are read."""
    manifest = _read_manifest(folder)
    if image_ids is not None:
        manifest = manifest[manifest.image_id.isin(list(image_ids))]
    if manifest.empty:
        raise FileNotFoundError(f"no global features cached in {folder}; run extract_global first")
    info = json.loads(read_bytes(join(folder, "info.json")))
    blocks, ids = [], []
    for shard, grp in manifest.groupby("shard", sort=True):
        data = read_bytes(join(folder, shard))
        if not checksum_matches(data, grp.checksum.iloc[0]):
            raise FeatureError(
                f"global features shard {join(folder, shard)} is corrupt (its bytes do not match the "
                f"manifest checksum); delete it and extract again: only its images are recomputed"
            )
        arr = np.load(io.BytesIO(data), allow_pickle=False)
        blocks.append(arr[grp.row.to_numpy()])
        ids.append(grp.image_id.to_numpy())
    mat = np.concatenate(blocks)
    cut = np.cumsum(info["dims"])[:-1]
    cls_prev, cls_last, patch_mean = np.split(mat, cut, axis=1)
    feats = GlobalFeatures(np.concatenate(ids).astype(object), cls_prev, cls_last, patch_mean)
    return feats.subset(image_ids) if image_ids is not None else feats
