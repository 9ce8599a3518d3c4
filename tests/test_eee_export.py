"""`soco export-results M OUT --format eee` (issue 55): our results as Every Eval Ever `evaluation_run`
records with a per-sample sidecar, published figures as `documentation` records, each validated by the
every-eval-ever 0.3.0 package's own validator (tests/eee_helpers.py). Through the console script in a fresh
process, on the shared test core (tests/core.py: the embedded data, simulated, and the two oracles). The
task families' exports are validated where their pipelines are tested (tests/record_helpers.py)."""

from __future__ import annotations

import json
import os
import subprocess
import uuid

import pandas as pd
import pytest

from soco_pipeline.published_figures import load_published
from soco_pipeline.trust import eee_export as eee
from tests.eee_helpers import SOCO, eee_validation_core, exported_eee


@pytest.mark.pipeline
def test_a_measured_soco_record_validates_and_its_sidecar_is_the_data_behind_each_score(
    materialized_core, tmp_path
):
    env = {
        "SOCO_STORAGE": str(materialized_core.storage),
        "SOCO_BACKBONES_DIR": str(materialized_core.backbones),
    }
    aggregates, samples = exported_eee(env, tmp_path / "eee", "oracle_concept")
    (agg,) = aggregates
    assert agg["source_metadata"]["source_type"] == "evaluation_run"
    assert agg["model_info"]["name"] == "oracle_concept"
    rec_path = tmp_path / "record.json"
    args = [str(SOCO), "export-results", "oracle_concept", str(rec_path), "--format", "record"]
    done = subprocess.run(args, env={**os.environ, **env}, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    rec = json.loads(rec_path.read_text())
    results = {r["evaluation_result_id"]: r for r in agg["evaluation_results"]}
    family = rec["family"]
    assert set(results) == {f"{family}.{m}" for m, r in rec["results"].items() if r["value"] is not None}
    for metric, r in rec["results"].items():
        got = results[f"{family}.{metric}"]["score_details"]
        assert got["score"] == r["value"]
        ci = got["uncertainty"]["confidence_interval"]  # the bootstrap over categories: SOCO's headline CI
        assert [ci["lower"], ci["upper"]] == r["ci95_boot_category"] and ci["confidence_level"] == 0.95
        assert got["uncertainty"]["standard_error"]["value"] == r["se_cluster_image"]
    # the sidecar: one line per (keypoint or item, metric); the official reduction of its scores (a pair's
    # keypoints, then a category's pairs, then the categories) is the aggregate's score
    (lines,) = samples.values()
    assert agg["detailed_evaluation_results"]["total_rows"] == len(lines)
    s = pd.DataFrame(
        {
            "rid": [x["evaluation_result_id"] for x in lines],
            "pair": [x["sample_id"].split("/")[0] for x in lines],
            "category": [x["metadata"]["group"] for x in lines],
            "score": [x["evaluation"]["score"] for x in lines],
        }
    )
    assert set(s.rid) == set(results)
    reduced = (
        s.groupby(["rid", "category", "pair"])
        .score.mean()
        .groupby(["rid", "category"])
        .mean()
        .groupby("rid")
        .mean()
    )
    for rid, value in reduced.items():
        assert 100 * value == pytest.approx(results[rid]["score_details"]["score"], abs=1e-9), rid
    assert all(x["evaluation"]["is_correct"] == (x["evaluation"]["score"] == 1.0) for x in lines)
    assert {x["evaluation_id"] for x in lines} == {agg["evaluation_id"]}


@pytest.mark.pipeline
def test_a_quoted_record_validates_with_every_published_figure_of_the_model(tmp_path):
    aggregates, samples = exported_eee({}, tmp_path / "eee", "DINOv2-B/14", "--published")
    assert not samples  # a quoted figure has no per-sample outcomes
    rows = load_published().query("model == 'DINOv2-B/14'")
    assert {a["evaluation_results"][0]["evaluation_name"].split("/")[0] for a in aggregates} == set(
        rows.family
    )
    quoted = [
        (r["evaluation_name"], r["score_details"]["score"])
        for a in aggregates
        for r in a["evaluation_results"]
    ]
    assert sorted(quoted) == sorted(
        zip(rows.family + "/" + rows.metric, rows.value.astype(float), strict=True)
    )
    for a in aggregates:
        assert a["source_metadata"]["source_type"] == "documentation"
        assert a["model_info"]["name"] == "DINOv2-B/14"
        assert "uncertainty" not in json.dumps(a)  # a published figure comes without an interval here


@pytest.mark.pipeline
def test_an_unknown_published_model_is_refused_naming_the_table(tmp_path):
    args = [
        str(SOCO),
        "export-results",
        "No-Such-Model",
        str(tmp_path / "o"),
        "--format",
        "eee",
        "--published",
    ]
    done = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "no published figure of 'No-Such-Model'" in done.stderr
    assert "assets/reference/published.csv" in done.stderr and not (tmp_path / "o").exists()


@pytest.mark.pipeline
def test_protocol_is_refused_it_goes_with_the_other_formats(tmp_path):
    args = [str(SOCO), "export-results", "oracle_part", str(tmp_path / "o"), "--format", "eee"]
    done = subprocess.run([*args, "--protocol", "assets/protocol.yaml"], capture_output=True, text=True)
    assert (
        done.returncode == 2
        and "--protocol (re-scoring) goes with --format official or record" in done.stderr
    )


@pytest.mark.unit
def test_uncertainty_takes_the_bootstrap_ci_else_the_logit_interval_and_the_se():
    boot = {"ci95_boot_category": [1.0, 3.0], "ci95_cluster_image_logit": [0.5, 4.0], "se_cluster_image": 0.7}
    u = eee.uncertainty({**boot, "n_units": 12})
    assert (u["confidence_interval"]["lower"], u["confidence_interval"]["upper"]) == (1.0, 3.0)
    assert u["standard_error"]["value"] == 0.7 and u["num_samples"] == 12
    u = eee.uncertainty({**boot, "ci95_boot_category": [None, None], "n_units": 12})
    assert (u["confidence_interval"]["lower"], u["confidence_interval"]["upper"]) == (0.5, 4.0)
    assert "logit" in u["confidence_interval"]["method"]
    assert eee.uncertainty({"ci95_boot_category": [None, None], "se_cluster_image": None}) == {}


@pytest.mark.unit
def test_file_ids_are_uuid4_and_stable_and_names_are_portable():
    a = eee.record_uuid("measured", "soco", "m", "{}")
    assert (
        a == eee.record_uuid("measured", "soco", "m", "{}") != eee.record_uuid("measured", "soco", "n", "{}")
    )
    assert uuid.UUID(a).version == 4
    assert eee.slug("CLIP-B/16 (OpenAI)") == "CLIP-B-16-OpenAI"
    with pytest.raises(eee.EeeExportError, match="no character usable"):
        eee.slug("//")


@pytest.mark.unit
def test_a_record_the_schema_refuses_is_refused_naming_the_field():
    eee_validation_core()  # the schemas are unpacked (fails under CI, skips elsewhere, when they are not)
    rows = load_published().query("model == 'DINOv2-B/14' and family == 'soco'")
    _, agg = eee.published_logs(rows, "0")[0]
    assert eee.checked(agg, None, "x").startswith("checked against")
    broken = {**agg, "source_metadata": {**agg["source_metadata"], "source_type": "leaderboard"}}
    with pytest.raises(eee.EeeExportError, match="source_metadata/source_type"):
        eee.checked(broken, None, "DINOv2-B/14 (published)")
