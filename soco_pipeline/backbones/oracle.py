"""Oracle backbones: Gaussian bumps at the generator's exact keypoints, to check the metrics."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from soco_pipeline.backbones.base import Backbone, BackboneContext, image_seed
from soco_pipeline.backbones.kinds import KIND_CAPABILITIES, register_kind
from soco_pipeline.backbones.spec import BackboneSpec, OracleOptions
from soco_pipeline.evaluation.geometry import scale_keypoints
from soco_pipeline.storage import join, read_parquet
from soco_pipeline.taxonomy import Taxonomy, load_taxonomy

GROUND_TRUTH = "ground_truth/keypoints.parquet"


class OracleError(ValueError):
    """An oracle backbone was asked for something only the embedded data set has."""


def oracle_channels(taxonomy: Taxonomy, mode: str) -> dict[str, int]:
    """Keypoint name -> channel: its global taxonomy index (part) or its concept's index (concept)."""
    if mode == "oracle_part":
        return {name: i for i, name in enumerate(taxonomy.keypoints)}
    concepts = {c: i for i, c in enumerate(taxonomy.concepts)}
    return {name: concepts[kp.concept] for name, kp in taxonomy.keypoints.items()}


@register_kind("oracle")
class OracleBackbone(Backbone):
    """Part-identity or concept-only oracle over the embedded data set's ground truth."""

    Options = OracleOptions

    needs_pixels = False
    # reads the SOCO part maps of the embedded data (ground_truth/keypoints.parquet), never the pixels
    capabilities = KIND_CAPABILITIES["oracle"]

    def __init__(
        self,
        spec: BackboneSpec,
        context: BackboneContext | None = None,
        taxonomy: Taxonomy | None = None,
    ):
        super().__init__(spec, context)
        self.stride = int(spec.opt("stride"))
        self.multiple = self.stride
        self.sigma = float(spec.opt("sigma"))
        self.noise = float(spec.opt("noise"))
        self.noise_channels = int(spec.opt("noise_channels"))
        taxonomy = taxonomy or load_taxonomy()
        self.channel_of = oracle_channels(taxonomy, spec.model)
        self.n_semantic = len(taxonomy.keypoints) if spec.model == "oracle_part" else len(taxonomy.concepts)
        # Optional weaker concept channels (part oracle): when the exact keypoint is not visible in the
        # target, the same-concept instances still beat the background, so CC stays ~100 as well.
        self.concept_weight = float(spec.opt("concept_weight"))
        self.concept_of = oracle_channels(taxonomy, "oracle_concept")
        if self.concept_weight > 0:
            self.channel_of_concept = {k: self.n_semantic + c for k, c in self.concept_of.items()}
            self.n_semantic += len(taxonomy.concepts)
        if not self.context.data_root:
            raise OracleError(
                f"backbone {spec.name!r}: oracle backbones only work on the embedded data set; pass its "
                f"root as the context's data_root (the folder holding {GROUND_TRUTH})"
            )
        self.gt_path = join(self.context.data_root, GROUND_TRUTH)
        self._gt: dict[str, pd.DataFrame] | None = None
        self._gt_ids: set[str] = set()

    def _ground_truth(self) -> dict[str, pd.DataFrame]:
        if self._gt is None:
            try:
                gt = read_parquet(self.gt_path, columns=["image_id", "keypoint", "x", "y", "visible"])
            except FileNotFoundError:
                raise OracleError(
                    f"backbone {self.spec.name!r}: {self.gt_path} does not exist; oracle backbones only "
                    f"work on the embedded data set (generate it with soco_pipeline.synth)"
                ) from None
            unknown = sorted(set(gt.keypoint) - set(self.channel_of))
            if unknown:
                raise OracleError(f"{self.gt_path}: keypoints {unknown[:5]} are not in the taxonomy")
            self._gt_ids = set(gt.image_id)
            gt = gt[gt.visible.astype(bool) & gt.x.notna() & gt.y.notna()]
            self._gt = {k: v for k, v in gt.groupby("image_id", sort=False)}
        return self._gt

    def forward(self, batch: torch.Tensor | None, records: pd.DataFrame, size: int) -> torch.Tensor:
        """(B, n_semantic + noise_channels, S/stride, S/stride) bump maps plus the noise floor."""
        gt = self._ground_truth()
        n = size // self.stride
        out = torch.zeros(len(records), self.n_semantic + self.noise_channels, n, n)
        cells = torch.arange(n, dtype=torch.float32)
        for b, rec in enumerate(records.itertuples(index=False)):  # per image; keypoints vectorised
            if rec.image_id not in self._gt_ids:
                raise OracleError(
                    f"backbone {self.spec.name!r}: image {rec.image_id!r} is not in {self.gt_path}; oracle "
                    f"backbones only work on the embedded data set"
                )
            kps = gt.get(rec.image_id)
            if kps is not None and len(kps):
                uv = scale_keypoints(kps[["x", "y"]].to_numpy(), np.array([rec.width, rec.height]), size)
                rc = torch.from_numpy(np.clip(np.floor(uv * n), 0, n - 1)).float()  # (K, 2) [col, row]
                d2 = (cells.view(1, n, 1) - rc[:, 1].view(-1, 1, 1)) ** 2 + (
                    cells.view(1, 1, n) - rc[:, 0].view(-1, 1, 1)
                ) ** 2
                bumps = torch.exp(-d2 / (2 * self.sigma**2))  # (K, n, n), exactly 1 at the keypoint cell
                # Each cell keeps only its nearest keypoint(s) (all of them on a tie, e.g. two keypoints
                # in one cell): a peak cell then holds no tail of a neighbouring keypoint, so the
                # concept oracle cannot tell two same-concept instances apart by their neighbours.
                bumps = bumps * (bumps >= bumps.amax(dim=0, keepdim=True))
                ch = torch.tensor([self.channel_of[k] for k in kps.keypoint], dtype=torch.long)
                flat = out[b].view(out.shape[1], n * n)
                flat.scatter_reduce_(
                    0, ch.view(-1, 1).expand(-1, n * n), bumps.view(-1, n * n), reduce="amax"
                )
                if self.concept_weight > 0:
                    cch = torch.tensor([self.channel_of_concept[k] for k in kps.keypoint], dtype=torch.long)
                    flat.scatter_reduce_(
                        0,
                        cch.view(-1, 1).expand(-1, n * n),
                        self.concept_weight * bumps.view(-1, n * n),
                        reduce="amax",
                    )
            g = torch.Generator().manual_seed(image_seed(self.spec.seed, rec.image_id))
            noise = torch.randn(self.noise_channels, n, n, generator=g)
            out[b, self.n_semantic :] = noise * (self.noise / self.noise_channels**0.5)
        return out.to(self.device)
