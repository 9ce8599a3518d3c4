"""A backbone spec's text tower: unit embeddings of short texts for TPIPS; not in spec_hash."""

from __future__ import annotations

import numpy as np
import torch

from .base import BackboneContext, as_context
from .spec import BackboneSpec, BackboneWeightsError, local_path
from .timm_backbone import hf_cache_hint

TEXT_MODEL_TYPES = ("clip", "clip_text_model")


class TextEncoder:
    """A frozen CLIP text tower on the CPU; `embed` returns L2-normalised text embeddings."""

    def __init__(self, spec: BackboneSpec, context: BackboneContext | dict | None = None):
        from transformers import AutoConfig, AutoTokenizer, CLIPTextModel, CLIPTextModelWithProjection

        self.source = spec.text_encoder
        src, where = _locate(spec, as_context(context))
        try:
            config = AutoConfig.from_pretrained(src, local_files_only=True)
        except OSError as e:
            raise BackboneWeightsError(
                f"backbone {spec.name!r}: text_encoder {self.source!r}: {where}"
            ) from e
        if config.model_type not in TEXT_MODEL_TYPES:
            raise ValueError(
                f"backbone {spec.name!r}: text_encoder {self.source!r} is a {config.model_type!r} model; it must "
                f"be a CLIP model or CLIP text tower (model_type {' or '.join(TEXT_MODEL_TYPES)})"
            )
        self.projected = config.model_type == "clip"
        if self.projected:  # the text tower and its projection out of a full CLIP checkpoint
            text_config = config.text_config
            text_config.projection_dim = config.projection_dim
            model_cls, kw = CLIPTextModelWithProjection, {"config": text_config}
        else:
            model_cls, kw = CLIPTextModel, {}
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(src, local_files_only=True)
            model, info = model_cls.from_pretrained(
                src, local_files_only=True, output_loading_info=True, **kw
            )
        except OSError as e:
            raise BackboneWeightsError(
                f"backbone {spec.name!r}: text_encoder {self.source!r}: {where} (it needs the model and its "
                f"tokenizer files)"
            ) from e
        # transformers re-initialises missing or mis-shaped weights with a warning; a random tower is refused
        bad = [str(k) for k in [*info.get("missing_keys", ()), *info.get("mismatched_keys", ())]]
        if bad:
            raise BackboneWeightsError(
                f"backbone {spec.name!r}: text_encoder {self.source!r} lacks {len(bad)} text-tower weights or "
                f"has them in another shape (e.g. {bad[:3]}); point it at a complete CLIP checkpoint"
            )
        self.model = model.eval()

    @property
    def dim(self) -> int:
        """Width of the embeddings."""
        cfg = self.model.config
        return int(cfg.projection_dim if self.projected else cfg.hidden_size)

    def embed(self, texts: list[str]) -> np.ndarray:
        """(len(texts), dim) float32 unit embeddings."""
        batch = self.tokenizer(list(texts), padding=True, truncation=True, return_tensors="pt")
        with torch.no_grad():
            out = self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        e = out.text_embeds if self.projected else out.pooler_output
        e = e.float()
        return (e / e.norm(dim=-1, keepdim=True).clamp_min(1e-8)).numpy()


def _locate(spec: BackboneSpec, context: BackboneContext) -> tuple[str, str]:
    """(what from_pretrained reads, what to say when it is not there)."""
    t = spec.text_encoder
    if t.startswith("hf:"):
        return t[3:], hf_cache_hint(t[3:])
    path = local_path(t, context.project_root)
    fix = (
        f"put a transformers CLIP folder (config.json, the weights, the tokenizer files) there, or point "
        f"`text_encoder:` in {spec.source or 'the spec'} at one, or use hf:<repo id> for the Hugging Face cache"
    )
    if not path.is_dir():
        raise BackboneWeightsError(
            f"backbone {spec.name!r}: text_encoder folder {path} does not exist; {fix}"
        )
    return str(path), f"{path} is not a complete transformers folder; {fix}"


def load_text_encoder(
    spec: BackboneSpec, context: BackboneContext | dict | None = None
) -> TextEncoder | None:
    """The spec's text tower, or None when it names none."""
    return None if spec.text_encoder == "none" else TextEncoder(spec, context)
