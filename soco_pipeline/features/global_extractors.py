"""The extractors of the global-feature output: pixels in [0, 1] -> cls_prev, cls_last, patch_mean."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from soco_pipeline.backbones import BackboneSpec, spec_hash
from soco_pipeline.backbones.base import Backbone, BackboneContext, image_seed
from soco_pipeline.backbones.kinds import capabilities, global_readout
from soco_pipeline.backbones.preprocess import NORMALISATION_PRESETS
from soco_pipeline.features.extract import load_image
from soco_pipeline.features.layout import feature_dir
from soco_pipeline.features.policy import GLOBAL_CODE_VERSION, GlobalInputPolicy
from soco_pipeline.storage import join

J, R = TypeVar("J"), TypeVar("R")


class GlobalExtractor:
    """Pixels in [0, 1] (B, 3, crop, crop) -> (cls_prev, cls_last, patch_mean), each (B, d)."""

    name: str = "?"
    differentiable: bool = False
    device: torch.device = torch.device("cpu")

    @property
    def concurrent_batches(self) -> bool:
        """Whether `forward` may run on two batches at once from two threads (the policy's `workers`)."""
        return False

    def identity(self) -> dict:
        """What decides the outputs (hashed into the cache folder)."""
        raise NotImplementedError

    def cache_folder(self, cache_root: str, config: GlobalInputPolicy) -> str:
        """`<cache_root>/<name>/<spec hash>/global_<policy hash>`."""
        return global_folder(cache_root, self.name, self.identity(), config)

    def forward(
        self, pixels: torch.Tensor, records: pd.DataFrame
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The three parts for a batch (gradients flow when `differentiable`)."""
        raise NotImplementedError


def global_folder(cache_root: str, name: str, identity: dict, policy: GlobalInputPolicy) -> str:
    """The cache folder of one (backbone, input policy): `<cache_root>/<name>/<spec hash>/global_<policy>`."""
    digest = hashlib.sha256(
        json.dumps(
            {
                "config": policy.cache_key(),
                "code": GLOBAL_CODE_VERSION,
                "extractor": identity.get("extra", {}),
            },
            sort_keys=True,
            default=str,
        ).encode()
    ).hexdigest()[:12]
    return join(feature_dir(cache_root, name, identity["hash"]), f"global_{digest}")


def spec_identity(spec: BackboneSpec, policy: GlobalInputPolicy) -> dict:
    """What decides a backbone's global features besides the policy: the spec hash and any `dense_input`."""
    ident = {"hash": spec_hash(spec)}
    if "blocks" in capabilities(spec.kind) or not policy.dense_input:  # global_ignores_input's two cases
        return ident
    return {**ident, "extra": {"dense_input": policy.dense_input}}


@contextlib.contextmanager
def torch_threads(n: int | None):
    """Run a block with `n` torch intra-op threads (None: as is); on a busy CPU extra threads spin."""
    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def in_order(fn: Callable[[J], R], jobs: Sequence[J], workers: int) -> Iterator[R]:
    """`fn` of each job, in job order: `workers` at a time on threads (jobs that depend on nothing running
    beside them: a torch model's batches, attacks), else one after the other in this thread."""
    if workers <= 1 or len(jobs) <= 1:
        yield from map(fn, jobs)
        return
    with ThreadPoolExecutor(max_workers=workers) as pool:  # map drops the jobs not started if one fails
        yield from pool.map(fn, jobs)


def _normalise(pixels: torch.Tensor, preset: str) -> torch.Tensor:
    mean, std = NORMALISATION_PRESETS[preset]
    m = torch.tensor(mean, dtype=pixels.dtype, device=pixels.device).view(1, 3, 1, 1)
    s = torch.tensor(std, dtype=pixels.dtype, device=pixels.device).view(1, 3, 1, 1)
    return (pixels - m) / s


class ModelGlobal(GlobalExtractor):
    """A backbone whose torch model the extractor reads (ViT, CNN): differentiable, normalised inside."""

    differentiable = True

    def __init__(self, backbone: Backbone, config: GlobalInputPolicy):
        self.backbone, self.model = backbone, backbone.model
        self.name, self.device = backbone.spec.name, backbone.device
        self.preset = backbone.spec.normalisation if config.normalisation == "spec" else config.normalisation

    def identity(self) -> dict:
        return {"hash": spec_hash(self.backbone.spec)}

    @property
    def concurrent_batches(self) -> bool:
        """A torch module on the CPU: read-only under inference mode, each batch on its own thread."""
        return self.device.type == "cpu"


def check_crop(name: str, crop: int, patch: int | tuple[int, ...]) -> None:
    """Refuse a crop that is not a multiple of a ViT's patch size, naming the nearest valid crops."""
    p = max(patch) if isinstance(patch, tuple) else int(patch)
    if crop % p == 0:
        return
    lower, upper = crop // p * p, (crop // p + 1) * p
    valid = " or ".join(str(v) for v in (lower, upper) if v >= p)
    raise ValueError(
        f"global-feature input policy: crop {crop} is not a multiple of backbone {name!r}'s patch size {p}; "
        f"use {valid} (global_features.crop in assets/fgbmk.yaml, the policy SOCO's global features share)"
    )


class ViTGlobal(ModelGlobal):
    """A timm ViT's last two blocks (forward_intermediates on the built model)."""

    def __init__(self, backbone: Backbone, config: GlobalInputPolicy):
        super().__init__(backbone, config)
        self.final_norm = config.final_norm
        n = len(self.model.blocks)
        if n < 2:
            raise ValueError(f"backbone {self.name!r} has {n} block(s); FG-BMK reads the last two")
        self.indices = [n - 2, n - 1]
        self.has_cls = bool(getattr(self.model, "has_class_token", False))
        check_crop(self.name, config.crop, self.model.patch_embed.patch_size)

    def forward(self, pixels, records):
        out = self.model.forward_intermediates(
            _normalise(pixels.to(self.device), self.preset),
            indices=self.indices,
            return_prefix_tokens=True,
            norm=self.final_norm,
            intermediates_only=True,
        )
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
    """Any backbone with only dense maps: the mean of its map in every part."""

    def __init__(self, backbone: Backbone, config: GlobalInputPolicy, spec: BackboneSpec | None = None):
        self.backbone, self.name, self.device = backbone, backbone.spec.name, backbone.device
        self.spec, self.policy = spec or backbone.spec, config

    def identity(self) -> dict:
        return spec_identity(self.spec, self.policy)

    def forward(self, pixels, records):
        recs = records.reset_index(drop=True)
        if self.backbone.needs_pixels:
            imgs = [
                a
                for a in (pixels.clamp(0, 1) * 255).round().to(torch.uint8).permute(0, 2, 3, 1).cpu().numpy()
            ]
            recs = recs.assign(width=pixels.shape[-1], height=pixels.shape[-2])
        else:  # oracles read the records (ground truth), not pixels
            imgs = [np.zeros((1, 1, 3), np.uint8)] * len(recs)
        maps = self.backbone.extract(imgs, recs)
        mean = torch.stack([m.mean(dim=(1, 2)) for m in maps])
        return mean, mean, mean


class VariantOracle(GlobalExtractor):
    """Knows each image's label: `margin` x one-hot(label) plus seeded N(0, noise^2), for tests."""

    def __init__(
        self,
        label_column: str,
        num_classes: int,
        margin: float = 1.0,
        noise: float = 0.05,
        noise_dims: int = 8,
        seed: int = 0,
    ):
        self.name, self.label_column, self.num_classes = "oracle_variant", label_column, num_classes
        self.margin, self.noise, self.noise_dims, self.seed = margin, noise, noise_dims, seed

    def identity(self) -> dict:
        ident = {
            "label": self.label_column,
            "classes": self.num_classes,
            "margin": self.margin,
            "noise": self.noise,
            "dims": self.noise_dims,
            "seed": self.seed,
        }
        return {
            "hash": hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16],
            "extra": ident,
        }

    def forward(self, pixels, records):
        labels = torch.as_tensor(records[self.label_column].to_numpy(), dtype=torch.long)
        onehot = F.one_hot(labels, self.num_classes).float() * self.margin
        noise = torch.stack(
            [
                torch.randn(
                    self.num_classes + self.noise_dims,
                    generator=torch.Generator().manual_seed(image_seed(self.seed, i)),
                )
                for i in records.image_id
            ]
        )
        feats = torch.cat([onehot, torch.zeros(len(labels), self.noise_dims)], 1) + self.noise * noise
        return feats, feats, feats


# backbones/kinds.py GLOBAL_READOUTS -> the extractor that reads a model that way
READOUTS: dict[str, type[ModelGlobal]] = {"class_tokens": ViTGlobal, "cnn_stages": CnnGlobal}


def build_global_extractor(
    spec: BackboneSpec, config: GlobalInputPolicy, context: BackboneContext | dict | None = None
) -> GlobalExtractor:
    """The global extractor of a backbone spec (the backbone built once, frozen, in eval mode)."""
    from soco_pipeline.backbones import build_backbone

    reader = READOUTS.get(global_readout(spec.kind))  # the kind's declared readout; none: the dense mean
    if reader is not None:
        return reader(build_backbone(spec, context), config)
    built = (
        dataclasses.replace(
            spec, input=dataclasses.replace(spec.input, policy="nearest_multiple", value=config.dense_input)
        )
        if config.dense_input
        else spec
    )
    return DenseMeanGlobal(build_backbone(built, context), config, spec)


def load_global_pixels(uris: list[str], image_ids: list[str], config: GlobalInputPolicy) -> torch.Tensor:
    """FG-BMK's eval transform before normalisation: shorter side to `resize` (bicubic), centre crop."""
    from torchvision.transforms.v2 import functional as TF

    out = []
    for uri, iid in zip(uris, image_ids, strict=True):
        img = torch.from_numpy(np.array(load_image(uri, iid))).permute(2, 0, 1)
        img = TF.resize(img, config.resize, interpolation=TF.InterpolationMode.BICUBIC, antialias=True)
        out.append(TF.center_crop(img, [config.crop, config.crop]))
    return torch.stack(out).float().div_(255.0)
