"""Read access to one backbone's cached feature maps (`FeatureStore`), memory-mapped where local."""

from __future__ import annotations

import io
import mmap
from collections import OrderedDict
from collections.abc import Iterable

import numpy as np
import pandas as pd
from numpy.lib import format as npy_format

from soco_pipeline.backbones import BackboneSpec, spec_hash
from soco_pipeline.features.layout import (
    CHECKSUM_PREFIX,
    MANIFEST_COLUMNS,
    FeatureError,
    checksum_matches,
    feature_dir,
    read_manifest,
)
from soco_pipeline.storage import (
    filesystem,
    join,
    read_bytes,
)


def _map_local(path: str, checksum: str | None = None) -> tuple[np.ndarray, mmap.mmap | None]:
    """A local .npy file mapped read-only (and the mapping when checksummed); ValueError saying why not."""
    try:
        with open(path, "rb") as f:
            version = npy_format.read_magic(f)
            if checksum:
                read_header = (
                    npy_format.read_array_header_1_0
                    if version == (1, 0)
                    else npy_format.read_array_header_2_0
                )
                shape, fortran, dtype = read_header(f)
                offset = f.tell()
                mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except ValueError:
        raise ValueError("not a valid .npy file (no .npy header)") from None
    if checksum:
        if not checksum_matches(mm, checksum):
            raise _Corrupt("its bytes do not match the manifest checksum")
        count = int(np.prod(shape))
        if fortran or offset + count * dtype.itemsize != len(mm):
            raise ValueError("the file's size does not match its .npy header")
        return np.frombuffer(mm, dtype=dtype, count=count, offset=offset).reshape(shape), mm
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False), None
    except ValueError as e:
        if "mmap length" in str(e):
            raise ValueError("the file is truncated: shorter than its .npy header promises") from None
        raise


class _Corrupt(Exception):
    """A cached map whose bytes or values are wrong (checksum mismatch, NaN/inf)."""


def _non_finite(arr: np.ndarray) -> int:
    """How many NaN/inf values an fp16 map holds (exponent bits all set), without a float copy."""
    if arr.dtype != np.float16:
        return int(arr.size - np.isfinite(arr).sum())
    return int(np.count_nonzero((arr.view(np.uint16) & 0x7C00) == 0x7C00))


