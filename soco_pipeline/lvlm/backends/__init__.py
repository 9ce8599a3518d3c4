"""LVLM backends: an OpenAI-compatible HTTP client and a local transformers model.

Every backend answers a batch of ChatRequests with one Reply each and never raises for a single
failed request: the Reply carries the error (counted as wrong) and the run goes on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from soco_pipeline.lvlm.prompt import ChatRequest


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


def build_backend(spec, api_key: str | None = None) -> Backend:
    """The backend a spec names (the key, if any, only ever lives in the returned object)."""
    if spec.backend == "openai":
        from soco_pipeline.lvlm.backends.openai import OpenAIBackend

        return OpenAIBackend(spec, api_key=api_key)
    if spec.backend == "transformers":
        from soco_pipeline.lvlm.backends.transformers_backend import TransformersBackend

        return TransformersBackend.from_spec(spec)
    raise ValueError(f"LVLM spec {spec.name!r}: unknown backend {spec.backend!r}")
