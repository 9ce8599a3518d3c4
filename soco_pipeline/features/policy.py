"""The input policy of the global-feature output (pydantic only: configs import it without torch)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from soco_pipeline.backbones.kinds import capabilities, global_readout

GLOBAL_CODE_VERSION = "1"  # bump when the extractors change what they compute (a new cache folder follows)


class GlobalInputPolicy(BaseModel):
    """FG-BMK's eval transform; every field but `threads`, `workers` and `batch_size` is in the cache key."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    resize: int = Field(default=256, ge=8)
    crop: int = Field(default=224, ge=8)
    normalisation: Literal["clip", "imagenet", "half", "raw", "spec"] = "clip"
    final_norm: bool = True
    batch_size: int = Field(default=32, ge=1)
    dense_input: int | None = Field(default=None, ge=8)  # dense-only backbones' input side (None: their own)
    # torch CPU threads of extraction and attacks (None: torch's)
    threads: int | None = Field(default=None, ge=1)
    # a torch model's batches extracted (and FG-BMK's levels attacked) at once, each on `threads` threads:
    # what one computes does not depend on what runs beside it
    workers: int = Field(default=1, ge=1)

    def cache_key(self) -> dict:
        """The fields that change the features (threads, workers and batch size do not)."""
        return self.model_dump(exclude={"threads", "workers", "batch_size"})


def global_ignores_input(kind: str, policy: GlobalInputPolicy) -> bool:
    """Whether a backbone's global output ignores its spec's `input` (it runs at the policy's)."""
    return "blocks" in capabilities(kind) or bool(policy.dense_input)


def global_reads(fields: dict, kind: str, policy: GlobalInputPolicy) -> dict:
    """The spec fields a global-feature extraction under `policy` reads. Not `input` when it ignores it. For
    a kind with a global readout (a torch model the extractor reads itself) not `layer` (it reads the last
    blocks or stages), nor `normalisation` unless the policy's is "spec"."""
    ignored = {"input"} if global_ignores_input(kind, policy) else set()
    if global_readout(kind):
        ignored |= {"layer"} if policy.normalisation == "spec" else {"layer", "normalisation"}
    return {k: v for k, v in fields.items() if k not in ignored}


def load_global_policy(scale: str | None = None, path: str | None = None) -> GlobalInputPolicy:
    """The run's global-feature input policy: assets/global_features.yaml (or `path`) at `scale` (demo)."""
    from soco_pipeline.config import load_config_file
    from soco_pipeline.storage import PROJECT_ROOT

    source = path or PROJECT_ROOT / "assets" / "global_features.yaml"
    return load_config_file(GlobalInputPolicy, source, what="global-feature policy", scale=scale or "demo")
