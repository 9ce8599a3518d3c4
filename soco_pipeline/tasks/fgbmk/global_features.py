"""Global features per backbone: the class token of each of the last two blocks and the mean of the last
block's patch tokens, at FG-BMK's input (shorter side resized to 256 bicubic, centre crop 224, CLIP mean/std).

What each kind of backbone gives (three parts: cls_prev, cls_last, patch_mean):

- timm ViTs: block -2 and block -1 class tokens and block -1's patch-token mean (the final LayerNorm
  applied to each, like DINOv2's get_intermediate_layers, unless `final_norm: false`); a ViT without a
  class token uses its patch mean as the "class token";
- EfficientNet-Lite0 (CNN): cls_prev = the global average of the last stage (320 ch), cls_last = the pooled
  pre-logits embedding (1280 ch), patch_mean = the same (the mean of the final map's positions IS the pool);
- dense-only backbones (SIFT, SOCO oracles, diffusion): the mean of their dense map at their own protocol
  in all three parts (no blocks to read);
- `VariantOracle` (tests): a margin-scaled one-hot of the image's label plus seeded noise.

Extractors take pixels in [0, 1] (B, 3, crop, crop) and normalise inside, so attacks in pixel space
(`robustness`) differentiate through them when `differentiable` is True.

The cache sits beside the dense one: `<cache_root>/<backbone>/<spec_hash>/global_<policy_hash>/` holds
shards `part-<digest>.npy` (fp32 rows [cls_prev | cls_last | patch_mean]), `manifest.parquet` (image_id,
shard, row, checksum, width, height) and `info.json` (dims, policy). Each shard is xxh3-checksummed on
every read; extraction resumes from the images the manifest lists with a valid shard.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from soco_pipeline.backbones import BackboneSpec, spec_hash
from soco_pipeline.backbones.base import Backbone, BackboneContext, image_seed
from soco_pipeline.backbones.preprocess import NORMALISATION_PRESETS
from soco_pipeline.features.extract import load_image
from soco_pipeline.features.layout import FeatureError, checksum_matches, feature_dir, file_checksum
from soco_pipeline.storage import (
    exists,
    join,
    read_bytes,
    read_parquet,
    write_bytes_atomic,
    write_parquet_atomic,
)
from soco_pipeline.tasks.fgbmk.config import GlobalFeatureConfig

GLOBAL_CODE_VERSION = "1"
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

    def subset(self, image_ids) -> GlobalFeatures:
        """The rows of these image ids, in their order (KeyError naming a missing one)."""
        pos = pd.Index(self.image_ids).get_indexer(list(image_ids))
        if (pos < 0).any():
            missing = np.asarray(list(image_ids))[pos < 0][:5]
            raise KeyError(f"no global features for images {list(missing)}; extract them first")
        return GlobalFeatures(self.image_ids[pos], self.cls_prev[pos], self.cls_last[pos], self.patch_mean[pos])


class GlobalExtractor:
    """Pixels in [0, 1] (B, 3, crop, crop) -> (cls_prev, cls_last, patch_mean), each (B, d)."""

    name: str = "?"
    differentiable: bool = False
    device: torch.device = torch.device("cpu")

    def identity(self) -> dict:
        """What decides the outputs (hashed into the cache folder)."""
        raise NotImplementedError

    def cache_folder(self, cache_root: str, config: GlobalFeatureConfig) -> str:
        """`<cache_root>/<name>/<spec hash>/global_<policy hash>`."""
        ident = self.identity()
        # thread count does not change the features: left out, so that it does not re-extract the cache
        policy = hashlib.sha256(json.dumps({"config": config.model_dump(exclude={"threads"}), "code": GLOBAL_CODE_VERSION,
                                            "extractor": ident.get("extra", {})}, sort_keys=True,
                                           default=str).encode()).hexdigest()[:12]
        return join(feature_dir(cache_root, self.name, ident["hash"]), f"global_{policy}")

    def forward(self, pixels: torch.Tensor, records: pd.DataFrame) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The three parts for a batch (gradients flow when `differentiable`)."""
        raise NotImplementedError


