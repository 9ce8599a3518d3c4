"""timm ViT-style backbones: block `layer`'s patch tokens WITHOUT the final norm, as C x h x w maps."""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import pandas as pd
import torch

from soco_pipeline.backbones.base import Backbone, BackboneContext, seeded
from soco_pipeline.backbones.checkpoint_grid import checkpoint_grid, hf_checkpoint_file, pos_embed_length
from soco_pipeline.backbones.kinds import KIND_CAPABILITIES, KIND_GLOBAL_READOUT, register_kind
from soco_pipeline.backbones.pos_embed import default_pos_embed_mode, use_hub_pos_embed
from soco_pipeline.backbones.spec import (
    BackboneSpec,
    BackboneSpecError,
    BackboneWeightsError,
    TimmOptions,
    local_path,
)
from soco_pipeline.settings import variable


class BackboneSpecTypeError(TypeError):
    """The model a spec names cannot give dense patch features."""


def resolve_local_weights(weights: str, context: BackboneContext, spec: BackboneSpec) -> Path:
    """A local weights path (relative paths against the project root), or a clear error if absent."""
    path = local_path(weights, context.project_root)
    if not path.exists():
        raise BackboneWeightsError(
            f"backbone {spec.name!r}: weights file {path} does not exist; put the checkpoint there "
            f"(or point `weights:` in {spec.source or 'the spec'} at it, or use hf:<repo id> for the "
            f"Hugging Face cache)"
        )
    return path


def hf_cache_hint(repo: str) -> str:
    """Where the Hugging Face cache is and how to fill it."""
    cache = variable("HF_HUB_CACHE") or os.path.join(
        variable("HF_HOME", os.path.expanduser("~/.cache/huggingface")), "hub"
    )
    return (
        f"the Hugging Face repo {repo!r} is not in the local cache {cache} (HF_HUB_OFFLINE=1 forbids "
        f"downloading); on a machine with internet run `huggingface-cli download {repo}` and copy the "
        f"cache folder models--{repo.replace('/', '--')} there, or set `weights:` to a local file"
    )


def own_grid_size(model_name: str, checkpoint: Path) -> dict:
    """{"img_size": grid * patch} when the checkpoint's grid is not the default, else {}."""
    import timm

    length = pos_embed_length(checkpoint)
    if length is None:
        return {}
    with torch.device("meta"):  # shapes only: no memory, no weights
        probe = timm.create_model(model_name, pretrained=False, num_classes=0, dynamic_img_size=True)
    if getattr(probe, "pos_embed", None) is None or not hasattr(probe, "patch_embed"):
        return {}
    prefix = 0 if getattr(probe, "no_embed_class", False) else int(getattr(probe, "num_prefix_tokens", 1))
    grid = checkpoint_grid(length, prefix)
    default = tuple(probe.patch_embed.grid_size)
    if grid is None or default == (grid, grid):
        return {}
    patch = probe.patch_embed.patch_size
    patch = int(patch[0] if isinstance(patch, tuple | list) else patch)
    return {"img_size": grid * patch}


