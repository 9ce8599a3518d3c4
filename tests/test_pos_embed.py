"""DINOv2 through timm gives the official torch.hub model's tokens: the hub's position-embedding
interpolation, checked against a faithful re-implementation of dinov2's `interpolate_pos_encoding`."""

from __future__ import annotations

import math

import pytest
import timm
import torch
import torch.nn.functional as F

from soco_pipeline.backbones import parse_spec
from soco_pipeline.backbones.pos_embed import default_pos_embed_mode, use_hub_pos_embed
from soco_pipeline.backbones.spec import BackboneSpecError
from soco_pipeline.backbones.timm_backbone import TimmBackbone

pytestmark = pytest.mark.unit


def hub_interpolate_pos_encoding(pos_embed: torch.Tensor, patch_size: int, x: torch.Tensor, w: int, h: int):
    """facebookresearch/dinov2 vision_transformer.py `interpolate_pos_encoding` (interpolate_offset 0.1,
    interpolate_antialias False), as a function of the model's pos_embed. x: tokens with the class token;
    w, h: what the hub passes (`B, nc, w, h = x.shape` of the image, i.e. rows first)."""
    previous_dtype = x.dtype
    npatch = x.shape[1] - 1
    n = pos_embed.shape[1] - 1
    if npatch == n and w == h:
        return pos_embed
    pos_embed = pos_embed.float()
    class_pos_embed = pos_embed[:, 0]
    patch_pos_embed = pos_embed[:, 1:]
    dim = x.shape[-1]
    w0 = w // patch_size
    h0 = h // patch_size
    m = int(math.sqrt(n))
    assert n == m * m
    sx = float(w0 + 0.1) / m
    sy = float(h0 + 0.1) / m
    patch_pos_embed = F.interpolate(
        patch_pos_embed.reshape(1, m, m, dim).permute(0, 3, 1, 2),
        mode="bicubic",
        antialias=False,
        scale_factor=(sx, sy),
    )
    assert (w0, h0) == patch_pos_embed.shape[-2:]
    patch_pos_embed = patch_pos_embed.permute(0, 2, 3, 1).view(1, -1, dim)
    return torch.cat((class_pos_embed.unsqueeze(0), patch_pos_embed), dim=1).to(previous_dtype)


def hub_patch_tokens(model, images: torch.Tensor) -> torch.Tensor:
    """The hub's `prepare_tokens_with_masks` + blocks, no final norm, on the timm model's weights
    (patch embedding, class token and blocks are the same modules); L2-normalised B x C x h x w."""
    b, _, w, h = images.shape
    p = model.patch_embed.patch_size[0]
    x = model.patch_embed.proj(images).flatten(2).transpose(1, 2)
    x = torch.cat((model.cls_token.expand(b, -1, -1), x), dim=1)
    x = x + hub_interpolate_pos_encoding(model.pos_embed, p, x, w, h)
    for block in model.blocks:
        x = block(x)
    gh, gw = images.shape[-2] // p, images.shape[-1] // p
    dense = x[:, -(gh * gw) :].transpose(1, 2).reshape(b, -1, gh, gw)
    return F.normalize(dense, dim=1)


def timm_patch_tokens(model, images: torch.Tensor) -> torch.Tensor:
    """What TimmBackbone extracts: final-block tokens from forward_intermediates, no norm; L2-normalised."""
    n = len(model.blocks)
    out = model.forward_intermediates(
        images, indices=[n - 1], norm=False, stop_early=True, intermediates_only=True
    )
    return F.normalize(out[0], dim=1)


def tiny_dinov2(seed: int = 0):
    """A small random DINOv2 (timm's vit_small_patch14_dinov2 architecture, 518 px / 37 x 37 grid) with
    perturbed position embeddings, so that any interpolation difference shows."""
    torch.manual_seed(seed)
    model = timm.create_model(
        "vit_small_patch14_dinov2",
        pretrained=False,
        num_classes=0,
        dynamic_img_size=True,
        depth=2,
        embed_dim=64,
        num_heads=2,
    )
    with torch.no_grad():
        model.pos_embed.normal_(0.0, 1.0)
    return model.eval()


@pytest.mark.parametrize("size", [798, 224])
def test_hub_interpolation_gives_the_hub_models_tokens(size):
    model = tiny_dinov2()
    images = torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(size))
    with torch.inference_mode():
        hub = hub_patch_tokens(model, images)
        timm_default = timm_patch_tokens(model, images)
        use_hub_pos_embed(model)
        ours = timm_patch_tokens(model, images)
    assert ours.shape == hub.shape == (1, 64, size // 14, size // 14)
    assert (ours - hub).abs().max().item() <= 1e-6
    assert (timm_default - hub).abs().max().item() > 1e-3  # timm's own resampling is not the hub's


def test_hub_interpolation_leaves_the_pretrained_grid_alone():
    model = tiny_dinov2(1)
    images = torch.randn(1, 3, 518, 518, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        before = timm_patch_tokens(model, images)
        use_hub_pos_embed(model)
        after = timm_patch_tokens(model, images)
    assert (after - before).abs().max().item() == 0 and (
        after - hub_patch_tokens(model, images)
    ).abs().max() <= 1e-6


def test_spec_option_defaults_to_the_hub_for_dinov2_without_registers():
    assert default_pos_embed_mode("vit_base_patch14_dinov2") == "dinov2_hub"
    assert default_pos_embed_mode("vit_base_patch14_reg4_dinov2") == "timm"
    assert default_pos_embed_mode("vit_base_patch16_224.mae") == "timm"
    doc = {"kind": "timm", "model": "vit_small_patch14_dinov2", "input": {"nearest_multiple": 224}, "seed": 3}
    spec = parse_spec(doc, "tiny")
    assert spec.opt("pos_embed_interpolation") == "auto"
    backbone = TimmBackbone(spec, {"device": "cpu"})
    assert backbone.pos_embed_mode == "dinov2_hub"
    images = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        ours = F.normalize(backbone.forward(images, None, 224), dim=1)
        hub = hub_patch_tokens(backbone.model, images)
    assert (ours - hub).abs().max().item() <= 1e-6
    plain = TimmBackbone(parse_spec({**doc, "pos_embed_interpolation": "timm"}, "tiny"), {"device": "cpu"})
    assert plain.pos_embed_mode == "timm"
    with pytest.raises(BackboneSpecError, match="pos_embed_interpolation"):
        parse_spec({**doc, "pos_embed_interpolation": "bilinear"}, "tiny")
