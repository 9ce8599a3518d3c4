"""Aspect strings -> what the learned metrics condition on: ids into a learned embedding over a closed
vocabulary (`AspectVocab`) or a frozen table of text-encoder embeddings (`AspectText`); both `encode`."""

from __future__ import annotations

from typing import Protocol

import numpy as np
import torch


def _checked(aspects) -> list[str]:
    out = [str(a) if isinstance(a, str) else a for a in aspects]  # numpy's str_ prints as np.str_('...')
    for a in out:
        if not isinstance(a, str) or not a.strip():
            raise ValueError(f"empty aspect {a!r}: the learned metrics need an aspect text such as 'colour'")
    return out


class AspectVocab:
    """Aspect strings -> ids over a closed vocabulary (the config's `aspects`)."""

    vectors = None

    def __init__(self, aspects: list[str]):
        self.aspects = _checked(aspects)
        self._ids = {a: i for i, a in enumerate(self.aspects)}

    def encode(self, aspects) -> torch.Tensor:
        """Ids of aspect strings; an empty or unseen aspect raises a ValueError naming the vocabulary."""
        out = []
        for a in _checked(aspects):
            if a not in self._ids:
                raise ValueError(
                    f"unseen aspect {a!r}: this metric embeds a closed vocabulary {self.aspects} (no "
                    f"`text_encoder` in the backbone spec); train it with the aspect in assets/tpips.yaml "
                    f"'aspects', or name a CLIP text tower in the spec"
                )
            out.append(self._ids[a])
        return torch.tensor(out, dtype=torch.long)


class TextEmbedder(Protocol):
    """What AspectText needs of a text encoder (backbones.text_encoder.TextEncoder)."""

    source: str

    def embed(self, texts: list[str]) -> np.ndarray: ...


class AspectText:
    """Aspect strings -> rows of a frozen table of text embeddings, a new text embedded on first use."""

    def __init__(self, encoder: TextEmbedder, aspects: list[str]):
        self.encoder = encoder
        self.aspects = _checked(aspects)
        self._ids: dict[str, int] = {}
        self.vectors = torch.zeros(0, 0)
        self.encode(self.aspects)

    def encode(self, aspects) -> torch.Tensor:
        """Ids of aspect strings (any non-empty text), embedding the new ones."""
        aspects = _checked(aspects)
        new = [a for a in dict.fromkeys(aspects) if a not in self._ids]
        if new:
            e = torch.as_tensor(self.encoder.embed(new), dtype=torch.float32)
            self.vectors = e if not self._ids else torch.cat([self.vectors, e])
            for a in new:
                self._ids[a] = len(self._ids)
        return torch.tensor([self._ids[a] for a in aspects], dtype=torch.long)


def aspect_encoder(spec, aspects: list[str], context=None) -> AspectVocab | AspectText:
    """AspectText over the spec's text tower when it names one, else the learned closed vocabulary."""
    if spec.text_encoder == "none":
        return AspectVocab(aspects)
    from soco_pipeline.backbones.text_encoder import TextEncoder

    return AspectText(TextEncoder(spec, context), aspects)


def describe(vocab: AspectVocab | AspectText) -> str:
    """How the aspect is embedded, for the tables' notes."""
    if isinstance(vocab, AspectText):
        return f"aspect text: {vocab.encoder.source}"
    return "aspect text: learned embedding over the vocabulary"
