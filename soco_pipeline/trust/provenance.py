"""The results record of one (model, family), modelled on lm-evaluation-harness's results JSON plus what
correspondence needs (input size, layer, subset rule, stage times, per-sample hashes);
assets/results_record.schema.json, docs/results.md."""

from __future__ import annotations

import datetime as _dt
import functools
import importlib.metadata
import json
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pandas as pd

from soco_pipeline.storage import PROJECT_ROOT, join, read_bytes, write_bytes_atomic
from soco_pipeline.taxonomy import ASSETS_DIR

SCHEMA_PATH = ASSETS_DIR / "results_record.schema.json"
SCHEMA_VERSION = "2"  # 2: ci95_cluster_image became ci95_cluster_image_logit (bounded)
PACKAGES = tuple(
    (
        "soco-pipeline torch timm dagster numpy pandas pyarrow duckdb scipy opencv-python-headless "
        "transformers httpx"
    ).split()
)


class RecordError(ValueError):
    """A results record does not match its schema; the message names the key."""


def package_versions(names=PACKAGES) -> dict[str, str]:
    """Installed version of each package ('not installed' when absent), plus python."""
    out = {"python": platform.python_version()}
    for n in names:
        try:
            out[n] = importlib.metadata.version(n)
        except importlib.metadata.PackageNotFoundError:
            out[n] = "not installed"
    return out


def git(root: str | Path, *args: str) -> subprocess.CompletedProcess:
    """`git -C root args`, its output captured as text (10 s at most)."""
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)


def git_revision(root: str | Path = PROJECT_ROOT) -> dict[str, Any]:
    """{'commit': sha or 'unknown', 'dirty': bool or None} of the project checkout (unknown outside one)."""
    try:
        head, status = (
            git(root, "rev-parse", "HEAD"),
            git(root, "status", "--porcelain", "--untracked-files=no"),
        )
    except (OSError, subprocess.SubprocessError):
        return {"commit": "unknown", "dirty": None}
    if head.returncode or status.returncode:
        return {"commit": "unknown", "dirty": None}
    return {"commit": head.stdout.strip() or "unknown", "dirty": status.stdout.strip() != ""}


def environment(device: str) -> dict[str, Any]:
    """Where the run happened: platform, CPU count, the torch device and the GPU (None when none)."""
    import os

    gpu = None
    try:
        import torch

        if torch.cuda.is_available():
            gpu = torch.cuda.get_device_name(0)
    except ImportError:
        pass
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "device": device,
        "gpu": gpu,
        "executable": Path(sys.executable).name,
    }


def _clean(value: Any) -> Any:
    """JSON-safe: numpy scalars to Python, NaN to None, tuples to lists, recursively."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not np.isfinite(value):
        return None
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)  # paths and other objects of a spec: their text form


def results_block(intervals: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """`results`: per metric its value and 95% CIs (stats.intervals rows of one model)."""
    out = {}
    for r in intervals.itertuples(index=False):
        out[r.metric] = {
            "value": r.value,
            "ci95_boot_category": [r.ci95_lo_boot_category, r.ci95_hi_boot_category],
            "se_cluster_image": r.se_cluster_image,
            "ci95_cluster_image_logit": [r.ci95_lo_cluster_image_logit, r.ci95_hi_cluster_image_logit],
            "n_units": r.n_units,
            "n_categories": r.n_categories,
        }
    return out


# a rebuilt record's timing
REBUILT = {"stages": {}, "source": "not recorded (rebuilt by soco export-results)"}


def build_record(
    *,
    model: str,
    family: str,
    spec: dict[str, Any],
    spec_hash: str,
    protocol: dict[str, Any],
    protocol_hash: str,
    intervals: pd.DataFrame,
    n_samples: dict[str, Any],
    subset: dict[str, Any],
    sample_hashes: dict[str, dict[str, str]],
    task_hashes: dict[str, str],
    device: str,
    input_policy: dict[str, Any] | None = None,
    timing: dict[str, Any] | None = None,
    matching_hash: str | None = None,
) -> dict[str, Any]:
    """A results record (see the module docstring), validated against the schema."""
    rec = {
        "schema_version": SCHEMA_VERSION,
        "model": model,
        "family": family,
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "git_hash": git_revision(),
        "results": results_block(intervals),
        "config": {
            "spec": spec,
            "spec_hash": spec_hash,
            "protocol": protocol,
            "protocol_hash": protocol_hash,
            "matching_hash": matching_hash,
        },
        "input": input_policy or {},
        "versions": package_versions(),
        "environment": environment(device),
        "timing": timing or {"stages": {}, "source": "not recorded"},
        "n-samples": n_samples,
        "subset": subset,
        "task_hashes": task_hashes,
        "sample_hashes": sample_hashes,
    }
    rec = _clean(rec)
    validate_record(rec)
    return rec


def load_schema() -> dict[str, Any]:
    """The record's JSON Schema (assets/results_record.schema.json)."""
    return json.loads(SCHEMA_PATH.read_text())


