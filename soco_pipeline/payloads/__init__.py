"""The heavy per-model steps as payloads, `payload(inputs, log) -> PayloadResult`, run in the step's process or
as a job reporting through Dagster Pipes (docs/scaling-out.md)."""

from soco_pipeline.payloads.registry import (
    PAYLOADS,
    PayloadResult,
    frame_checksum,
    run_payload,
    table_checksum,
)

__all__ = ["PAYLOADS", "PayloadResult", "frame_checksum", "run_payload", "table_checksum"]
