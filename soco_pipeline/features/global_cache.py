"""The global-feature output of the shared feature cache, extracted once for every family (docs/fgbmk.md)."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import json
import os
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import torch

from soco_pipeline.backbones import BackboneSpec
from soco_pipeline.backbones.base import BackboneContext
from soco_pipeline.features.global_extractors import (
    GlobalExtractor,
    build_global_extractor,
    global_folder,
    in_order,
    load_global_pixels,
    spec_identity,
    torch_threads,
)
from soco_pipeline.features.layout import INFO, FeatureError, checksum_matches, file_checksum
from soco_pipeline.features.policy import GLOBAL_CODE_VERSION, GlobalInputPolicy
from soco_pipeline.runtime.device import cpu_kernels
from soco_pipeline.storage import (
    exists,
    filesystem,
    is_remote,
    is_temporary,
    join,
    read_bytes,
    read_parquet,
    write_bytes_atomic,
    write_parquet_atomic,
)

PARTS = ("cls_prev", "cls_last", "patch_mean")
MANIFEST = "manifest.parquet"  # written before one manifest per writer; still read
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
        """FG-BMK's create_linear_input: the last n blocks' class tokens (+ patch mean)."""
        if n_blocks not in (1, 2):
            raise ValueError(f"n_blocks must be 1 or 2 (the cache keeps two blocks), got {n_blocks}")
        parts = [self.cls_prev, self.cls_last][-n_blocks:] + ([self.patch_mean] if avgpool else [])
        return np.concatenate(parts, axis=1).astype(np.float32)

    def table(self, backbone: str, folder: str, cache_root: str | None = None) -> pd.DataFrame:
        """The asset table: one row per image, its cache folder (relative to `cache_root`), part sizes."""
        root = str(cache_root).rstrip("/") + "/" if cache_root else None
        return pd.DataFrame(
            {
                "backbone": backbone,
                "image_id": self.image_ids.astype(str),
                "folder": folder[len(root) :] if root and folder.startswith(root) else folder,
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


def resolve_folder(folder: str, cache_root: str) -> str:
    """The cache folder a global-feature table names: under `cache_root` when relative, else as stored."""
    return folder if folder.startswith("/") or is_remote(folder) else join(cache_root, folder)


def _fix(folder: str) -> str:
    """The fix for a damaged global cache folder: re-materialize the assets that extract into it."""
    backbone = folder.rstrip("/").split("/")[-3] if folder.count("/") >= 3 else "<backbone>"
    return (
        f"materialize global_feature_manifest[{backbone}] (or fgbmk_global_features[{backbone}]) again: "
        f"only what is damaged is extracted again"
    )


def _manifest_files(folder: str) -> list[str]:
    """A folder's manifest files, oldest first: `manifest.parquet`, then each writer's in start order."""
    fs, base = filesystem(folder)
    fs.invalidate_cache(base)  # an object store's cached listing would hide another writer's new file
    found = fs.glob(f"{base.rstrip('/')}/manifest*.parquet") if fs.exists(base) else []
    names = sorted(f.rsplit("/", 1)[-1] for f in found if not is_temporary(f))
    return [join(folder, n) for n in sorted(names, key=lambda n: (n != MANIFEST, n))]


def _read_manifest(folder: str, damaged: list[str] | None = None) -> pd.DataFrame:
    """Every writer's manifest rows, oldest first; a bad file raises, or goes in `damaged`."""
    frames = []
    for order, path in enumerate(_manifest_files(folder)):
        try:
            df = read_parquet(path)
            missing = set(MANIFEST_COLUMNS) - set(df.columns)
            if missing:
                raise ValueError(f"it lacks columns {sorted(missing)}")
        except (OSError, ValueError, pa.ArrowException) as e:
            if damaged is None:
                raise FeatureError(
                    f"the global-feature manifest {path} is damaged and cannot be read ({e}); "
                    f"{_fix(folder)} (the damaged file is replaced)"
                ) from None
            damaged.append(path)
            continue
        frames.append(df[MANIFEST_COLUMNS].assign(order=order))
    if not frames:
        return pd.DataFrame(columns=[*MANIFEST_COLUMNS, "order"])
    return pd.concat(frames, ignore_index=True)


def _shards(folder: str, rows: pd.DataFrame, keep: bool) -> dict[tuple[str, str], bytes | str]:
    """Each (shard, checksum) -> its verified bytes (b"" unless `keep`), or why not ("missing", "corrupt")."""
    out: dict[tuple[str, str], bytes | str] = {}
    for shard, checksum in rows[["shard", "checksum"]].drop_duplicates().itertuples(index=False):
        path = join(folder, shard)
        if not exists(path):
            out[(shard, checksum)] = "missing"
            continue
        data = read_bytes(path)
        out[(shard, checksum)] = (data if keep else b"") if checksum_matches(data, checksum) else "corrupt"
    return out


