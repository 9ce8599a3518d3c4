"""The per-backbone feature cache: dense maps extracted once per (backbone, image), fp16, resumable."""

from __future__ import annotations

import io
import itertools
import json
import os
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait

import numpy as np
import pandas as pd
import torch

from soco_pipeline.backbones import Backbone, BackboneContext, BackboneSpec, build_backbone, spec_hash
from soco_pipeline.backbones.spec import FEATURE_CODE_VERSION
from soco_pipeline.features.layout import (
    FLUSH_SECONDS,
    INFO,
    LOG_SECONDS,
    MANIFEST,
    MANIFEST_COLUMNS,
    REQUIRED_COLUMNS,
    FeatureError,
    checksum_matches,
    feature_dir,
    feature_file,
    file_checksum,
    listed_files,
    read_manifest,
)
from soco_pipeline.runtime.device import cpu_kernels
from soco_pipeline.runtime.pause_points import pause_point
from soco_pipeline.schemas import FeatureManifestSchema, validate
from soco_pipeline.storage import (
    StorageFullError,
    exists,
    filesystem,
    join,
    read_bytes,
    remove_stale_temps,
    write_bytes_atomic,
    write_parquet_atomic,
)


def load_image(uri: str, image_id: str = "?") -> np.ndarray:
    """Read an image through fsspec as H x W x 3 uint8 RGB; a clear error names the image otherwise."""
    from PIL import Image, UnidentifiedImageError

    try:
        data = read_bytes(uri)
    except FileNotFoundError:
        raise FeatureError(
            f"image {image_id!r}: {uri} does not exist; re-materialize the images or fix its uri in image_set"
        ) from None
    try:
        with Image.open(io.BytesIO(data)) as im:
            return np.asarray(im.convert("RGB"))
    except (UnidentifiedImageError, OSError, ValueError) as e:
        raise FeatureError(
            f"image {image_id!r}: {uri} is not a readable image ({e}); the file is corrupt or truncated, "
            f"regenerate it or drop the image from image_set"
        ) from None


def _encode(arr: np.ndarray) -> tuple[bytes, str]:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    data = buf.getvalue()
    return data, file_checksum(data)


def _check_images(images: pd.DataFrame) -> pd.DataFrame:
    missing = [c for c in REQUIRED_COLUMNS if c not in images.columns]
    if missing:
        raise ValueError(
            f"extract_features: the images table lacks columns {missing}; pass image_set rows "
            f"({', '.join(REQUIRED_COLUMNS)})"
        )
    dup = images.image_id[images.image_id.duplicated()].unique()
    if len(dup):
        raise ValueError(f"extract_features: duplicate image ids {list(dup[:5])}; image ids must be unique")
    return images[list(REQUIRED_COLUMNS)].reset_index(drop=True)


def _file_ok(cache_root: str, rel: str, checksum: str, verify: str) -> bool:
    """Whether a listed cache file is present and (verify 'checksum', a checksum recorded) intact."""
    path = join(cache_root, rel)
    if not exists(path):
        return False
    return verify != "checksum" or not checksum or checksum_matches(read_bytes(path), checksum)


def _is_done(cache_root: str, row: dict | None, verify: str) -> bool:
    """Whether an image's cached files can be reused: its map and, when listed, its class token."""
    if row is None:
        return False
    if verify == "none":
        return True
    if not _file_ok(cache_root, row["path"], row["checksum"], verify):
        return False
    cls_path = row.get("cls_path") or ""
    if not isinstance(cls_path, str) or not cls_path:
        return True
    cls_sum = row.get("cls_checksum") or ""
    return _file_ok(cache_root, cls_path, cls_sum if isinstance(cls_sum, str) else "", verify)


class _Manifest:
    """The manifest rows of one cache folder, flushed atomically now and then."""

    def __init__(self, folder: str, df: pd.DataFrame):
        self.path = join(folder, MANIFEST)
        self.rows: dict[str, dict] = {r["image_id"]: r for r in df.to_dict("records")}
        self.dirty = False
        self.last_flush = time.monotonic()

    def add(self, row: dict) -> None:
        self.rows[row["image_id"]] = row
        self.dirty = True

    def flush(self, force: bool = False) -> None:
        if self.dirty and (force or time.monotonic() - self.last_flush >= FLUSH_SECONDS):
            df = pd.DataFrame(list(self.rows.values()), columns=MANIFEST_COLUMNS)
            write_parquet_atomic(df, self.path)
            self.dirty = False
            self.last_flush = time.monotonic()


