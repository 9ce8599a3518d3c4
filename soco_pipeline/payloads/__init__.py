"""The heavy per-model steps as payloads: plain functions `payload(inputs, log) -> PayloadResult` that a
launcher runs in the step's process (inprocess, celery) or as a separate job that reports back through
Dagster Pipes (slurm, kubernetes: `python -m soco_pipeline.payloads.run`). See docs/scaling-out.md.
"""

from soco_pipeline.payloads.registry import (
    PAYLOADS,
    PayloadResult,
    frame_checksum,
    run_payload,
    table_checksum,
)

__all__ = ["PAYLOADS", "PayloadResult", "frame_checksum", "run_payload", "table_checksum"]