def _resolve(
    folder: str, manifest: pd.DataFrame, image_ids, keep: bool
) -> tuple[pd.DataFrame, dict[tuple[str, str], bytes | str]]:
    """Per image, the newest row whose shard is present and intact, and the check of every row considered."""
    rows = manifest if image_ids is None else manifest[manifest.image_id.isin(list(image_ids))]
    checked = _shards(folder, rows, keep)
    status = pd.DataFrame(
        [(shard, checksum, isinstance(v, bytes)) for (shard, checksum), v in checked.items()],
        columns=["shard", "checksum", "ok"],
    )
    ok = rows[["shard", "checksum"]].merge(status, on=["shard", "checksum"], how="left")["ok"].fillna(False)
    valid = (
        rows[ok.to_numpy(dtype=bool)]
        .sort_values("order", kind="stable")
        .drop_duplicates("image_id", keep="last")
    )
    return valid, checked


def _to_extract(folder: str, images: pd.DataFrame, damaged: list[str]) -> pd.DataFrame:
    """The images still to extract: not listed in an intact shard at the same width x height."""
    known, _ = _resolve(folder, _read_manifest(folder, damaged), images.image_id, keep=False)
    known = known.set_index("image_id")
    same = images.image_id.isin(known.index)
    if same.any():
        k = known.loc[images.image_id[same]]
        same[same] = (k.width.to_numpy() == images.width[same].to_numpy()) & (
            k.height.to_numpy() == images.height[same].to_numpy()
        )
    return images[~same.to_numpy()]


def _writer_manifest(folder: str) -> str:
    """This writer's own manifest file, so two writers of one folder never overwrite each other's rows."""
    return join(folder, f"manifest-{time.time_ns():020d}-{os.getpid()}-{uuid.uuid4().hex[:12]}.parquet")


def _read_info(folder: str) -> dict:
    """The folder's info.json (dims, policy); a FeatureError naming it and the fix when missing or damaged."""
    path = join(folder, INFO)
    try:
        info = json.loads(read_bytes(path))
        dims = [int(d) for d in info["dims"]]
        if len(dims) != len(PARTS) or min(dims) < 1:
            raise ValueError(f"dims {dims} are not {len(PARTS)} positive sizes")
    except FileNotFoundError:
        raise FeatureError(f"the global-feature info file {path} is missing; {_fix(folder)}") from None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise FeatureError(f"the global-feature info file {path} is damaged ({e}); {_fix(folder)}") from None
    return {**info, "dims": dims}


