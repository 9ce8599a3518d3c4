"""A payload's inputs and output as files in a job folder: tables as Parquet, the rest as JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from soco_pipeline.storage import read_parquet, write_bytes_atomic, write_parquet_atomic


def write_inputs(folder: Path, inputs: dict[str, Any]) -> str:
    """Write `inputs` under `folder` (DataFrames as Parquet, the rest in inputs.json); inputs.json's path."""
    folder.mkdir(parents=True, exist_ok=True)
    plain: dict[str, Any] = {}
    for key, value in inputs.items():
        if isinstance(value, pd.DataFrame):
            path = str(folder / f"{key}.parquet")
            write_parquet_atomic(value, path)
            plain[key] = {"__parquet__": path}
        else:
            plain[key] = value
    target = folder / "inputs.json"
    write_bytes_atomic(str(target), json.dumps(plain, sort_keys=True).encode())
    return str(target)


def read_inputs(path: str) -> dict[str, Any]:
    """The inputs written by write_inputs (Parquet files read back, checksums verified)."""
    plain = json.loads(Path(path).read_text())
    return {
        k: read_parquet(v["__parquet__"]) if isinstance(v, dict) and "__parquet__" in v else v
        for k, v in plain.items()
    }
