"""Position-embedding interpolation of DINOv2 as its official torch.hub model does it."""

from __future__ import annotations

import math
import types

import torch
import torch.nn.functional as F

from soco_pipeline.backbones.spec import POS_EMBED_MODES  # noqa: E402,F401 - defined with the spec

HUB_OFFSET = 0.1  # dinov2's interpolate_offset for the models without registers


def default_pos_embed_mode(model_name: str) -> str:
    """'dinov2_hub' for timm's DINOv2 models without registers, else 'timm' ('auto' resolves to this)."""
    name = model_name.lower()
    return "dinov2_hub" if "dinov2" in name and "reg" not in name else "timm"


def hub_interpolate(
    patch_pos: torch.Tensor, grid: tuple[int, int], offset: float, antialias: bool
) -> torch.Tensor:
    """Patch position embeddings (1, M*M, C) resized to `grid` (h, w) as dinov2's hub code does (bicubic)."""
    n, dim = patch_pos.shape[1], patch_pos.shape[2]
    m = math.isqrt(n)
    if m * m != n:
        raise ValueError(f"position embeddings of {n} patches are not a square grid; cannot interpolate them")
    h, w = grid
    if (h, w) == (m, m):
        return patch_pos
    x = patch_pos.float().reshape(1, m, m, dim).permute(0, 3, 1, 2)
    if offset:
        kwargs: dict = {"scale_factor": ((h + offset) / m, (w + offset) / m)}
    else:
        kwargs = {"size": (h, w)}
    x = F.interpolate(x, mode="bicubic", antialias=antialias, **kwargs)
    if tuple(x.shape[-2:]) != (h, w):
        raise ValueError(f"hub-style interpolation gave a {tuple(x.shape[-2:])} grid, expected {(h, w)}")
    return x.permute(0, 2, 3, 1).reshape(1, h * w, dim).to(patch_pos.dtype)


def _hub_pos_embed(self, x: torch.Tensor) -> torch.Tensor:
    """timm's VisionTransformer._pos_embed for NHWC patch tokens, with the hub's interpolation."""
    to_cat = []
    if self.cls_token is not None:
        to_cat.append(self.cls_token.expand(x.shape[0], -1, -1))
    if self.reg_token is not None:
        to_cat.append(self.reg_token.expand(x.shape[0], -1, -1))
    b, h, w, c = x.shape
    prefix = 0 if self.no_embed_class else self.num_prefix_tokens
    offset, antialias = self._soco_hub_interpolation
    patch_pos = hub_interpolate(self.pos_embed[:, prefix:], (h, w), offset, antialias)
    pos_embed = torch.cat([self.pos_embed[:, :prefix], patch_pos], dim=1)
    x = x.view(b, -1, c)
    if self.no_embed_class:
        x = x + pos_embed
        if to_cat:
            x = torch.cat(to_cat + [x], dim=1)
    else:
        if to_cat:
            x = torch.cat(to_cat + [x], dim=1)
        x = x + pos_embed
    return self.pos_drop(x)


def use_hub_pos_embed(model: torch.nn.Module) -> None:
    """Make a timm ViT (dynamic_img_size=True) interpolate position embeddings as the dinov2 hub does."""
    needed = ("pos_embed", "cls_token", "reg_token", "no_embed_class", "num_prefix_tokens", "pos_drop")
    if not all(hasattr(model, a) for a in needed) or model.pos_embed is None:
        raise TypeError(
            f"{type(model).__name__} is not a timm VisionTransformer with absolute position embeddings; "
            "use pos_embed_interpolation: timm for it"
        )
    if not getattr(model, "dynamic_img_size", False):
        raise TypeError("hub-style position embeddings need a model created with dynamic_img_size=True")
    registers = model.reg_token is not None
    model._soco_hub_interpolation = (0.0, True) if registers else (HUB_OFFSET, False)
    model._pos_embed = types.MethodType(_hub_pos_embed, model)