def extract_features(
    spec: BackboneSpec,
    images: pd.DataFrame,
    cache_root: str,
    context: BackboneContext | dict | None = None,
    log: Callable[[str], None] | None = None,
    backbone: Backbone | None = None,
    verify: str = "checksum",
) -> pd.DataFrame:
    """Extract and cache fp16 features of the images without a valid cached file; their manifest rows."""
    if verify not in ("checksum", "exists", "none"):
        raise ValueError(f"verify must be 'checksum', 'exists' or 'none', got {verify!r}")
    if backbone is not None and backbone.spec != spec:
        raise ValueError(
            f"the backbone passed was built from spec {backbone.spec.name!r}, not from {spec.name!r}"
        )
    log = log or (lambda _msg: None)
    images = _check_images(images)
    hash_ = spec_hash(spec)
    folder = feature_dir(cache_root, spec.name, hash_)
    manifest = _Manifest(folder, read_manifest(folder))
    remove_stale_temps(folder)  # temps of a killed extraction: never read, removed here

    # An image whose recorded size changed (a different file under the same id) is recomputed.
    todo = [
        i
        for i, r in enumerate(images.itertuples(index=False))
        if not _is_done(cache_root, manifest.rows.get(r.image_id), verify)
        or (manifest.rows[r.image_id]["width"], manifest.rows[r.image_id]["height"]) != (r.width, r.height)
    ]
    n_total, n_cached = len(images), len(images) - len(todo)
    log(f"[{spec.name}] {n_total} images: {n_cached} cached in {folder}, {len(todo)} to extract")
    if todo:
        backbone = backbone or build_backbone(spec, context)
        _write_info(folder, spec, hash_, backbone)
        try:
            _run(spec, backbone, images.iloc[todo].reset_index(drop=True), folder, hash_, manifest, log)
        except StorageFullError as e:
            freed = _remove_unlisted_files(folder)
            raise StorageFullError(
                e.errno,
                f"{e.strerror}. Extraction of {spec.name!r} stopped; {freed} files (maps, class "
                f"tokens) the manifest could not list were removed, the listed ones are kept (a rerun resumes "
                f"from them)",
            ) from e

    out = pd.DataFrame([manifest.rows[i] for i in images.image_id], columns=MANIFEST_COLUMNS)
    validate(out, FeatureManifestSchema, f"features[{spec.name}] manifest")
    ints = ["channels", "grid_h", "grid_w", "input_size", "width", "height"]
    return out.astype({**dict.fromkeys(ints, "int64"), "stride": "float64"})


def _remove_unlisted_files(folder: str) -> int:
    """Delete and count the .npy files of a cache folder that its manifest does not list (orphans)."""
    fs, base = filesystem(folder)
    listed = listed_files(read_manifest(folder))
    orphans = [f for f in fs.glob(f"{base.rstrip('/')}/*.npy") if f.rsplit("/", 1)[-1] not in listed]
    for f in orphans:
        fs.rm(f)
    return len(orphans)


def _write_info(folder: str, spec: BackboneSpec, hash_: str, backbone: Backbone) -> None:
    info = {
        "spec": spec.to_dict(),
        "spec_hash": hash_,
        "code_version": FEATURE_CODE_VERSION,
        "input_size": backbone.spec.input.size(backbone.multiple),
        "stride": backbone.stride,
        "torch": torch.__version__,
    }
    write_bytes_atomic(join(folder, INFO), json.dumps(info, indent=2, default=str).encode())


def _plan(backbone: Backbone, todo: pd.DataFrame, batch_size: int) -> list[tuple[np.ndarray, int]]:
    """(row indices, input size S) of every batch: one S each, at most batch_size, in order."""
    wh = todo[["width", "height"]].to_numpy(dtype=np.int64).reshape(-1, 2)
    uniq, inverse = np.unique(wh, axis=0, return_inverse=True)
    sizes = np.array([backbone.input_size(int(w), int(h)) for w, h in uniq], dtype=np.int64)[inverse.ravel()]
    plan = []
    for size in dict.fromkeys(sizes.tolist()):  # in order of first appearance
        rows = np.flatnonzero(sizes == size)
        plan += [(rows[i : i + batch_size], size) for i in range(0, len(rows), batch_size)]
    return plan


def _load_batch(recs: pd.DataFrame) -> list[np.ndarray]:
    out = []
    for r in recs.itertuples(index=False):
        img = load_image(r.uri, r.image_id)
        if img.shape[:2] != (int(r.height), int(r.width)):
            raise FeatureError(
                f"image {r.image_id!r}: {r.uri} is {img.shape[1]}x{img.shape[0]} but its record says "
                f"{r.width}x{r.height}; fix width/height in image_set (keypoints are in file pixels)"
            )
        out.append(img)
    return out


def _prepare(backbone: Backbone, recs: pd.DataFrame):
    """Loader thread: decode a batch's images (PIL releases the GIL) and run the model-free input work."""
    return backbone.prepare(_load_batch(recs), recs.reset_index(drop=True))