class FeatureStore:
    """Read access to one backbone's cached features, each read verified against the manifest's checksum."""

    verify_reads: bool = True

    def __init__(self, cache_root: str, backbone: str, spec_hash: str | None = None, cache_items: int = 64):
        self.cache_root = cache_root
        self.backbone = backbone
        # A small LRU of decoded fp16 maps (matching reads a source image once per pair).
        self._cache: OrderedDict[str, tuple[np.ndarray, mmap.mmap | None]] = OrderedDict()
        self.cache_items = cache_items
        if spec_hash is None:
            spec_hash = self._only_hash()
        self.spec_hash = spec_hash
        self.folder = feature_dir(cache_root, backbone, spec_hash)
        manifest = read_manifest(self.folder)
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
        """The store of the images in a manifest extract_features returned."""
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
            cols = {
                k: m[k].to_numpy() for k in ("input_size", "grid_h", "grid_w", "channels", "width", "height")
            }
            metas = self._metas = {
                iid: {
                    "input_size": int(cols["input_size"][i]),
                    "stride": float(stride),
                    **{k: int(cols[k][i]) for k in ("grid_h", "grid_w", "channels", "width", "height")},
                }
                for i, (iid, stride) in enumerate(zip(m.index, m["stride"].to_numpy(), strict=True))
            }
        return dict(metas[image_id])

    def get(self, image_id: str, verify: bool = False) -> tuple[np.ndarray, dict]:
        """(C x h x w float32 L2-normalised map, meta) of one image; `verify` also checks an old sha256."""
        arr, meta = self.get_stored(image_id, verify)
        return arr.astype(np.float32), meta

    def get_stored(self, image_id: str, verify: bool = False) -> tuple[np.ndarray, dict]:
        """The map as stored (fp16) and its meta; read-only (memory-mapped, maybe shared with the cache)."""
        meta = self.meta(image_id)
        path = join(self.cache_root, self._column("path")[image_id])
        checksum = str(self._column("checksum")[image_id] or "")
        # xxh3 checksums are verified on every read; the sha256 of older manifests only when asked.
        check = checksum if verify or (self.verify_reads and checksum.startswith(CHECKSUM_PREFIX)) else None
        if not verify and image_id in self._cache:
            arr, mapping = self._cache[image_id]
            # A hit on a memory-mapped file is hashed again: the mapping shows any write into the file.
            if check and mapping is not None and not checksum_matches(mapping, check):
                del self._cache[image_id]
                raise self._corrupt(image_id, path, "its bytes do not match the manifest checksum")
            self._cache.move_to_end(image_id)
            return arr, meta
        mapping = None
        try:
            if path.startswith("/"):  # a local file: map it instead of copying it
                arr, mapping = _map_local(path, check)
            else:
                data = read_bytes(path)
                if check and not checksum_matches(data, check):
                    raise _Corrupt("its bytes do not match the manifest checksum")
                arr = np.load(io.BytesIO(data), allow_pickle=False)
                arr.flags.writeable = False
            if not check and self.verify_reads and (bad := _non_finite(arr)):
                raise _Corrupt(f"it holds {bad} NaN/inf values")
        except _Corrupt as e:
            raise self._corrupt(image_id, path, str(e)) from None
        except (ValueError, EOFError) as e:
            raise FeatureError(
                f"cached features of image {image_id!r} ({path}) cannot be read ({e}); re-extract this "
                f"backbone (materialize feature_manifest[{self.backbone}]: only this image is recomputed)"
            ) from None
        expected = (meta["channels"], meta["grid_h"], meta["grid_w"])
        if arr.shape != expected:
            raise FeatureError(
                f"cached features of image {image_id!r} ({path}) have shape {arr.shape}, the manifest says "
                f"{expected}; re-run extraction"
            )
        if self.cache_items > 0:
            self._cache[image_id] = (arr, mapping)
            if len(self._cache) > self.cache_items:
                self._cache.popitem(last=False)
        return arr, meta

    def _corrupt(self, image_id: str, path: str, why: str, what: str = "cached features") -> FeatureError:
        """The error for a damaged cache file: what is wrong, and the re-extraction that repairs it."""
        return FeatureError(
            f"{what} of image {image_id!r} ({path}) are corrupt: {why}; re-extract this backbone "
            f"(materialize feature_manifest[{self.backbone}]: only the damaged images are recomputed)"
        )

    def _column(self, column: str) -> dict[str, str]:
        """{image id: its manifest `column`}, built once: one pass instead of a .loc per map read."""
        built = self.__dict__.setdefault("_columns", {})
        if column not in built:
            built[column] = dict(zip(self.manifest.index, self.manifest[column].to_numpy(), strict=True))
        return built[column]

    @property
    def has_class_token(self) -> bool:
        """Whether every image's class token is cached (timm ViTs extracted with code version >= 2)."""
        return "cls_path" in self.manifest.columns and bool(
            (self.manifest["cls_path"].fillna("") != "").all()
        )

    def class_token(self, image_id: str) -> np.ndarray:
        """The cached class token (C, float32, L2-normalised) of one image, verified on every read."""
        meta = self.meta(image_id)
        row = self.manifest.loc[image_id]
        rel = row["cls_path"] if "cls_path" in self.manifest.columns else ""
        if not isinstance(rel, str) or not rel:
            raise FeatureError(
                f"backbone {self.backbone!r} has no cached class token for image {image_id!r}: only timm ViTs "
                f"store one; use mean-pooled maps instead"
            )
        checksum = row["cls_checksum"] if "cls_checksum" in self.manifest.columns else ""
        checksum = checksum if isinstance(checksum, str) else ""
        path = join(self.cache_root, rel)
        try:
            data = read_bytes(path)
            if self.verify_reads and checksum and not checksum_matches(data, checksum):
                raise _Corrupt("its bytes do not match the manifest checksum")
            token = np.load(io.BytesIO(data), allow_pickle=False)
            if self.verify_reads and (bad := _non_finite(token)):
                raise _Corrupt(f"it holds {bad} NaN/inf values")
        except _Corrupt as e:
            raise self._corrupt(image_id, path, str(e), "the cached class token") from None
        except (FileNotFoundError, ValueError, EOFError) as e:
            raise FeatureError(
                f"the class token of image {image_id!r} ({path}) cannot be read ({e}); re-extract this backbone "
                f"(materialize feature_manifest[{self.backbone}]: only the damaged images are recomputed)"
            ) from None
        if token.shape != (meta["channels"],):
            raise FeatureError(
                f"the class token of image {image_id!r} ({path}) has shape {token.shape}, the manifest says "
                f"({meta['channels']},); re-extract this backbone (materialize feature_manifest[{self.backbone}])"
            )
        return token.astype(np.float32)

    def get_many(self, image_ids: Iterable[str]) -> list[tuple[np.ndarray, dict]]:
        """`get` for several images, in order."""
        return [self.get(i) for i in image_ids]
