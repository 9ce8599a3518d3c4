"""Prompts as VLMEvalKit's `ImageMCQDataset.build_prompt` (which SOCO's runs used), and the request types."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pandas as pd

LETTERS = "ABCD"


def build_prompts(items: pd.DataFrame) -> pd.Series:
    """VLMEvalKit's `build_prompt` text for every item row (question and A-D columns), vectorised."""
    text = "Question: " + items["question"].astype(str) + "\nOptions:\n"
    for k in LETTERS:
        text = text + f"{k}. " + items[k].astype(str) + "\n"
    return text + "Please select the correct answer from the options above. \n"


@dataclass(frozen=True)
class ChatRequest:
    """One question: image bytes (JPEG) in prompt order and the text part."""

    images: tuple[bytes, ...]
    text: str

    def image_digests(self) -> list[str]:
        """sha256 of each image (what the request hash uses instead of the bytes)."""
        return [hashlib.sha256(b).hexdigest() for b in self.images]


@dataclass(frozen=True)
class Reply:
    """A model's answer to one request: raw text, seconds taken, attempts made, error ("" = none)."""

    text: str
    latency_s: float
    attempts: int = 1
    error: str = ""


class Backend(Protocol):
    """What the runner needs: answer a batch; `max_concurrency` batches run at once."""

    max_concurrency: int
    batch_size: int

    def answer_batch(self, requests: list[ChatRequest]) -> list[Reply]:
        """One Reply per request, in order."""
        ...


def request_key(text: str, image_digests: list[str], generation: dict[str, Any]) -> str:
    """The cache key of a request: text, image digests, model, sampling (never the key or endpoint)."""
    payload = {"text": text, "images": image_digests, "generation": generation}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def openai_messages(request: ChatRequest) -> list[dict[str, Any]]:
    """Chat-completions messages: one user turn, image_url parts first, then the text part."""
    parts: list[dict[str, Any]] = [
        {
            "type": "image_url",
            "image_url": {"url": "data:image/jpeg;base64," + base64.b64encode(b).decode("ascii")},
        }
        for b in request.images
    ]
    parts.append({"type": "text", "text": request.text})
    return [{"role": "user", "content": parts}]


def decode_data_url(url: str) -> bytes:
    """The bytes of a base64 data URL (data:image/...;base64,...)."""
    head, _, body = url.partition(",")
    if not head.startswith("data:") or ";base64" not in head:
        raise ValueError(f"not a base64 data URL: {url[:40]!r}...")
    return base64.b64decode(body)


def parse_openai_messages(messages: Sequence[dict[str, Any]]) -> ChatRequest:
    """The images and text of chat-completions messages (the inverse of openai_messages)."""
    images, texts = [], []
    for msg in messages:
        content = msg.get("content")
        if isinstance(content, str):
            texts.append(content)
            continue
        for part in content or []:
            if part.get("type") == "image_url":
                url = part["image_url"]["url"] if isinstance(part["image_url"], dict) else part["image_url"]
                images.append(decode_data_url(url))
            elif part.get("type") == "text":
                texts.append(part.get("text", ""))
    return ChatRequest(tuple(images), "".join(texts))