@functools.cache
def record_validator() -> jsonschema.protocols.Validator:
    """The schema's validator, its schema checked once per process (jsonschema.validate checks it every call)."""
    schema = load_schema()
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def validate_record(record: dict[str, Any]) -> None:
    """Raise RecordError naming the first failing key when `record` does not match the schema."""
    # what jsonschema.validate reports: the best match among the errors
    e = jsonschema.exceptions.best_match(record_validator().iter_errors(record))
    if e is not None:
        where = "/".join(str(p) for p in e.absolute_path) or "(top level)"
        raise RecordError(f"results record fails its schema at {where}: {e.message}")


def write_record(record: dict[str, Any], path: str) -> str:
    """Write a record as indented JSON, atomically; returns the path."""
    write_bytes_atomic(path, (json.dumps(record, indent=2, allow_nan=False) + "\n").encode())
    return path


def write_named_record(record: dict[str, Any], records_root: str, name: str, family: str = "") -> str:
    """Write the record of model `name` as `<records_root>/[<family>/]<name>.json`; returns the path."""
    return write_record(record, join(records_root, *([family] if family else []), f"{name}.json"))


def read_record(path: str) -> dict[str, Any]:
    """Read a record (any fsspec path); a clear error when it is not one."""
    try:
        rec = json.loads(read_bytes(path))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise RecordError(f"{path}: not a JSON results record ({e})") from None
    if not isinstance(rec, dict) or "task_hashes" not in rec:
        raise RecordError(
            f"{path}: not a results record (no task_hashes); write one with `soco export-results`"
        )
    return rec


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(d, dict):
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: d}


VOLATILE = ("date", "timing", "environment", "git_hash", "sample_hashes")


def diff_records(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Where two records differ: task hashes, differing samples, other keys (volatile ones apart)."""
    out: dict[str, Any] = {
        "same_inputs": a.get("task_hashes") == b.get("task_hashes"),
        "task_hashes": {},
        "samples": {},
        "keys": {},
        "volatile": {},
    }
    for t in sorted(set(a.get("task_hashes", {})) | set(b.get("task_hashes", {}))):
        ha, hb = a["task_hashes"].get(t), b["task_hashes"].get(t)
        if ha != hb:
            out["task_hashes"][t] = [ha, hb]
    for table in sorted(set(a.get("sample_hashes", {})) | set(b.get("sample_hashes", {}))):
        sa, sb = a.get("sample_hashes", {}).get(table, {}), b.get("sample_hashes", {}).get(table, {})
        changed = sorted(k for k in set(sa) & set(sb) if sa[k] != sb[k])
        only_a, only_b = sorted(set(sa) - set(sb)), sorted(set(sb) - set(sa))
        if changed or only_a or only_b:
            out["samples"][table] = {"changed": changed, "only_in_a": only_a, "only_in_b": only_b}
    fa = _flat({k: v for k, v in a.items() if k != "sample_hashes"})
    fb = _flat({k: v for k, v in b.items() if k != "sample_hashes"})
    for k in sorted(set(fa) | set(fb)):
        if k.startswith("task_hashes."):
            continue
        if fa.get(k) != fb.get(k):
            (out["volatile"] if k.split(".")[0] in VOLATILE else out["keys"])[k] = [fa.get(k), fb.get(k)]
    return out
