"""Whether another protocol may re-score stored predictions: a `MATCHING_KNOBS` knob changes the predictions
and is refused (re-run them); scoring knobs re-score, and the record keeps the stored matching hash."""

from __future__ import annotations

import json
from pathlib import Path

from soco_pipeline.evaluation.protocol import (
    MATCHING_KNOBS,
    ProtocolConfig,
    ProtocolError,
    load_protocol,
    parse_protocol,
)
from soco_pipeline.settings import Settings
from soco_pipeline.storage import exists, join, read_bytes


def stored_protocol(
    storage_root: str, backbone: str, run_protocol_path: str | None
) -> tuple[ProtocolConfig, str]:
    """(the protocol of a backbone's stored predictions, where read): its record's, else the run's file."""
    rec = join(storage_root, "results", "records", f"{backbone}.json")
    if exists(rec):
        doc = json.loads(read_bytes(rec))["config"]["protocol"]
        return parse_protocol(doc, source=rec), f"the stored record {rec}"
    path = run_protocol_path or "assets/protocol.yaml"
    return load_protocol(run_protocol_path), f"the run's protocol ({path})"


def rescoring_protocol(
    requested_path: str | Path, stored: ProtocolConfig, stored_from: str, backbone: str
) -> ProtocolConfig:
    """The protocol at `requested_path` if it changes scoring knobs of `stored` only, else ProtocolError."""
    requested = load_protocol(requested_path)
    changed = {
        k: (getattr(stored, k), getattr(requested, k))
        for k in MATCHING_KNOBS
        if getattr(stored, k) != getattr(requested, k)
    }
    if changed:
        knobs = ", ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in changed.items())
        raise ProtocolError(
            f"--protocol {requested_path}: {knobs} would change the predictions of {backbone!r}, which were made "
            f"under {stored_from}; re-scoring cannot re-predict. Re-run predictions under that protocol (point "
            f"the run's protocol_path, or assets/protocol.yaml, at it and materialize predictions[{backbone}] "
            f"and its metrics), then export or compare; or drop those knobs from {requested_path} to re-score "
            f"with its scoring knobs only"
        )
    return requested


def checked_protocol(settings: Settings, backbone: str, protocol_path: str | None) -> ProtocolConfig:
    """The protocol to re-score with: the stored one, or `protocol_path` where it changes no prediction
    knob."""
    stored, where = stored_protocol(settings.storage_root, backbone, settings.protocol_path)
    return stored if protocol_path is None else rescoring_protocol(protocol_path, stored, where, backbone)
