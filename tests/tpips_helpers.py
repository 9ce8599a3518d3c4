"""Small TPIPS configs and data for the tests (tiny scale, CPU)."""

from __future__ import annotations

from soco_pipeline.tasks.tpips.config import TpipsConfig, load_config


def tiny_config(n_triplets: int = 12, n_afc: int = 8, **sections) -> TpipsConfig:
    """The shipped config shrunk to a few triplets and 2AFC items (and any other section updates)."""
    cfg = load_config()
    return cfg.with_updates(triplets={"n": n_triplets}, afc={"n": n_afc}, **sections)


def tiny_clip_folder(path, kind: str = "clip_text_model", seed: int = 0):
    """Write a seeded random-init tiny CLIP (`clip`: text and vision towers with projections) or CLIP text tower
    (`clip_text_model`) with a byte-level CLIP tokenizer to `path`, as transformers saves them; returns path."""
    import torch
    from tokenizers import pre_tokenizers
    from transformers import CLIPConfig, CLIPModel, CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    chars = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    vocab.update({ch: len(vocab) + i for i, ch in enumerate(chars)})
    vocab.update({ch + "</w>": len(vocab) + i for i, ch in enumerate(chars)})
    tok = CLIPTokenizer(vocab=vocab, merges=[])
    text = dict(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        max_position_embeddings=32,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(seed)
    if kind == "clip":
        vision = dict(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            image_size=32,
            patch_size=16,
        )
        model = CLIPModel(CLIPConfig(text_config=text, vision_config=vision, projection_dim=24))
    else:
        model = CLIPTextModel(CLIPTextConfig(**text))
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path
