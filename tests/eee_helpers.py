"""Every Eval Ever records checked with the package's own validator: `every-eval-ever` 0.3.0 needs Python
3.12 and is not installed, but its validator (pydantic models generated from its schemas) runs on the
project's 3.11; `make install` unpacks the wheel under the venv (trust/eee_export.schema_dir) and the
tests import it from there."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from soco_pipeline.trust.eee_export import schema_dir, schema_path
from tests.needs import in_ci, need

SOCO = Path(sys.executable).with_name("soco")  # the console script beside this interpreter


def eee_validation_core():
    """The package's `every_eval_ever.validator.validation_core`, imported from the unpacked wheel (the test
    fails under CI and skips elsewhere when `make install` has not unpacked it)."""
    need(
        schema_path("aggregate").is_file(), f"every-eval-ever 0.3.0 unpacked at {schema_dir()} (make install)"
    )
    if str(schema_dir()) not in sys.path:
        sys.path.insert(0, str(schema_dir()))
    return importlib.import_module("every_eval_ever.validator.validation_core")


def eee_checked_here() -> bool:
    """For a test whose subject is something else (a family's pipeline) and that also checks its Every Eval
    Ever export: True when the unpacked wheel is here; else a warning and False (the rest of the test goes
    on), or a failure under CI (.ci/run's `make test` unpacks it)."""
    if schema_path("aggregate").is_file():
        return True
    where = f"every-eval-ever 0.3.0 unpacked at {schema_dir()} (make install)"
    if in_ci():
        pytest.fail(f"{where} is missing under CI=true (.ci/run's make test unpacks it)")
    warnings.warn(f"Every Eval Ever export not checked: no {where}", stacklevel=2)
    return False


def validated_eee(out: Path) -> tuple[list[dict], dict[str, list[dict]]]:
    """Validate every record under `out`/data with the package's validator, its repository checks included
    (path layout, the sidecar beside its aggregate, scores within bounds, deployment fields): no error and no
    warning. Returns (the aggregate records, {sidecar path: its instance records})."""
    vc = eee_validation_core()
    files = sorted(p for p in (out / "data").rglob("*") if p.suffix in (".json", ".jsonl"))
    assert files, f"no record under {out}/data"
    available = frozenset(p.relative_to(out).as_posix() for p in files)
    aggregates, samples = [], {}
    for path in files:
        repo_path = path.relative_to(out).as_posix()
        report = vc.validate_file(
            path,
            repo_path=repo_path,
            available_files=available,
            read_repo_file=lambda p: (out / p).read_text(),
            run_semantic_checks=True,
        )
        assert report.valid and not report.warnings, (repo_path, report.errors[:5], report.warnings[:5])
        if path.suffix == ".json":
            aggregates.append(json.loads(path.read_text()))
        else:
            samples[repo_path] = [json.loads(line) for line in path.read_text().splitlines()]
    return aggregates, samples


def exported_eee(env: dict[str, str], out: Path, model: str, *extra: str) -> tuple[list[dict], dict]:
    """`soco export-results MODEL OUT --format eee ...` through the console script in a fresh process, then
    `validated_eee(OUT)`."""
    args = ["export-results", model, str(out), "--format", "eee", *extra]
    done = subprocess.run(
        [str(SOCO), *args], env={**os.environ, **env}, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "checked against every-eval-ever 0.3.0's schemas" in done.stdout, done.stdout
    return validated_eee(out)
