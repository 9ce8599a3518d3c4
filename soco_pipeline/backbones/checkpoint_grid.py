"""The position-embedding grid a ViT checkpoint was saved at (only the tensor's shape is read)."""

from __future__ import annotations

import math
from pathlib import Path

import torch

# Where the position embeddings sit in the checkpoint layouts timm loads (timm, DINOv2 hub, OpenCLIP).
POS_EMBED_KEYS = ("pos_embed", "visual.trunk.pos_embed", "module.visual.trunk.pos_embed")
STATE_DICT_WRAPPERS = ("state_dict", "model", "state_dict_ema")


def pos_embed_length(path: str | Path) -> int | None:
    """The number of position embeddings (tokens) stored in a checkpoint file; None when it has none."""
    path = Path(path)
    if path.suffix == ".safetensors":
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as f:
            keys = set(f.keys())
            for key in POS_EMBED_KEYS:
                if key in keys:
                    return int(f.get_slice(key).get_shape()[-2])
        return None
    state = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
    for wrapper in STATE_DICT_WRAPPERS:
        if isinstance(state, dict) and isinstance(state.get(wrapper), dict):
            state = state[wrapper]
    if not isinstance(state, dict):
        return None
    for key in POS_EMBED_KEYS:
        t = state.get(key)
        if isinstance(t, torch.Tensor) and t.ndim == 3:
            return int(t.shape[-2])
    return None


def checkpoint_grid(length: int, prefix_tokens: int) -> int | None:
    """The side m of the square grid of `length` stored embeddings, prefix tokens taken off (m * m)."""
    for prefix in dict.fromkeys((prefix_tokens, 1, 0)):
        n = length - prefix
        if n > 0 and math.isqrt(n) ** 2 == n:
            return math.isqrt(n)
    return None


def hf_checkpoint_file(repo: str) -> Path | None:
    """The cached weights file of a Hugging Face repo (safetensors first), or None when not cached."""
    from huggingface_hub import try_to_load_from_cache

    for name in ("model.safetensors", "pytorch_model.bin", "open_clip_model.safetensors"):
        hit = try_to_load_from_cache(repo, name)
        if isinstance(hit, str):
            return Path(hit)
    return None