@register_kind("timm")
class TimmBackbone(Backbone):
    """Any timm ViT with dense patch tokens (DINOv2, DINO, CLIP, MAE, DINOv3 ...)."""

    Options = TimmOptions
    capabilities = KIND_CAPABILITIES["timm"]
    global_readout = KIND_GLOBAL_READOUT["timm"]

    @classmethod
    def check_spec(cls, spec: BackboneSpec) -> None:
        """timm knows the model, a ViT with patch tokens, and `layer` is a block (built on `meta`)."""
        import timm

        where = spec.source or "the spec"
        if not timm.is_model(spec.model):
            close = difflib.get_close_matches(spec.model, timm.list_models(), n=3, cutoff=0.75)
            hint = f" (did you mean {', '.join(close)}?)" if close else " (timm.list_models() lists them)"
            raise BackboneSpecError(
                f"backbone {spec.name!r} ({where}): timm has no model {spec.model!r}{hint}"
            )
        not_vit = (
            f"backbone {spec.name!r} ({where}): timm model {spec.model!r} is not a ViT-style network (no patch "
            f"tokens at any input size); kind 'timm' takes ViTs such as vit_small_patch14_dinov2, for "
            f"convolutional networks use kind 'packaged'"
        )
        try:
            with torch.device("meta"):
                model = timm.create_model(spec.model, pretrained=False, num_classes=0, dynamic_img_size=True)
        except TypeError:  # e.g. ResNet.__init__() got an unexpected keyword argument 'dynamic_img_size'
            raise BackboneSpecError(not_vit) from None
        if not hasattr(model, "forward_intermediates") or not hasattr(model, "patch_embed"):
            raise BackboneSpecError(not_vit)
        n_blocks = len(getattr(model, "blocks", ()))
        layer = spec.opt("layer")
        if n_blocks and not -n_blocks <= layer < n_blocks:
            raise BackboneSpecError(
                f"backbone {spec.name!r} ({where}): layer {layer} out of range for {spec.model!r}'s {n_blocks} "
                f"blocks; use -1 .. {n_blocks - 1}"
            )

    def __init__(self, spec: BackboneSpec, context: BackboneContext | None = None):
        super().__init__(spec, context)
        import timm

        kwargs: dict = {"pretrained": False, "num_classes": 0, "dynamic_img_size": True}
        w = spec.weights
        checkpoint = None
        if w.startswith("hf:"):
            kwargs.update(pretrained=True, pretrained_cfg_overlay={"hf_hub_id": w[3:]})
            checkpoint = hf_checkpoint_file(w[3:])
        elif w not in ("none", "packaged"):
            checkpoint = resolve_local_weights(w, self.context, spec)
            kwargs.update(pretrained=True, pretrained_cfg_overlay={"file": str(checkpoint)})
        elif w == "packaged":
            raise BackboneWeightsError(f"backbone {spec.name!r}: kind timm has no packaged weights")
        try:
            if checkpoint is not None:
                kwargs.update(own_grid_size(spec.model, checkpoint))
            # Random init ('none') is seeded so a chance-floor backbone is reproducible.
            with seeded(spec.seed):
                model = timm.create_model(spec.model, **kwargs)
        except RuntimeError as e:
            if "Unknown model" in str(e):
                raise BackboneWeightsError(
                    f"backbone {spec.name!r}: timm has no model {spec.model!r}; check `model:` in "
                    f"{spec.source or 'the spec'} (timm.list_models() lists them)"
                ) from None
            raise
        except OSError as e:  # huggingface_hub's LocalEntryNotFoundError is an OSError
            if w.startswith("hf:"):
                raise BackboneWeightsError(f"backbone {spec.name!r}: {hf_cache_hint(w[3:])}") from e
            raise
        if not hasattr(model, "forward_intermediates") or not hasattr(model, "patch_embed"):
            raise BackboneSpecTypeError(
                f"backbone {spec.name!r}: timm model {spec.model!r} is not a ViT with patch tokens; "
                f"use kind 'packaged' or a ViT-style model"
            )
        mode = spec.opt("pos_embed_interpolation")
        self.pos_embed_mode = default_pos_embed_mode(spec.model) if mode == "auto" else mode
        if self.pos_embed_mode == "dinov2_hub":
            try:
                use_hub_pos_embed(model)
            except TypeError as e:
                raise BackboneSpecTypeError(
                    f"backbone {spec.name!r}: pos_embed_interpolation dinov2_hub: {e}"
                ) from None
        self.model = model.eval().to(self.device)
        patch = model.patch_embed.patch_size
        self.stride = int(patch[0] if isinstance(patch, tuple | list) else patch)
        self.multiple = self.stride
        n_blocks = len(model.blocks)
        layer = spec.opt("layer")
        if not -n_blocks <= layer < n_blocks:
            raise ValueError(
                f"backbone {spec.name!r}: layer {layer} out of range for {n_blocks} blocks; use -1 .. "
                f"{n_blocks - 1}"
            )
        self.block = layer % n_blocks
        self.offers_class_token = bool(getattr(model, "has_class_token", False))

    def forward(self, batch: torch.Tensor | None, records: pd.DataFrame, size: int) -> torch.Tensor:
        """Block `layer` patch tokens (B, C, S/p, S/p), no final norm, prefix tokens dropped."""
        feats = self.model.forward_intermediates(
            batch, indices=[self.block], norm=False, stop_early=True, intermediates_only=True
        )
        return feats[0]

    def forward_with_class_token(
        self, batch: torch.Tensor | None, records: pd.DataFrame, size: int
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Block `layer`'s patch tokens and class token (None without one)."""
        if not self.offers_class_token:
            return self.forward(batch, records, size), None
        spatial, prefix = self.model.forward_intermediates(
            batch,
            indices=[self.block],
            return_prefix_tokens=True,
            norm=False,
            stop_early=True,
            intermediates_only=True,
        )[0]
        return spatial, prefix[:, 0]
