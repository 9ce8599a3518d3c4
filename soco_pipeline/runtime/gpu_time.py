"""GPU time of a pipeline stage for the results record's `timing` (docs/results.md): CUDA events around the
stage's device work; elsewhere `gpu_s` is None and `gpu_s_reason` says why."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

NOT_RECORDED = "not recorded by this stage (no device work in it, or materialized before GPU timing)"


@dataclass
class GpuTime:
    """The GPU seconds of a stage, or None with the reason."""

    gpu_s: float | None = None
    reason: str | None = "the stage has not finished"

    def metadata(self) -> dict[str, Any]:
        """As materialization metadata: {'gpu_s': seconds or None, 'gpu_s_reason': text or None}."""
        return {"gpu_s": self.gpu_s, "gpu_s_reason": self.reason}


@contextlib.contextmanager
def gpu_timer(device: str | torch.device) -> Iterator[GpuTime]:
    """Time the `with` body's device work on `device` (or 'remote:<x>'): seconds on CUDA, else the reason."""
    import torch

    from soco_pipeline.runtime.device import resolve_device

    out = GpuTime()
    if isinstance(device, str) and device.startswith("remote:"):  # an LVLM behind an API (remote:openai)
        yield out
        out.reason = f"the model ran remotely ({device}): no local GPU time"
        return
    dev = resolve_device(device) if isinstance(device, str) else torch.device(device)
    if dev.type != "cuda":
        yield out
        out.reason = f"the stage ran on {dev.type}, not CUDA: no GPU time"
        return
    torch.cuda.synchronize(dev)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record(torch.cuda.current_stream(dev))
    yield out
    torch.cuda.synchronize(dev)
    end.record(torch.cuda.current_stream(dev))
    end.synchronize()
    out.gpu_s, out.reason = start.elapsed_time(end) / 1000.0, None


def stage_timing_entry(
    wall_s: float | None, metadata: Mapping[str, Any], run_id: str | None
) -> dict[str, Any]:
    """One stage of the record's `timing.stages` from the stage's metadata (`GpuTime.metadata`'s keys)."""
    gpu_s, reason = metadata.get("gpu_s"), metadata.get("gpu_s_reason")
    gpu_s = float(gpu_s) if gpu_s is not None else None
    if gpu_s is None and not reason:
        reason = NOT_RECORDED
    return {"wall_s": wall_s, "gpu_s": gpu_s, "gpu_s_reason": reason, "run_id": run_id}