@contextlib.contextmanager
def torch_threads(n: int | None):
    """Run a block with `n` torch intra-op threads (None: leave torch's setting alone). On a busy CPU, extra
    intra-op threads spin while they wait for a core: one thread is then several times faster."""
    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _normalise(pixels: torch.Tensor, preset: str) -> torch.Tensor:
    mean, std = NORMALISATION_PRESETS[preset]
    m = torch.tensor(mean, dtype=pixels.dtype, device=pixels.device).view(1, 3, 1, 1)
    s = torch.tensor(std, dtype=pixels.dtype, device=pixels.device).view(1, 3, 1, 1)
    return (pixels - m) / s


class ModelGlobal(GlobalExtractor):
    """A backbone whose torch model the extractor reads (ViT, CNN): differentiable, normalised inside."""

    differentiable = True

    def __init__(self, backbone: Backbone, config: GlobalFeatureConfig):
        self.backbone, self.model = backbone, backbone.model
        self.name, self.device = backbone.spec.name, backbone.device
        self.preset = backbone.spec.normalisation if config.normalisation == "spec" else config.normalisation

    def identity(self) -> dict:
        return {"hash": spec_hash(self.backbone.spec)}


class ViTGlobal(ModelGlobal):
    """A timm ViT's last two blocks (forward_intermediates on the built model)."""

    def __init__(self, backbone: Backbone, config: GlobalFeatureConfig):
        super().__init__(backbone, config)
        self.final_norm = config.final_norm
        n = len(self.model.blocks)
        if n < 2:
            raise ValueError(f"backbone {self.name!r} has {n} block(s); FG-BMK reads the last two")
        self.indices = [n - 2, n - 1]
        self.has_cls = bool(getattr(self.model, "has_class_token", False))

    def forward(self, pixels, records):
        out = self.model.forward_intermediates(
            _normalise(pixels.to(self.device), self.preset), indices=self.indices, return_prefix_tokens=True,
            norm=self.final_norm, intermediates_only=True)
        (sp_prev, pre_prev), (sp_last, pre_last) = out
        patch_mean = sp_last.mean(dim=(2, 3))
        if self.has_cls:
            return pre_prev[:, 0], pre_last[:, 0], patch_mean
        return sp_prev.mean(dim=(2, 3)), patch_mean, patch_mean


class CnnGlobal(ModelGlobal):
    """EfficientNet-Lite0 (timm EfficientNet): last-stage average and the pooled pre-logits embedding."""

    def forward(self, pixels, records):
        m = self.model
        x = m.bn1(m.conv_stem(_normalise(pixels.to(self.device), self.preset)))
        x = m.blocks(x)
        stage = x.mean(dim=(2, 3))
        pooled = m.forward_head(m.bn2(m.conv_head(x)), pre_logits=True)
        return stage, pooled, pooled


class DenseMeanGlobal(GlobalExtractor):
    """Any backbone with only dense maps: the mean of its map in every part, at its own input protocol or,
    with `config.dense_input`, at that input side (the backbone is then built from a copy of its spec with
    that input; the cache keeps the original spec's folder, the input size goes into the policy hash)."""

    def __init__(self, backbone: Backbone, config: GlobalFeatureConfig, spec: BackboneSpec | None = None):
        self.backbone, self.name, self.device = backbone, backbone.spec.name, backbone.device
        self.spec, self.dense_input = spec or backbone.spec, config.dense_input

    def identity(self) -> dict:
        ident = {"hash": spec_hash(self.spec)}
        return {**ident, "extra": {"dense_input": self.dense_input}} if self.dense_input else ident

    def forward(self, pixels, records):
        recs = records.reset_index(drop=True)
        if self.backbone.needs_pixels:
            imgs = [a for a in (pixels.clamp(0, 1) * 255).round().to(torch.uint8).permute(0, 2, 3, 1).cpu().numpy()]
            recs = recs.assign(width=pixels.shape[-1], height=pixels.shape[-2])
        else:  # oracles read the records (ground truth), not pixels
            imgs = [np.zeros((1, 1, 3), np.uint8)] * len(recs)
        maps = self.backbone.extract(imgs, recs)
        mean = torch.stack([m.mean(dim=(1, 2)) for m in maps])
        return mean, mean, mean


