"""The `transformers` backend: a local vision-language model, batched (left padding), greedy."""

from __future__ import annotations

import io
import threading
import time
from typing import Any

import torch
from PIL import Image

from soco_pipeline.lvlm.prompt import ChatRequest, Reply
from soco_pipeline.lvlm.specs import LvlmSpec
from soco_pipeline.settings import variable

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def chat_messages(request: ChatRequest) -> list[dict[str, Any]]:
    """One user turn in the processor's chat format: the images first, then the text."""
    content: list[dict[str, Any]] = [{"type": "image"} for _ in request.images]
    content.append({"type": "text", "text": request.text})
    return [{"role": "user", "content": content}]


class TransformersBackend:
    """A loaded model and processor; answers batches of `batch_size` requests, one batch at a time."""

    max_concurrency = 1

    def __init__(self, model, processor, spec: LvlmSpec, device: torch.device) -> None:
        self.model, self.processor, self.spec, self.device = model, processor, spec, device
        self.batch_size = spec.batch_size
        tok = getattr(processor, "tokenizer", None)
        if tok is not None:
            tok.padding_side = "left"  # generation continues each row at its end
        self._lock = threading.Lock()

    @classmethod
    def from_spec(cls, spec: LvlmSpec) -> TransformersBackend:
        """Load the spec's model (a local folder or an id in the HF cache) on its device and dtype."""
        from transformers import AutoModelForImageTextToText, AutoProcessor

        from soco_pipeline.runtime.device import resolve_device

        device = resolve_device(spec.device)
        offline = variable("HF_HUB_OFFLINE") not in ("", "0")
        dtype = _DTYPES.get(spec.dtype, torch.bfloat16 if device.type == "cuda" else torch.float32)
        try:
            processor = AutoProcessor.from_pretrained(spec.model, local_files_only=offline)
            model = AutoModelForImageTextToText.from_pretrained(
                spec.model, dtype=dtype, local_files_only=offline
            )
        except OSError as e:
            raise RuntimeError(
                f"LVLM {spec.name!r}: cannot load {spec.model!r} ({e}); give a local folder as `model`, or put the "
                f"weights in the Hugging Face cache first (huggingface-cli download {spec.model})"
            ) from None
        model.to(device).eval()
        return cls(model, processor, spec, device)

    def _generate(self, requests: list[ChatRequest]) -> list[str]:
        proc = self.processor
        texts = [
            proc.apply_chat_template(chat_messages(r), tokenize=False, add_generation_prompt=True)
            for r in requests
        ]
        images = [[Image.open(io.BytesIO(b)).convert("RGB") for b in r.images] for r in requests]
        kwargs: dict[str, Any] = {"text": texts, "padding": True, "return_tensors": "pt"}
        if any(images):
            kwargs["images"] = images
        inputs = proc(**kwargs).to(self.device)
        sample = self.spec.temperature > 0
        gen: dict[str, Any] = {"max_new_tokens": self.spec.max_tokens, "do_sample": sample}
        if sample:
            gen["temperature"] = self.spec.temperature
            torch.manual_seed(self.spec.seed)
        tok = getattr(proc, "tokenizer", proc)
        if getattr(tok, "pad_token_id", None) is not None:
            gen["pad_token_id"] = tok.pad_token_id
        with torch.inference_mode():
            out = self.model.generate(**inputs, **gen)
        new = out[:, inputs["input_ids"].shape[1] :]
        return [t.strip() for t in proc.batch_decode(new, skip_special_tokens=True)]

    def answer_batch(self, requests: list[ChatRequest]) -> list[Reply]:
        """Answer a batch in one generate call; a failure is recorded on every request of the batch."""
        t0 = time.perf_counter()
        try:
            with self._lock:
                texts = self._generate(requests)
        except Exception as e:  # noqa: BLE001 - recorded per row (counted wrong); the run goes on
            dt = time.perf_counter() - t0
            return [Reply("", dt / len(requests), 1, f"{type(e).__name__}: {e}"[:500]) for _ in requests]
        dt = (time.perf_counter() - t0) / len(requests)
        return [Reply(t, dt, 1) for t in texts]
