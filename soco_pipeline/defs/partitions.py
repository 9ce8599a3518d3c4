"""Partitions: one dynamic partition per backbone spec file in assets/backbones/ (and per LVLM spec file,
defs/lvlm.py); `partition_spec_file` finds a partition's file."""

from pathlib import Path

import dagster as dg

backbones_partitions = dg.DynamicPartitionsDefinition(name="backbones")


def partition_spec_file(folder: str, name: str, what: str, redo: str) -> Path:
    """`<folder>/<name>.yaml`, the spec file of a partition; a clear error naming the fix when it is gone.

    `what` names the kind ("backbone", "LVLM") and `redo` what the missing file prevents ("recomputed").
    """
    path = Path(folder) / f"{name}.yaml"
    if not path.exists():
        raise FileNotFoundError(
            f"{what} {name!r} has no spec file at {path}: its results stay queryable but it cannot be {redo}; "
            f"restore the file or delete the partition"
        )
    return path
