"""Dense SIFT: OpenCV SIFT descriptors of upright keypoints on a stride x stride grid of the grey image."""

from __future__ import annotations

import cv2
import numpy as np
import pandas as pd
import torch

from soco_pipeline.backbones.base import Backbone, BackboneContext
from soco_pipeline.backbones.kinds import register_kind
from soco_pipeline.backbones.preprocess import NORMALISATION_PRESETS
from soco_pipeline.backbones.spec import BackboneSpec, SiftOptions


@register_kind("classical")
class DenseSiftBackbone(Backbone):
    """Dense SIFT on a stride-`stride` grid of the S x S input: 128 x S/stride x S/stride."""

    Options = SiftOptions

    def __init__(self, spec: BackboneSpec, context: BackboneContext | None = None):
        super().__init__(spec, context)
        self.stride = int(spec.opt("stride"))
        self.multiple = self.stride
        self.descriptor_size = float(spec.opt("descriptor_size"))
        self.sift = cv2.SIFT_create()
        self._grid: dict[int, tuple] = {}

    def _keypoints(self, size: int) -> tuple:
        if size not in self._grid:
            n = size // self.stride
            # Pixel centres are at integer coordinates in OpenCV: cell i spans [i*s - 0.5, (i+1)*s - 0.5).
            centres = (np.arange(n, dtype=np.float32) + 0.5) * self.stride - 0.5
            yy, xx = np.meshgrid(centres, centres, indexing="ij")
            pts = np.stack([xx.ravel(), yy.ravel()], axis=1)
            # KeyPoint.convert builds all grid keypoints in one call; it sets angle -1, which SIFT
            # would read as a 1-degree rotation, so the (cached, once per size) loop sets 0.
            kps = cv2.KeyPoint.convert(pts, self.descriptor_size)
            for k in kps:
                k.angle = 0.0
            self._grid[size] = (kps, n)
        return self._grid[size]

    def forward(self, batch: torch.Tensor | None, records: pd.DataFrame, size: int) -> torch.Tensor:
        """128-d SIFT descriptors per grid cell, (B, 128, S/stride, S/stride)."""
        kps, n = self._keypoints(size)
        # Grey in [0, 255] from the normalised batch: undo the preset, then ITU-R 601 luma like OpenCV.
        mean, std = NORMALISATION_PRESETS[self.spec.normalisation]
        rgb = batch * torch.tensor(std, device=batch.device).view(1, 3, 1, 1) + torch.tensor(
            mean, device=batch.device
        ).view(1, 3, 1, 1)
        weights = torch.tensor([0.299, 0.587, 0.114], device=batch.device).view(1, 3, 1, 1)
        grey = ((rgb * weights).sum(1) * 255.0).round().clamp(0, 255).to(torch.uint8).cpu().numpy()
        out = []
        for img in grey:  # one OpenCV call per image
            got, desc = self.sift.compute(img, kps)
            if desc is None or len(got) != len(kps):
                raise RuntimeError(
                    f"backbone {self.spec.name!r}: OpenCV SIFT returned {0 if desc is None else len(got)} "
                    f"of {len(kps)} grid descriptors; lower descriptor_size or check the input size"
                )
            out.append(desc.reshape(n, n, 128).transpose(2, 0, 1))
        return torch.from_numpy(np.stack(out)).float()