class _Writer:
    """Writes a batch's maps and manifest rows in a thread; read the manifest after `wait`."""

    def __init__(self, spec: BackboneSpec, folder: str, rel: str, hash_: str, manifest: _Manifest):
        self.spec, self.folder, self.rel, self.hash_, self.manifest = spec, folder, rel, hash_, manifest

    def __call__(
        self,
        recs: pd.DataFrame,
        feats: list[torch.Tensor],
        size: int,
        tokens: list[torch.Tensor] | None = None,
    ) -> int:
        finite = torch.stack(feats).flatten(1).isfinite().all(1).tolist()
        for image_id, ok in zip(recs.image_id, finite, strict=True):
            if not ok:
                raise FeatureError(
                    f"backbone {self.spec.name!r} produced NaN/inf features for image {image_id!r}; "
                    f"check its weights and input (normalisation {self.spec.normalisation!r}, S={size})"
                )
        widths, heights = recs.width.tolist(), recs.height.tolist()
        tokens = tokens or [None] * len(feats)
        for k, (image_id, f, token) in enumerate(zip(recs.image_id, feats, tokens, strict=True)):
            arr = f.to(torch.float16).numpy()
            data, checksum = _encode(arr)
            name = feature_file(image_id)
            write_bytes_atomic(join(self.folder, name), data, clean_stale=False)  # swept once at start
            cls_name, cls_checksum = "", ""
            if token is not None:  # the class token beside the map (timm ViTs)
                cls_name = name[: -len(".npy")] + ".cls.npy"
                cls_data, cls_checksum = _encode(token.to(torch.float16).numpy())
                write_bytes_atomic(join(self.folder, cls_name), cls_data, clean_stale=False)
            c, h, w = arr.shape
            self.manifest.add(
                {
                    "backbone": self.spec.name,
                    "image_id": image_id,
                    "channels": c,
                    "grid_h": h,
                    "grid_w": w,
                    "input_size": size,
                    "stride": size / w,
                    "path": f"{self.rel}/{name}",
                    "checksum": checksum,
                    "width": int(widths[k]),
                    "height": int(heights[k]),
                    "spec_hash": self.hash_,
                    "cls_path": f"{self.rel}/{cls_name}" if cls_name else "",
                    "cls_checksum": cls_checksum,
                }
            )
        self.manifest.flush()
        # fault-injection tests stop here (runtime/pause_points.py)
        pause_point("features_written", self.spec.name)
        return len(recs)


def _run(
    spec: BackboneSpec,
    backbone: Backbone,
    todo: pd.DataFrame,
    folder: str,
    hash_: str,
    manifest: _Manifest,
    log: Callable[[str], None],
) -> None:
    """Extract `todo` overlapped: loaders prepare batch n+1, this thread runs batch n, a writer writes n-1."""
    plan = _plan(backbone, todo, spec.batch_size)
    writer = _Writer(spec, folder, "/".join([spec.name, hash_]), hash_, manifest)
    # one loader on the CPU (torch already uses every core), up to 4 with an accelerator
    n_loaders = 1 if backbone.device.type == "cpu" else max(1, min(4, (os.cpu_count() or 2) - 1))
    start, done, last_log = time.monotonic(), 0, time.monotonic()
    ahead: deque = deque()
    written: Future | None = None
    with (
        ThreadPoolExecutor(n_loaders, thread_name_prefix="soco-load") as loaders,
        ThreadPoolExecutor(1, thread_name_prefix="soco-write") as writes,
    ):
        queued = iter(plan)

        def top_up() -> None:
            for rows, _size in itertools.islice(queued, n_loaders + 1 - len(ahead)):
                ahead.append(loaders.submit(_prepare, backbone, todo.iloc[rows]))

        try:
            for rows, size in plan:
                top_up()
                inputs = ahead.popleft().result()
                top_up()
                recs = todo.iloc[rows]
                with cpu_kernels():  # SOCO_DETERMINISTIC_CPU=1: thread-count independent features
                    if backbone.offers_class_token:
                        feats, tokens = backbone.extract(inputs, recs, with_class_token=True)
                    else:
                        feats, tokens = backbone.extract(inputs, recs), None
                if written is not None:
                    done += written.result()  # the writer's error, if any, surfaces here
                written = writes.submit(writer, recs, feats, size, tokens)
                now = time.monotonic()
                if now - last_log >= LOG_SECONDS:
                    last_log = now
                    _log_progress(log, spec.name, done, len(todo), now - start)
            if written is not None:
                done += written.result()
                written = None
            _log_progress(log, spec.name, done, len(todo), time.monotonic() - start)
        finally:
            for pending in ahead:
                pending.cancel()
            if written is not None:
                wait([written])  # the batch before a failure is still written whole
            manifest.flush(force=True)


def _log_progress(log: Callable[[str], None], name: str, done: int, total: int, seconds: float) -> None:
    rate = done / max(seconds, 1e-9)
    eta = f"{(total - done) / rate:.0f} s" if rate > 0 else "?"
    log(f"[{name}] {done}/{total} extracted, {rate:.2f} images/s, ETA {eta}")