class VariantOracle(GlobalExtractor):
    """Knows each image's label: `margin` x one-hot(label column) plus seeded N(0, noise^2) per dimension.

    For tests of the metrics: with a margin well above the noise it scores 100 top-1 and mAP 100.
    """

    def __init__(self, label_column: str, num_classes: int, margin: float = 1.0, noise: float = 0.05,
                 noise_dims: int = 8, seed: int = 0):
        self.name, self.label_column, self.num_classes = "oracle_variant", label_column, num_classes
        self.margin, self.noise, self.noise_dims, self.seed = margin, noise, noise_dims, seed

    def identity(self) -> dict:
        ident = {"label": self.label_column, "classes": self.num_classes, "margin": self.margin,
                 "noise": self.noise, "dims": self.noise_dims, "seed": self.seed}
        return {"hash": hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16], "extra": ident}

    def forward(self, pixels, records):
        labels = torch.as_tensor(records[self.label_column].to_numpy(), dtype=torch.long)
        onehot = F.one_hot(labels, self.num_classes).float() * self.margin
        noise = torch.stack([
            torch.randn(self.num_classes + self.noise_dims,
                        generator=torch.Generator().manual_seed(image_seed(self.seed, i)))
            for i in records.image_id])
        feats = torch.cat([onehot, torch.zeros(len(labels), self.noise_dims)], 1) + self.noise * noise
        return feats, feats, feats


def build_extractor(spec: BackboneSpec, config: GlobalFeatureConfig,
                    context: BackboneContext | dict | None = None) -> GlobalExtractor:
    """The global extractor of a backbone spec (the backbone built once, frozen, in eval mode)."""
    from soco_pipeline.backbones import build_backbone

    if spec.kind == "timm":
        return ViTGlobal(build_backbone(spec, context), config)
    if spec.kind == "packaged":
        return CnnGlobal(build_backbone(spec, context), config)
    built = dataclasses.replace(spec, input=dataclasses.replace(spec.input, policy="nearest_multiple",
                                                                 value=config.dense_input)) \
        if config.dense_input else spec
    return DenseMeanGlobal(build_backbone(built, context), config, spec)


def load_pixels(uris: list[str], image_ids: list[str], config: GlobalFeatureConfig) -> torch.Tensor:
    """FG-BMK's eval transform before normalisation: (B, 3, crop, crop) in [0, 1].

    Shorter side resized to `resize` (bicubic, antialiased, on uint8 like PIL, so it stays in range), then the
    centre `crop` x `crop` (torchvision's centre_crop rounding).
    """
    from torchvision.transforms.v2 import functional as TF

    out = []
    for uri, iid in zip(uris, image_ids, strict=True):
        img = torch.from_numpy(np.array(load_image(uri, iid))).permute(2, 0, 1)
        img = TF.resize(img, config.resize, interpolation=TF.InterpolationMode.BICUBIC, antialias=True)
        out.append(TF.center_crop(img, [config.crop, config.crop]))
    return torch.stack(out).float().div_(255.0)


def _read_manifest(folder: str) -> pd.DataFrame:
    path = join(folder, "manifest.parquet")
    return read_parquet(path) if exists(path) else pd.DataFrame(columns=MANIFEST_COLUMNS)


def _shard_ok(folder: str, shard: str, checksum: str) -> bool:
    path = join(folder, shard)
    return exists(path) and checksum_matches(read_bytes(path), checksum)


