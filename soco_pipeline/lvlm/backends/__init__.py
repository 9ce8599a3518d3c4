"""LVLM backends; a failed request never raises: its Reply carries the error (counted as wrong)."""

from __future__ import annotations

from soco_pipeline.lvlm.prompt import Backend, Reply  # noqa: F401 - the types live in prompt.py (re-exported)


def build_backend(spec, api_key: str | None = None) -> Backend:
    """The backend a spec names (the key, if any, only ever lives in the returned object)."""
    if spec.backend == "openai":
        from soco_pipeline.lvlm.backends.openai import OpenAIBackend

        return OpenAIBackend(spec, api_key=api_key)
    if spec.backend == "transformers":
        from soco_pipeline.lvlm.backends.transformers_backend import TransformersBackend

        return TransformersBackend.from_spec(spec)
    raise ValueError(f"LVLM spec {spec.name!r}: unknown backend {spec.backend!r}")
