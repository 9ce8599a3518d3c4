"""The per-backbone feature cache: dense maps extracted once per (backbone, image), fp16 on disk.

Layout under an fsspec cache root::

    <cache_root>/<backbone>/<spec_hash>/
        info.json          the normalised spec, its hash, the code version, S and stride
        manifest.parquet   FeatureManifestSchema rows (+ width, height, spec_hash)
        <image_id>.npy     fp16 C x h x w, L2-normalised over channels
        <image_id>.cls.npy fp16 C, the L2-normalised class token (timm ViTs; `cls_path` in the manifest)

`path` in the manifest is relative to the cache root. A spec change gives a new spec_hash and so a
new folder: nothing cached for another spec is touched. Extraction is resumable: an image counts
as done when the manifest has it and its file is present (and, by default, its sha256 matches);
everything else is recomputed. The manifest is flushed every few seconds and whenever extraction
stops, including on an exception, so an interrupted run loses at most the batch in flight.
"""

from __future__ import annotations

import hashlib
import io
import json
import time
import urllib.parse
from collections import OrderedDict
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd
import torch

from soco_pipeline.backbones import Backbone, BackboneContext, BackboneSpec, build_backbone, spec_hash
from soco_pipeline.backbones.spec import FEATURE_CODE_VERSION
from soco_pipeline.npy_map import map_npy
from soco_pipeline.schemas import FeatureManifestSchema, validate
from soco_pipeline.storage import (
    exists,
    filesystem,
    join,
    read_bytes,
    read_parquet,
    write_bytes_atomic,
    write_parquet_atomic,
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
]
FLUSH_SECONDS = 10.0  # manifest writes while extracting (and always when stopping)
LOG_SECONDS = 5.0  # progress lines at most this often (and at the end)


class FeatureError(RuntimeError):
    """Feature extraction failed for a named image; the message says why and what to do."""


def feature_dir(cache_root: str, backbone: str, hash_: str) -> str:
    """The cache folder of one backbone spec: <cache_root>/<backbone>/<spec_hash>."""
    return join(cache_root, backbone, hash_)


def feature_file(image_id: str) -> str:
    """The file name of an image's features (image ids are URL-quoted to be path-safe)."""
    return urllib.parse.quote(str(image_id), safe="") + ".npy"


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
    return data, hashlib.sha256(data).hexdigest()


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


def _read_manifest(folder: str) -> pd.DataFrame:
    path = join(folder, MANIFEST)
    if not exists(path):
        return pd.DataFrame(columns=MANIFEST_COLUMNS)
    df = read_parquet(path)
    return df if "cls_path" in df.columns else df.assign(cls_path="")


def _is_done(cache_root: str, row: dict | None, verify: str) -> bool:
    if row is None:
        return False
    if verify == "none":
        return True
    path = join(cache_root, row["path"])
    if not exists(path):
        return False
    return verify != "checksum" or hashlib.sha256(read_bytes(path)).hexdigest() == row["checksum"]


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
    """Extract and cache L2-normalised fp16 features of every image for one backbone spec.

    `images` holds image_id, uri, width, height, category (image_set rows). `context` is a
    BackboneContext or a dict {data_root | embedded_root, device} (oracles need the data root;
    device None/"auto" keeps the spec's choice). Only images without a
    valid cached file are computed (`verify`: "checksum" re-hashes cached files, "exists" only checks
    presence, "none" trusts the manifest). `backbone` may be passed prebuilt (it must be built from
    `spec`); otherwise it is built only if something is missing. Returns the manifest rows of the
    requested images, in their order (FeatureManifestSchema plus width, height, spec_hash).
    """
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
    manifest = _Manifest(folder, _read_manifest(folder))

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
        _run(
            spec, backbone, images.iloc[todo].reset_index(drop=True), cache_root, folder, hash_, manifest, log
        )

    out = pd.DataFrame([manifest.rows[i] for i in images.image_id], columns=MANIFEST_COLUMNS)
    validate(out, FeatureManifestSchema, f"features[{spec.name}] manifest")
    ints = ["channels", "grid_h", "grid_w", "input_size", "width", "height"]
    return out.astype({**dict.fromkeys(ints, "int64"), "stride": "float64"})


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