def extract_global(extractor: GlobalExtractor, images: pd.DataFrame, cache_root: str, config: GlobalFeatureConfig,
                   log: Callable[[str], None] | None = None) -> GlobalFeatures:
    """Global features of every image (image_id, uri, width, height [+ label columns for oracles]), cached.

    Images listed in the cache manifest with a valid shard of the same size are read back; the rest are
    extracted in batches of `config.batch_size`, each batch one shard, the manifest rewritten after each
    (an interrupted run keeps every finished batch).
    """
    log = log or (lambda _m: None)
    folder = extractor.cache_folder(cache_root, config)
    images = images.reset_index(drop=True)
    if images.image_id.duplicated().any():
        raise ValueError(f"extract_global: duplicate image ids {list(images.image_id[images.image_id.duplicated()][:5])}")
    manifest = _read_manifest(folder)
    valid_shards = {s for s, c in manifest[["shard", "checksum"]].drop_duplicates().itertuples(index=False)
                    if _shard_ok(folder, s, c)}
    known = manifest[manifest.shard.isin(valid_shards)].set_index("image_id")
    same = images.image_id.isin(known.index)
    if same.any():
        k = known.loc[images.image_id[same]]
        same[same] = (k.width.to_numpy() == images.width[same].to_numpy()) & (
            k.height.to_numpy() == images.height[same].to_numpy())
    todo = images[~same.to_numpy()]
    log(f"[{extractor.name}] global features: {int(same.sum())} cached in {folder}, {len(todo)} to extract")
    rows = [manifest[manifest.shard.isin(valid_shards) & ~manifest.image_id.isin(todo.image_id)]]
    t0, dims = time.perf_counter(), None
    for start in range(0, len(todo), config.batch_size):
        recs = todo.iloc[start:start + config.batch_size]
        pixels = load_pixels(list(recs.uri), list(recs.image_id), config)
        with torch.inference_mode(), torch_threads(config.threads):
            parts = [p.float().cpu().numpy() for p in extractor.forward(pixels, recs)]
        bad = ~np.isfinite(np.concatenate(parts, 1)).all(1)
        if bad.any():
            raise FeatureError(f"backbone {extractor.name!r} gave NaN/inf global features for image "
                               f"{recs.image_id.iloc[int(np.flatnonzero(bad)[0])]!r}; check its weights and input")
        dims = [p.shape[1] for p in parts]
        buf = io.BytesIO()
        np.save(buf, np.concatenate(parts, 1).astype(np.float32), allow_pickle=False)
        data = buf.getvalue()
        shard = "part-" + hashlib.sha256("\n".join(recs.image_id).encode()).hexdigest()[:16] + ".npy"
        write_bytes_atomic(join(folder, shard), data)
        if start == 0:
            write_bytes_atomic(join(folder, "info.json"), json.dumps(
                {"backbone": extractor.name, "dims": dims, "parts": list(PARTS), "config": config.model_dump(),
                 "identity": extractor.identity(), "code_version": GLOBAL_CODE_VERSION}, default=str).encode())
        rows.append(pd.DataFrame({"image_id": recs.image_id.to_numpy(), "shard": shard, "row": np.arange(len(recs)),
                                  "checksum": file_checksum(data), "width": recs.width.to_numpy(),
                                  "height": recs.height.to_numpy()}))
        write_parquet_atomic(pd.concat(rows, ignore_index=True)[MANIFEST_COLUMNS], join(folder, "manifest.parquet"))
    if len(todo):
        dt = time.perf_counter() - t0
        log(f"[{extractor.name}] {len(todo)} images in {dt:.1f} s ({len(todo) / max(dt, 1e-9):.1f} images/s)")
    return read_global(folder, images.image_id)


def read_global(folder: str, image_ids=None) -> GlobalFeatures:
    """The cached global features of a folder (every shard xxh3-verified), in `image_ids` order if given."""
    manifest = _read_manifest(folder)
    if manifest.empty:
        raise FileNotFoundError(f"no global features cached in {folder}; run extract_global first")
    info = json.loads(read_bytes(join(folder, "info.json")))
    blocks, ids = [], []
    for shard, grp in manifest.groupby("shard", sort=True):
        data = read_bytes(join(folder, shard))
        if not checksum_matches(data, grp.checksum.iloc[0]):
            raise FeatureError(f"global features shard {join(folder, shard)} is corrupt (its bytes do not match the "
                               f"manifest checksum); delete it and extract again: only its images are recomputed")
        arr = np.load(io.BytesIO(data), allow_pickle=False)
        blocks.append(arr[grp.row.to_numpy()])
        ids.append(grp.image_id.to_numpy())
    mat = np.concatenate(blocks)
    cut = np.cumsum(info["dims"])[:-1]
    cls_prev, cls_last, patch_mean = np.split(mat, cut, axis=1)
    feats = GlobalFeatures(np.concatenate(ids).astype(object), cls_prev, cls_last, patch_mean)
    return feats.subset(image_ids) if image_ids is not None else feats
