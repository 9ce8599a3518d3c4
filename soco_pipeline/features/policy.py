"""The input policy of the global-feature output: how an image becomes the backbone's input, and what decides
the cache folder (pydantic only, so that configs import it without torch)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

GLOBAL_CODE_VERSION = "1"  # bump when the extractors change what they compute (a new cache folder follows)


class GlobalInputPolicy(BaseModel):
    """Resize the shorter side, centre-crop, normalise (FG-BMK's eval transform; its published values are the
    defaults); `final_norm` applies a ViT's final LayerNorm to each block read. Every field except `threads`
    and `batch_size` is part of the cache key."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    resize: int = Field(default=256, ge=8)
    crop: int = Field(default=224, ge=8)
    normalisation: Literal["clip", "imagenet", "half", "raw", "spec"] = "clip"
    final_norm: bool = True
    batch_size: int = Field(default=32, ge=1)
    dense_input: int | None = Field(default=None, ge=8)  # dense-only backbones' input side (None: their own)
    threads: int | None = Field(
        default=None, ge=1
    )  # torch CPU threads of extraction and attacks (None: torch's)

    def cache_key(self) -> dict:
        """The fields that change the features (threads and batch size do not)."""
        return self.model_dump(exclude={"threads", "batch_size"})


def load_global_policy(scale: str | None = None, path: str | None = None) -> GlobalInputPolicy:
    """The run's global-feature input policy: assets/global_features.yaml (or `path`) at `scale` (demo when
    None); an error names the file and the field."""
    from soco_pipeline.config import load_config_file
    from soco_pipeline.storage import PROJECT_ROOT

    source = path or PROJECT_ROOT / "assets" / "global_features.yaml"
    return load_config_file(GlobalInputPolicy, source, what="global-feature policy", scale=scale or "demo")
