"""The common backbone interface: RGB uint8 images in, L2-normalised C x h x w float32 maps out."""

from __future__ import annotations

import contextlib
import zlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from soco_pipeline.backbones.preprocess import InputBatch, prepare_batch, preprocess_batch
from soco_pipeline.backbones.spec import BackboneSpec, SpecFields
from soco_pipeline.runtime.device import resolve_device
from soco_pipeline.storage import PROJECT_ROOT


@dataclass(frozen=True)
class BackboneContext:
    """What a backbone may need beyond its spec: `data_root` (oracles), `device`, `project_root`."""

    data_root: str | None = None
    device: str | None = None
    project_root: Path = field(default=PROJECT_ROOT)


def as_context(context: BackboneContext | dict | None) -> BackboneContext:
    """A BackboneContext from itself, None, or a dict with data_root (alias embedded_root) and device."""
    if context is None:
        return BackboneContext()
    if isinstance(context, BackboneContext):
        return context
    if isinstance(context, dict):
        unknown = set(context) - {"data_root", "embedded_root", "device", "project_root"}
        if unknown:
            raise ValueError(
                f"backbone context: unknown keys {sorted(unknown)}; use data_root (or embedded_root), "
                f"device, project_root"
            )
        root = context.get("data_root") or context.get("embedded_root")
        device = context.get("device")
        # "auto" defers to the spec (which may pin a CPU-only backbone to cpu).
        kwargs = {
            "data_root": str(root) if root else None,
            "device": None if device in (None, "", "auto") else device,
        }
        if context.get("project_root"):
            kwargs["project_root"] = Path(context["project_root"])
        return BackboneContext(**kwargs)
    raise TypeError(f"backbone context must be a BackboneContext or a dict, got {type(context).__name__}")


def image_seed(seed: int, image_id: str) -> int:
    """A per-image seed independent of batch composition and of PYTHONHASHSEED."""
    return (int(seed) * 1_000_003 + zlib.crc32(str(image_id).encode())) % (2**63 - 1)


@contextlib.contextmanager
def seeded(seed: int):
    """Run a block under torch's global RNG seeded with `seed`, restoring the previous state after."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


class Backbone(ABC):
    """A frozen feature extractor built from a BackboneSpec; `needs_pixels = False`: no preprocessing."""

    Options: ClassVar[type[SpecFields]]
    needs_pixels: bool = True
    # What the kind offers the task families (backbones/kinds.py CAPABILITIES).
    capabilities: ClassVar[frozenset[str]] = frozenset({"pixels", "dense_maps", "global_features"})
    # How global features read its model (backbones/kinds.py GLOBAL_READOUTS; "": its dense map's mean)
    global_readout: ClassVar[str] = ""
    offers_class_token: bool = False  # True: forward_with_class_token returns a class token too

    def __init__(self, spec: BackboneSpec, context: BackboneContext | dict | None = None):
        self.spec = spec
        self.context = as_context(context)
        self.device = resolve_device(self.context.device or spec.device)
        self.stride: int = 1
        self.multiple: int = 1

    @classmethod
    def check_spec(cls, spec: BackboneSpec) -> None:
        """Checks of a parsed spec against the world (none by default); BackboneSpecError naming the fix."""
        return None

    def input_size(self, width: int, height: int) -> int:
        """The side S of the square input for an image of this size (the policies ignore W, H)."""
        return self.spec.input.size(self.multiple)

    def prepare(self, images: list[np.ndarray], records: pd.DataFrame) -> InputBatch | list:
        """The model-free input work of one batch (loader thread): an InputBatch, or the images as given."""
        if not self.needs_pixels or not images:
            return images
        size = self.input_size(int(records.width.iloc[0]), int(records.height.iloc[0]))
        return prepare_batch(images, size, self.spec.normalisation, self.device, self.spec.input.resize)

    @abstractmethod
    def forward(self, batch: torch.Tensor | None, records: pd.DataFrame, size: int) -> torch.Tensor:
        """Raw dense features (B, C, h, w) for a preprocessed batch (B, 3, S, S) on self.device."""

    def forward_with_class_token(
        self, batch: torch.Tensor | None, records: pd.DataFrame, size: int
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Dense features and the model's class token (B, C) from the same block; None when it has none."""
        return self.forward(batch, records, size), None

    def extract(
        self, images: list[np.ndarray] | InputBatch, records: pd.DataFrame, with_class_token: bool = False
    ) -> list[torch.Tensor] | tuple[list[torch.Tensor], list[torch.Tensor] | None]:
        """Dense maps of a batch: L2-normalised C x h x w float32 CPU tensors (and class tokens)."""
        records = records.reset_index(drop=True)
        if len(images) != len(records):
            raise ValueError(
                f"got {len(images)} images but {len(records)} records; pass one record per image"
            )
        if not len(images):
            return ([], None) if with_class_token else []
        size = self.input_size(int(records.width.iloc[0]), int(records.height.iloc[0]))
        batch = None
        if self.needs_pixels:
            if isinstance(images, InputBatch):
                if images.size != size:
                    raise ValueError(f"the prepared batch is at S={images.size}, these records need S={size}")
                batch = images.to(self.device)
            else:
                batch = preprocess_batch(
                    images, size, self.spec.normalisation, self.device, self.spec.input.resize
                )
        self._apply_speed_options()
        if batch is not None and self.spec.channels_last:
            batch = batch.contiguous(memory_format=torch.channels_last)
        with torch.inference_mode(), self._autocast():
            if with_class_token:
                feats, token = self.forward_with_class_token(batch, records, size)
            else:
                feats, token = self.forward(batch, records, size), None
            feats = F.normalize(feats.float(), dim=1)
            if token is not None:
                token = F.normalize(token.float(), dim=1)
        maps = list(_to_host(feats).unbind(0))
        if not with_class_token:
            return maps
        return maps, (None if token is None else list(_to_host(token).unbind(0)))

    def _autocast(self):
        """torch.autocast at the spec's precision (bf16 | fp16), or nothing for fp32."""
        if self.spec.precision == "fp32":
            return contextlib.nullcontext()
        dtype = torch.bfloat16 if self.spec.precision == "bf16" else torch.float16
        return torch.autocast(self.device.type, dtype=dtype)

    def _apply_speed_options(self) -> None:
        """On the first extract: channels_last models and a compiled forward, when the spec asks."""
        if self.__dict__.get("_speed_options_applied"):
            return
        self._speed_options_applied = True
        if self.spec.channels_last:
            for module in vars(self).values():
                if isinstance(module, torch.nn.Module):
                    module.to(memory_format=torch.channels_last)
        if self.spec.compile:
            self.forward = torch.compile(self.forward, dynamic=False)

    def describe(self) -> dict:
        """A short summary for logs and metadata."""
        return {
            "backbone": self.spec.name,
            "kind": self.spec.kind,
            "model": self.spec.model,
            "stride": self.stride,
            "input_size": self.spec.input.size(self.multiple),
            "device": str(self.device),
        }


def _to_host(feats: torch.Tensor) -> torch.Tensor:
    """A device tensor on the CPU: from CUDA through pinned memory (a non-blocking copy, then a wait)."""
    if feats.device.type != "cuda":
        return feats.cpu()
    host = feats.to("cpu", non_blocking=True)
    torch.cuda.current_stream(feats.device).synchronize()
    return host
