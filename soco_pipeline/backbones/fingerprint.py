"""What a backbone's results depend on, as one hash: spec, protocol, code versions, input data.

A backbone needs re-evaluation exactly when this fingerprint differs from the one its last metrics
recorded. Also lists the spec files of a folder with their content hashes (for the sensor).
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path

# The unpartitioned tables the per-backbone assets read.
DATA_ASSETS = ("taxonomy", "image_set", "keypoints", "image_pairs", "correspondences", "four_choice")


def file_hash(path: Path) -> str:
    """sha256 of a file's bytes (first 16 hex digits)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def scan_specs(folder: Path) -> tuple[dict[str, str], dict[str, str]]:
    """Valid spec files of a folder as {name: content hash}, and invalid ones as {name: error}."""
    valid, invalid = {}, {}
    for path in sorted(Path(folder).glob("*.yaml")):
        try:
            _checked(str(path), file_hash(path))
        except Exception as e:  # noqa: BLE001 - any malformed spec is reported, not raised, by the sensor
            invalid[path.stem] = str(e)
            continue
        valid[path.stem] = file_hash(path)
    return valid, invalid


@functools.lru_cache(maxsize=256)
def _checked(path: str, content_hash: str) -> None:
    """`checked_spec` once per file content: the sensor scans the folder every tick."""
    from soco_pipeline.backbones.validate import checked_spec

    checked_spec(path)


def fingerprint(
    spec_path: Path,
    data_versions: dict[str, str],
    protocol_hash: str,
    code_versions: dict[str, str] | None = None,
) -> str:
    """Hash of everything a backbone's metrics depend on: its spec file, the protocol's `version_hash()`,
    its assets' Dagster code versions and the data versions."""
    payload = {
        "spec": file_hash(spec_path),
        "protocol": protocol_hash,
        "code": dict(sorted((code_versions or {}).items())),
        "data": dict(sorted(data_versions.items())),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]
