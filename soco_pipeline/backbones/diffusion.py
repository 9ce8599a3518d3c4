"""Stable Diffusion UNet features, DIFT-style (Tang et al. 2023), through diffusers; seeded per image."""

from __future__ import annotations

import pandas as pd
import torch

from soco_pipeline.backbones.base import Backbone, BackboneContext, image_seed, seeded
from soco_pipeline.backbones.kinds import register_kind
from soco_pipeline.backbones.spec import BackboneSpec, BackboneWeightsError, DiffusionOptions
from soco_pipeline.backbones.timm_backbone import hf_cache_hint, resolve_local_weights

TINY_UNET = {
    "sample_size": 16,
    "in_channels": 4,
    "out_channels": 4,
    "block_out_channels": (32, 32, 64),
    "layers_per_block": 1,
    "down_block_types": ("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
    "up_block_types": ("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
    "cross_attention_dim": 32,
    "attention_head_dim": 8,
    "norm_num_groups": 8,
}
TINY_VAE = {
    "in_channels": 3,
    "out_channels": 3,
    "block_out_channels": (16, 32),
    "down_block_types": ("DownEncoderBlock2D", "DownEncoderBlock2D"),
    "up_block_types": ("UpDecoderBlock2D", "UpDecoderBlock2D"),
    "latent_channels": 4,
    "layers_per_block": 1,
    "norm_num_groups": 8,
}
# Stable Diffusion's training schedule (used for the tiny model; real models load theirs).
SD_SCHEDULER = {
    "num_train_timesteps": 1000,
    "beta_start": 0.00085,
    "beta_end": 0.012,
    "beta_schedule": "scaled_linear",
}
TEXT_TOKENS = 77


class _StopForward(Exception):
    """Raised by the hook once the wanted up-block has run, to skip the rest of the UNet."""


def unet_strides(vae_config, unet_config, up_ft_index: int) -> tuple[int, int]:
    """(feature stride, input multiple) in input pixels for an up-block of this VAE + UNet."""
    vae_factor = 2 ** (len(vae_config.block_out_channels) - 1)
    n_down = len(unet_config.down_block_types) - 1  # every down block but the last halves
    n_up = len(unet_config.up_block_types)
    if not 0 <= up_ft_index < n_up:
        raise ValueError(f"up_ft_index {up_ft_index} out of range: the UNet has {n_up} up blocks")
    multiple = vae_factor * 2**n_down
    return multiple // 2 ** min(up_ft_index + 1, n_up - 1), multiple


@register_kind("diffusion")
class DiffusionBackbone(Backbone):
    """DIFT features of a Stable Diffusion-style UNet (tiny random or a real checkpoint)."""

    Options = DiffusionOptions

    def __init__(self, spec: BackboneSpec, context: BackboneContext | None = None):
        super().__init__(spec, context)
        from diffusers import AutoencoderKL, DDPMScheduler, UNet2DConditionModel

        self.tokenizer = self.text_encoder = None
        w = spec.weights
        if w == "none":
            if spec.model != "tiny":
                raise BackboneWeightsError(
                    f"backbone {spec.name!r}: random init is only offered for `model: tiny`; for "
                    f"{spec.model!r} set `weights:` to a local diffusers folder or hf:<repo id>"
                )
            with seeded(spec.seed):
                self.vae = AutoencoderKL(**TINY_VAE)
                self.unet = UNet2DConditionModel(**TINY_UNET)
            self.scheduler = DDPMScheduler(**SD_SCHEDULER)
            dtype = torch.float32
        else:
            if w.startswith("hf:"):
                src, local = w[3:], False
            else:
                src, local = str(resolve_local_weights(w, self.context, spec)), True
            dtype = torch.float16 if self.device.type == "cuda" else torch.float32
            try:
                from transformers import CLIPTextModel, CLIPTokenizer

                kw = {"local_files_only": True}
                self.vae = AutoencoderKL.from_pretrained(src, subfolder="vae", torch_dtype=dtype, **kw)
                self.unet = UNet2DConditionModel.from_pretrained(
                    src, subfolder="unet", torch_dtype=dtype, **kw
                )
                self.scheduler = DDPMScheduler.from_pretrained(src, subfolder="scheduler", **kw)
                self.tokenizer = CLIPTokenizer.from_pretrained(src, subfolder="tokenizer", **kw)
                self.text_encoder = CLIPTextModel.from_pretrained(
                    src, subfolder="text_encoder", torch_dtype=dtype, **kw
                )
            except OSError as e:
                where = (
                    hf_cache_hint(src)
                    if not local
                    else f"{src} is not a complete diffusers folder (vae/, unet/, scheduler/, tokenizer/, "
                    f"text_encoder/)"
                )
                raise BackboneWeightsError(f"backbone {spec.name!r}: {where}") from e
            self.text_encoder = self.text_encoder.eval().to(self.device)
        self.vae = self.vae.eval().to(self.device)
        self.unet = self.unet.eval().to(self.device)
        self.dtype = dtype
        self.up_ft_index = int(spec.opt("up_ft_index"))
        self.t = int(spec.opt("t"))
        if self.t >= self.scheduler.config.num_train_timesteps:
            raise ValueError(
                f"backbone {spec.name!r}: t={self.t} is past the schedule's "
                f"{self.scheduler.config.num_train_timesteps} steps"
            )
        self.ensemble = int(spec.opt("ensemble"))
        self.prompt = str(spec.opt("prompt"))
        self.stride, self.multiple = unet_strides(self.vae.config, self.unet.config, self.up_ft_index)
        self._prompt_cache: dict[str, torch.Tensor] = {}

    def _embed(self, text: str) -> torch.Tensor:
        if text not in self._prompt_cache:
            if self.text_encoder is None:
                dim = self.unet.config.cross_attention_dim
                emb = torch.zeros(1, TEXT_TOKENS, dim, device=self.device, dtype=self.dtype)
            else:
                ids = self.tokenizer(
                    [text],
                    padding="max_length",
                    max_length=self.tokenizer.model_max_length,
                    truncation=True,
                    return_tensors="pt",
                ).input_ids.to(self.device)
                emb = self.text_encoder(ids)[0].to(self.dtype)
            self._prompt_cache[text] = emb
        return self._prompt_cache[text]

    def forward(self, batch: torch.Tensor | None, records: pd.DataFrame, size: int) -> torch.Tensor:
        """Ensemble-averaged up-block features (B, C, S/stride, S/stride)."""
        e = self.ensemble
        dist = self.vae.encode(batch.to(self.dtype)).latent_dist
        gens = [
            torch.Generator(device=self.device).manual_seed(image_seed(self.spec.seed, i))
            for i in records.image_id
        ]
        shape = dist.mean.shape[1:]
        eps = torch.stack(
            [torch.randn(shape, generator=g, device=self.device, dtype=self.dtype) for g in gens]
        )
        latents = (dist.mean + dist.std * eps) * self.vae.config.scaling_factor
        noise = torch.cat(
            [torch.randn((e, *shape), generator=g, device=self.device, dtype=self.dtype) for g in gens]
        )
        latents = latents.repeat_interleave(e, dim=0)
        t = torch.full((latents.shape[0],), self.t, device=self.device, dtype=torch.long)
        noisy = self.scheduler.add_noise(latents, noise, t)
        prompts = [self.prompt.replace("{category}", str(c).replace("_", " ")) for c in records.category]
        text = torch.cat([self._embed(p) for p in prompts]).repeat_interleave(e, dim=0)

        captured: list[torch.Tensor] = []

        def hook(_module, _inputs, output):
            captured.append(output)
            raise _StopForward

        handle = self.unet.up_blocks[self.up_ft_index].register_forward_hook(hook)
        try:
            self.unet(noisy, t, encoder_hidden_states=text)
        except _StopForward:
            pass
        finally:
            handle.remove()
        feats = captured[0].float()
        return feats.view(len(records), e, *feats.shape[1:]).mean(dim=1)