def _write_info(folder: str, name: str, dims: list[int], config: GlobalInputPolicy, extractor) -> None:
    write_bytes_atomic(
        join(folder, INFO),
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


def _forward_all(
    extractor: GlobalExtractor, batches: list[pd.DataFrame], config: GlobalInputPolicy, name: str
) -> Iterator[list]:
    """The three parts of each batch as float32 arrays, in order: `config.workers` batches at once where the
    extractor allows it; a FeatureError naming the image on NaN/inf."""
    workers = config.workers if len(batches) > 1 and extractor.concurrent_batches else 1
    # the thread count and kernel flags are process-wide: set once here, never by a worker
    with torch_threads(config.threads), cpu_kernels():
        yield from in_order(lambda recs: _forward_batch(extractor, recs, config, name), batches, workers)


def _forward_batch(
    extractor: GlobalExtractor, recs: pd.DataFrame, config: GlobalInputPolicy, name: str
) -> list:
    """One batch of _forward_all, under its thread count and kernels (inference mode is per thread: set here)."""
    pixels = load_global_pixels(list(recs.uri), list(recs.image_id), config)
    with torch.inference_mode():
        parts = [p.float().cpu().numpy() for p in extractor.forward(pixels, recs)]
    bad = ~np.isfinite(np.concatenate(parts, 1)).all(1)
    if bad.any():
        raise FeatureError(
            f"backbone {name!r} gave NaN/inf global features for image "
            f"{recs.image_id.iloc[int(np.flatnonzero(bad)[0])]!r}; check its weights and input"
        )
    return parts


def extract_global(
    extractor: GlobalExtractor | Callable[[], GlobalExtractor],
    images: pd.DataFrame,
    cache_root: str,
    config: GlobalInputPolicy,
    log: Callable[[str], None] | None = None,
    folder: str | None = None,
    name: str | None = None,
) -> GlobalFeatures:
    """Global features of every image, cached in shards of `config.batch_size`."""
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
    damaged: list[str] = []
    todo = _to_extract(folder, images, damaged)
    for path in damaged:
        log(f"[{name}] {path} is damaged: its images are extracted again and the file is replaced")
    log(f"[{name}] global features: {len(images) - len(todo)} cached in {folder}, {len(todo)} to extract")
    try:
        info_ok = bool(_read_info(folder))
    except FeatureError:
        info_ok = False
    if (len(todo) or not info_ok) and not isinstance(extractor, GlobalExtractor):
        extractor = extractor()
    if not info_ok and not len(todo) and len(images):
        # Only info.json is damaged: one image's forward pass gives the part sizes; no shard is rewritten.
        dims = [p.shape[1] for p in next(_forward_all(extractor, [images.iloc[:1]], config, name))]
        _write_info(folder, name, dims, config, extractor)
        log(f"[{name}] rewrote {join(folder, INFO)} (it was missing or damaged); no shard was extracted")
    own = _writer_manifest(folder)
    rows = []
    t0 = time.perf_counter()
    starts = range(0, len(todo), config.batch_size)
    batches = [todo.iloc[start : start + config.batch_size] for start in starts]
    for start, recs, parts in zip(
        starts, batches, _forward_all(extractor, batches, config, name), strict=True
    ):
        dims = [p.shape[1] for p in parts]
        buf = io.BytesIO()
        np.save(buf, np.concatenate(parts, 1).astype(np.float32), allow_pickle=False)
        data = buf.getvalue()
        shard = "part-" + hashlib.sha256("\n".join(recs.image_id).encode()).hexdigest()[:16] + ".npy"
        write_bytes_atomic(join(folder, shard), data)
        if start == 0:  # every writer writes it, so a deleted or damaged one is rewritten by the next run
            _write_info(folder, name, dims, config, extractor)
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
        write_parquet_atomic(pd.concat(rows, ignore_index=True)[MANIFEST_COLUMNS], own)
    for path in damaged:  # unreadable: its images are listed again (by this writer, or by the next to ask)
        fs, p = filesystem(path)
        with contextlib.suppress(FileNotFoundError):
            fs.rm(p)
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
    """The cache's front door: (the features of `images` in order, the folder), extracting what is missing."""
    folder = global_folder(cache_root, spec.name, spec_identity(spec, policy), policy)
    build = functools.partial(build_global_extractor, spec, policy, context)  # only when something is missing
    return extract_global(build, images, cache_root, policy, log, folder=folder, name=spec.name), folder


def read_global(folder: str, image_ids=None) -> GlobalFeatures:
    """A folder's cached global features (xxh3-verified), in `image_ids` order."""
    manifest = _read_manifest(folder)
    if image_ids is not None:
        manifest = manifest[manifest.image_id.isin(list(image_ids))]
    if manifest.empty:
        raise FileNotFoundError(f"no global features cached in {folder}; {_fix(folder)}")
    info = _read_info(folder)
    rows, checked = _resolve(folder, manifest, None, keep=True)
    lost = manifest[~manifest.image_id.isin(rows.image_id)]
    if len(lost):
        shard = lost.shard.iloc[0]
        why = checked[(shard, lost.checksum.iloc[0])]
        what = (
            "is missing (deleted?)"
            if why == "missing"
            else "is corrupt (its bytes do not match the manifest)"
        )
        raise FeatureError(
            f"global features shard {join(folder, shard)} {what}, and {lost.image_id.nunique()} images "
            f"(e.g. {lost.image_id.iloc[0]!r}) have no other copy; {_fix(folder)}"
        )
    blocks, ids = [], []
    for (shard, checksum), grp in rows.groupby(["shard", "checksum"], sort=True):
        arr = np.load(io.BytesIO(checked[(shard, checksum)]), allow_pickle=False)
        if arr.ndim != 2 or arr.shape[1] != sum(info["dims"]):
            raise FeatureError(
                f"global features shard {join(folder, shard)} has shape {arr.shape}, info.json's part sizes "
                f"{info['dims']} sum to {sum(info['dims'])}; {_fix(folder)}"
            )
        blocks.append(arr[grp.row.to_numpy()])
        ids.append(grp.image_id.to_numpy())
    mat = np.concatenate(blocks)
    cut = np.cumsum(info["dims"])[:-1]
    cls_prev, cls_last, patch_mean = np.split(mat, cut, axis=1)
    feats = GlobalFeatures(np.concatenate(ids).astype(object), cls_prev, cls_last, patch_mean)
    return feats.subset(image_ids) if image_ids is not None else feats
