"""The family results record check the family pipeline tests run on the tables they materialized."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from soco_pipeline.trust.provenance import validate_record
from tests.eee_helpers import eee_checked_here, exported_eee

SOCO = Path(sys.executable).with_name("soco")  # the console script beside this interpreter


def exported_family_record(storage: Path, backbones: Path, lvlms: Path, family: str, model: str):
    """`soco export-results MODEL OUT --format record --family FAMILY` on a test's storage, through the console
    script in a fresh process (which never loads the definitions: the family's tables come from its domain
    declaration): the record, after checking that it validates against the schema and counts and hashes
    what it evaluated."""
    env = {
        **os.environ,
        "SOCO_STORAGE": str(storage),
        "SOCO_BACKBONES_DIR": str(backbones),
        "SOCO_LVLMS_DIR": str(lvlms),
    }
    out = storage / f"{family}-{model}.json"
    args = ["export-results", model, str(out), "--format", "record", "--family", family]
    done = subprocess.run([str(SOCO), *args], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    rec = json.loads(out.read_text())
    validate_record(rec)
    assert rec["family"] == family and rec["model"] == model
    for table, counts in rec["n-samples"].items():
        assert 0 < counts["evaluated"] <= counts["requested"], (table, counts)
    assert set(rec["task_hashes"]) == set(rec["sample_hashes"]) and all(rec["sample_hashes"].values())
    if eee_checked_here():
        check_eee_export(env, storage / f"{family}-{model}-eee", rec)
    return rec


def check_eee_export(env: dict[str, str], out: Path, rec: dict) -> None:
    """`soco export-results MODEL OUT --format eee --family FAMILY` (issue 55): validated by the
    every-eval-ever package's validator; one `evaluation_run` result per valued result of the record, with its
    value; a backbone's sidecar, when written, holds only the results the aggregate reports."""
    family, model = rec["family"], rec["model"]
    (agg,), samples = exported_eee(env, out, model, "--family", family)
    assert agg["source_metadata"]["source_type"] == "evaluation_run"
    got = {r["evaluation_result_id"]: r["score_details"]["score"] for r in agg["evaluation_results"]}
    want = {f"{family}.{m}": r["value"] for m, r in rec["results"].items() if r["value"] is not None}
    assert got == want
    for lines in samples.values():
        assert {x["evaluation_result_id"] for x in lines} <= set(got)
