"""A tiny random-weight Qwen2-VL built locally: a word-level tokenizer trained on the prompts (the
`tokenizers` library), the real Qwen2-VL image processor and processor, a chat template, and a model
from a config with tiny sizes. Saved with save_pretrained so the backend loads it like real weights.
Nothing is downloaded."""

from __future__ import annotations

from pathlib import Path

import torch

SPECIAL = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_tiny_qwen2_vl(folder: Path, corpus: list[str], seed: int = 0, family: str = "qwen2_vl") -> Path:
    """Write a tiny random Qwen2-VL or Qwen2.5-VL (family "qwen2_5_vl") with its tokenizer and processor to
    `folder`; returns it."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import (
        PreTrainedTokenizerFast,
        Qwen2_5_VLConfig,
        Qwen2_5_VLForConditionalGeneration,
        Qwen2_5_VLProcessor,
        Qwen2VLConfig,
        Qwen2VLForConditionalGeneration,
        Qwen2VLImageProcessor,
        Qwen2VLProcessor,
        Qwen2VLVideoProcessor,
    )

    qwen25 = family == "qwen2_5_vl"
    config_cls = Qwen2_5_VLConfig if qwen25 else Qwen2VLConfig
    model_cls = Qwen2_5_VLForConditionalGeneration if qwen25 else Qwen2VLForConditionalGeneration
    processor_cls = Qwen2_5_VLProcessor if qwen25 else Qwen2VLProcessor

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()]
    )
    trainer = trainers.WordLevelTrainer(special_tokens=["[UNK]", *SPECIAL])
    tok.train_from_iterator([*corpus, "A B C D user assistant system"], trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=SPECIAL[1:],
    )
    ids = {t: fast.convert_tokens_to_ids(t) for t in SPECIAL}
    image_processor = Qwen2VLImageProcessor(min_pixels=4 * 28 * 28, max_pixels=16 * 28 * 28)
    processor = processor_cls(
        image_processor=image_processor,
        tokenizer=fast,
        video_processor=Qwen2VLVideoProcessor(),
        chat_template=CHAT_TEMPLATE,
    )

    vision = (
        {
            "depth": 2,
            "hidden_size": 32,
            "out_hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "fullatt_block_indexes": [1],
            "window_size": 56,
        }
        if qwen25
        else {"depth": 1, "embed_dim": 32, "hidden_size": 32, "num_heads": 2, "mlp_ratio": 2}
    )
    config = config_cls(
        text_config={
            "vocab_size": len(fast),
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "max_position_embeddings": 2048,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [4, 2, 2]},
            "eos_token_id": ids["<|im_end|>"],
            "pad_token_id": ids["<|endoftext|>"],
            "bos_token_id": ids["<|im_start|>"],
        },
        vision_config={**vision, "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2},
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
    )
    torch.manual_seed(seed)
    model = model_cls(config).eval()
    model.generation_config.eos_token_id = ids["<|im_end|>"]
    model.generation_config.pad_token_id = ids["<|endoftext|>"]
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder
