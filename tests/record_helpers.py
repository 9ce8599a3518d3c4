"""The family results record check the family pipeline tests run on the tables they materialized."""

from __future__ import annotations

import json
from pathlib import Path

from soco_pipeline import cli
from soco_pipeline.evaluation.provenance import validate_record


def exported_family_record(monkeypatch, storage: Path, backbones: Path, lvlms: Path, family: str, model: str):
    """`soco export-results MODEL OUT --format record --family FAMILY` on a test's storage: the record, after
    checking that it validates against the schema and counts and hashes what it evaluated."""
    monkeypatch.setenv("SOCO_STORAGE", str(storage))
    monkeypatch.setenv("SOCO_BACKBONES_DIR", str(backbones))
    monkeypatch.setenv("SOCO_LVLMS_DIR", str(lvlms))
    out = storage / f"{family}-{model}.json"
    args = ["export-results", model, str(out), "--format", "record", "--family", family]
    assert cli.main(args) == 0
    rec = json.loads(out.read_text())
    validate_record(rec)
    assert rec["family"] == family and rec["model"] == model
    for table, counts in rec["n-samples"].items():
        assert 0 < counts["evaluated"] <= counts["requested"], (table, counts)
    assert set(rec["task_hashes"]) == set(rec["sample_hashes"]) and all(rec["sample_hashes"].values())
    return rec
