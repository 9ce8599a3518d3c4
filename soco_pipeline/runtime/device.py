"""Device selection for every torch stage (backbones, matching, in-process LVLMs); torch loads on first use."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from soco_pipeline.settings import variable

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


DETERMINISTIC_CPU = "SOCO_DETERMINISTIC_CPU"


@contextmanager
def cpu_kernels() -> Iterator[None]:
    """The block's CPU kernels: with SOCO_DETERMINISTIC_CPU=1 oneDNN is off, so convolutions give the same
    result at any thread count (about 1.5x slower for CNNs; docs/reproducibility.md)."""
    import torch

    if variable(DETERMINISTIC_CPU) != "1":
        yield
        return
    with torch.backends.mkldnn.flags(enabled=False):
        yield