def _batches(images: pd.DataFrame, size: int) -> Iterable[pd.DataFrame]:
    for start in range(0, len(images), size):
        yield images.iloc[start : start + size]


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


def _run(
    spec: BackboneSpec,
    backbone: Backbone,
    todo: pd.DataFrame,
    cache_root: str,
    folder: str,
    hash_: str,
    manifest: _Manifest,
    log: Callable[[str], None],
) -> None:
    rel = "/".join([spec.name, hash_])
    batches = list(_batches(todo, spec.batch_size))
    start, done = time.monotonic(), 0
    last_log = start
    # Decode the next batch's images in a thread while the backbone runs on this one.
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(_load_batch, batches[0])
        try:
            for b, recs in enumerate(batches):
                imgs = pending.result()
                if b + 1 < len(batches):
                    pending = pool.submit(_load_batch, batches[b + 1])
                size = backbone.input_size(int(recs.width.iloc[0]), int(recs.height.iloc[0]))
                if backbone.offers_class_token:
                    feats, tokens = backbone.extract(imgs, recs, with_class_token=True)
                else:
                    feats, tokens = backbone.extract(imgs, recs), None
                tokens = tokens or [None] * len(feats)
                finite = [bool(ok) for ok in torch.stack(feats).flatten(1).isfinite().all(1)]
                for rec, f, token, ok in zip(recs.itertuples(index=False), feats, tokens, finite, strict=True):
                    if not ok:
                        raise FeatureError(
                            f"backbone {spec.name!r} produced NaN/inf features for image {rec.image_id!r}; "
                            f"check its weights and input (normalisation {spec.normalisation!r}, S={size})"
                        )
                    arr = f.to(torch.float16).numpy()
                    data, checksum = _encode(arr)
                    name = feature_file(rec.image_id)
                    write_bytes_atomic(join(folder, name), data)
                    cls_name = ""
                    if token is not None:
                        cls_name = feature_file(rec.image_id)[: -len(".npy")] + ".cls.npy"
                        write_bytes_atomic(join(folder, cls_name), _encode(token.to(torch.float16).numpy())[0])
                    c, h, w = arr.shape
                    manifest.add(
                        {
                            "backbone": spec.name,
                            "image_id": rec.image_id,
                            "channels": c,
                            "grid_h": h,
                            "grid_w": w,
                            "input_size": size,
                            "stride": size / w,
                            "path": f"{rel}/{name}",
                            "checksum": checksum,
                            "width": int(rec.width),
                            "height": int(rec.height),
                            "spec_hash": hash_,
                            "cls_path": f"{rel}/{cls_name}" if cls_name else "",
                        }
                    )
                done += len(recs)
                manifest.flush()
                now = time.monotonic()
                if now - last_log >= LOG_SECONDS or done == len(todo):
                    last_log, rate = now, done / max(now - start, 1e-9)
                    log(
                        f"[{spec.name}] {done}/{len(todo)} extracted, {rate:.2f} images/s, "
                        f"ETA {(len(todo) - done) / rate:.0f} s"
                    )
        finally:
            manifest.flush(force=True)
            pending.cancel()


