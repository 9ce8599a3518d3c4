"""The heavy per-model steps as payloads, run in the step's process or as a job (docs/scaling-out.md)."""

from soco_pipeline.payloads.registry import (
    PAYLOADS,
    PayloadResult,
    frame_checksum,
    run_payload,
    table_checksum,
)

__all__ = ["PAYLOADS", "PayloadResult", "frame_checksum", "run_payload", "table_checksum"]
