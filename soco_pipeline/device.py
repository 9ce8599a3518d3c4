"""Device selection for every torch stage (backbones, matching, in-process LVLMs); torch loads on first use."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def resolve_device(requested: str) -> torch.device:
    """'auto' -> CUDA when available, else CPU; anything else as given (with a clear error if absent)."""
    import torch

    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if requested.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(
            f"device {requested!r} requested but CUDA is not available; set `device: auto` or `cpu`"
        )
    return torch.device(requested)