class FeatureStore:
    """Read access to one backbone's cached features: `.get(image_id) -> (C x h x w float32, meta)`.

    The last `cache_items` fp16 maps read are kept in memory; every `get` returns a fresh float32 array.

    meta holds input_size (S), stride (input px per cell), grid_h, grid_w, channels, width, height.
    Maps cover the white-padded S x S square, the image at the top-left.
    """

    def __init__(self, cache_root: str, backbone: str, spec_hash: str | None = None, cache_items: int = 64):
        self.cache_root = cache_root
        self.backbone = backbone
        # A small LRU of decoded fp16 maps: matching reads a source image once per pair.
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self.cache_items = cache_items
        if spec_hash is None:
            spec_hash = self._only_hash()
        self.spec_hash = spec_hash
        self.folder = feature_dir(cache_root, backbone, spec_hash)
        manifest = _read_manifest(self.folder)
        if manifest.empty:
            raise FileNotFoundError(
                f"no features cached for backbone {backbone!r} (spec {spec_hash}) under {cache_root}; "
                f"materialize features[{backbone}] first"
            )
        self.manifest = manifest.set_index("image_id", drop=False)

    @classmethod
    def for_spec(cls, cache_root: str, spec: BackboneSpec) -> FeatureStore:
        """The store of exactly this spec (its spec_hash folder)."""
        return cls(cache_root, spec.name, spec_hash(spec))

    @classmethod
    def from_manifest(cls, cache_root: str, manifest: pd.DataFrame, cache_items: int = 64) -> FeatureStore:
        """The store of the images in a manifest extract_features returned (one backbone, one spec).

        A manifest reduced to FeatureManifestSchema's columns (no width/height/spec_hash) still works:
        the spec folder is read off `path` and the full rows come from the cached manifest.
        """
        if manifest.empty:
            raise FileNotFoundError("the feature manifest is empty: no image has cached features")
        folders = manifest.path.str.rsplit("/", n=1).str[0].unique()
        if len(folders) != 1 or folders[0].count("/") != 1:
            raise ValueError(
                f"the feature manifest must describe one backbone spec (<backbone>/<spec_hash>/...), "
                f"got folders {list(folders[:5])}"
            )
        backbone, hash_ = folders[0].split("/")
        if all(c in manifest.columns for c in MANIFEST_COLUMNS):
            store = cls.__new__(cls)
            store.cache_root, store.backbone, store.spec_hash = cache_root, backbone, hash_
            store.folder = feature_dir(cache_root, backbone, hash_)
            store.manifest = manifest[MANIFEST_COLUMNS].set_index("image_id", drop=False)
            store._cache, store.cache_items = OrderedDict(), cache_items
            return store
        store = cls(cache_root, backbone, hash_, cache_items=cache_items)
        missing = sorted(set(manifest.image_id) - set(store.manifest.index))
        if missing:
            raise FileNotFoundError(
                f"images {missing[:5]} are in the given manifest but not in {store.folder}; re-run extraction"
            )
        store.manifest = store.manifest.loc[list(manifest.image_id)]
        return store

    def _only_hash(self) -> str:
        fs, root = filesystem(join(self.cache_root, self.backbone))
        entries = fs.ls(root, detail=True) if fs.exists(root) else []
        hashes = sorted(e["name"].rstrip("/").rsplit("/", 1)[-1] for e in entries if e["type"] == "directory")
        if len(hashes) != 1:
            raise FileNotFoundError(
                f"backbone {self.backbone!r} has {len(hashes)} cached spec versions under {self.cache_root} "
                f"({hashes}); pass spec_hash or use FeatureStore.for_spec(cache_root, spec)"
            )
        return hashes[0]

    @property
    def image_ids(self) -> list[str]:
        """Image ids with cached features."""
        return list(self.manifest.index)

    def __contains__(self, image_id: str) -> bool:
        return image_id in self.manifest.index

    def __len__(self) -> int:
        return len(self.manifest)

    def meta(self, image_id: str) -> dict:
        """The grid and size facts of one image's map (no tensor read)."""
        if image_id not in self.manifest.index:
            raise KeyError(
                f"image {image_id!r} has no cached features for backbone {self.backbone!r} "
                f"(spec {self.spec_hash}); re-run extract_features with it in the image set"
            )
        metas = self.__dict__.get("_metas")
        if metas is None:  # one pass over the manifest instead of a .loc per map read
            m = self.manifest
            cols = {k: m[k].to_numpy() for k in ("input_size", "grid_h", "grid_w", "channels", "width", "height")}
            metas = self._metas = {
                iid: {"input_size": int(cols["input_size"][i]), "stride": float(stride),
                      **{k: int(cols[k][i]) for k in ("grid_h", "grid_w", "channels", "width", "height")}}
                for i, (iid, stride) in enumerate(zip(m.index, m["stride"].to_numpy(), strict=True))
            }
        return dict(metas[image_id])

    def get(self, image_id: str, verify: bool = False) -> tuple[np.ndarray, dict]:
        """(C x h x w float32 L2-normalised map, meta) of one image; `verify` re-checks the sha256."""
        arr, meta = self.get_stored(image_id, verify)
        return arr.astype(np.float32), meta

    def get_stored(self, image_id: str, verify: bool = False) -> tuple[np.ndarray, dict]:
        """The map as stored (fp16) and its meta. Read-only: a local file is memory-mapped (`map_npy`),
        not copied, and the array may be shared with the store's cache."""
        meta = self.meta(image_id)
        if not verify and image_id in self._cache:
            self._cache.move_to_end(image_id)
            return self._cache[image_id], meta
        paths = self.__dict__.get("_paths")
        if paths is None:  # one pass over the manifest instead of a .loc per map read
            paths = self._paths = dict(zip(self.manifest.index, self.manifest["path"].to_numpy(), strict=True))
        path = join(self.cache_root, paths[image_id])
        try:
            if not verify and path.startswith("/"):  # a local file: map it instead of copying it
                arr = map_npy(path)
            else:
                data = read_bytes(path)
                if verify and hashlib.sha256(data).hexdigest() != self.manifest.loc[image_id, "checksum"]:
                    raise FeatureError(
                        f"cached features of image {image_id!r} ({path}) fail their checksum; re-run extraction"
                    )
                arr = np.load(io.BytesIO(data), allow_pickle=False)
                arr.flags.writeable = False
        except (ValueError, EOFError) as e:
            raise FeatureError(
                f"cached features of image {image_id!r} ({path}) cannot be read ({e}); re-run extraction"
            ) from None
        expected = (meta["channels"], meta["grid_h"], meta["grid_w"])
        if arr.shape != expected:
            raise FeatureError(
                f"cached features of image {image_id!r} ({path}) have shape {arr.shape}, the manifest says "
                f"{expected}; re-run extraction"
            )
        if self.cache_items > 0:
            self._cache[image_id] = arr
            if len(self._cache) > self.cache_items:
                self._cache.popitem(last=False)
        return arr, meta

    @property
    def has_class_token(self) -> bool:
        """Whether every image's class token is cached (timm ViTs extracted with code version >= 2)."""
        return "cls_path" in self.manifest.columns and bool((self.manifest["cls_path"].fillna("") != "").all())

    def class_token(self, image_id: str) -> np.ndarray:
        """The cached class token (C, float32, L2-normalised) of one image; a clear error when none."""
        self.meta(image_id)
        rel = self.manifest.loc[image_id, "cls_path"] if "cls_path" in self.manifest.columns else ""
        if not isinstance(rel, str) or not rel:
            raise FeatureError(
                f"backbone {self.backbone!r} has no cached class token for image {image_id!r}: only timm ViTs "
                f"store one; use mean-pooled maps instead"
            )
        try:
            return np.load(io.BytesIO(read_bytes(join(self.cache_root, rel))), allow_pickle=False).astype(np.float32)
        except (FileNotFoundError, ValueError, EOFError) as e:
            raise FeatureError(
                f"class token of image {image_id!r} ({rel}) cannot be read ({e}); re-run extraction"
            ) from None

    def get_many(self, image_ids: Iterable[str]) -> list[tuple[np.ndarray, dict]]:
        """`get` for several images, in order."""
        return [self.get(i) for i in image_ids]
