"""`--protocol` that cannot lie (issue #35): a knob that changes predictions is refused by export-results
(both formats) and compare, with the fix; scoring knobs re-score stored predictions, and the re-scored value
equals the metrics table's row for that alpha; such a record keeps the stored pair hashes. And the record's
git hash is the checkout's HEAD."""

import json
import shutil
import subprocess

import dagster as dg
import pandas as pd
import pytest
import yaml

from soco_pipeline.cli import soco as cli
from soco_pipeline.defs.definitions import build_definitions
from soco_pipeline.storage import PROJECT_ROOT

pytestmark = [pytest.mark.pipeline, pytest.mark.timeout(900)]

BACKBONE = "dense_sift"
PER_BACKBONE = ["feature_manifest", "predictions", "four_choice_predictions", "metrics", "results_record"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("protocol")
    backbones = tmp / "backbones"
    backbones.mkdir()
    shutil.copy(PROJECT_ROOT / "assets" / "backbones" / f"{BACKBONE}.yaml", backbones)
    overrides = dict(
        storage_root=str(tmp / "storage"),
        backbones_dir=str(backbones),
        categories=["car", "chair", "dog"],
        images_per_category=4,
        device="cpu",
    )
    (tmp / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp / "home")) as instance:
        instance.add_dynamic_partitions("backbones", [BACKBONE])
        defs = build_definitions(**overrides)
        for selection, partition in (
            (dg.AssetSelection.groups("data", "pairs"), None),
            (dg.AssetSelection.assets(*PER_BACKBONE), BACKBONE),
        ):
            result = dg.materialize(
                list(defs.assets),
                selection=selection,
                instance=instance,
                resources=defs.resources,
                partition_key=partition,
            )
            assert result.success
    return {"tmp": tmp, "storage": tmp / "storage", "backbones": str(backbones)}


@pytest.fixture
def env(run, monkeypatch):
    monkeypatch.setenv("SOCO_STORAGE", str(run["storage"]))
    monkeypatch.setenv("SOCO_BACKBONES_DIR", run["backbones"])
    return run


def _protocol(tmp_path, **knobs) -> str:
    doc = yaml.safe_load((PROJECT_ROOT / "assets" / "protocol.yaml").read_text()) | knobs
    path = tmp_path / "protocol.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def _stored_row(run, alpha: float, metric: str = "soc") -> float:
    m = pd.read_parquet(run["storage"] / "tables" / "metrics" / f"{BACKBONE}.parquet")
    row = m[
        (m["metric"] == metric)
        & ((m["alpha"] - alpha).abs() < 1e-9)
        & (m["reduction"] == "official")
        & (m["scope"] == "all")
    ]
    assert len(row) == 1
    return float(row["value"].iat[0])


def test_record_git_hash_is_the_checkouts_head(run):
    rec = json.loads((run["storage"] / "results" / "records" / f"{BACKBONE}.json").read_text())
    head = subprocess.run(
        ["git", "-C", str(PROJECT_ROOT), "rev-parse", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout.strip()
    assert len(head) == 40 and rec["git_hash"]["commit"] == head


def test_a_knob_that_changes_predictions_is_refused_with_the_fix(env, tmp_path, capsys):
    p = _protocol(tmp_path, prediction_point="center")
    out = tmp_path / "out.json"
    for argv in (
        ["export-results", BACKBONE, str(out), "--protocol", p],
        ["export-results", BACKBONE, str(out), "--protocol", p, "--format", "record"],
        ["compare", BACKBONE, BACKBONE, "--protocol", p],
    ):
        assert cli.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert "prediction_point: 'top_left' -> 'center' would change the predictions of 'dense_sift'" in err
        assert "Re-run predictions under that protocol" in err
    assert not out.exists()


@pytest.mark.parametrize("alpha", [0.05, 0.15])
def test_a_scoring_knob_rescores_to_the_metrics_tables_row(env, tmp_path, alpha):
    assert _stored_row(env, 0.05) != _stored_row(env, 0.15)  # the alphas tell apart on this data
    p = _protocol(tmp_path, alphas=[alpha, 0.1], headline_alpha=alpha)
    out = tmp_path / "official.json"
    assert cli.main(["export-results", BACKBONE, str(out), "--protocol", p]) == 0
    doc = json.loads(out.read_text())
    assert doc["settings"]["threshold"] == alpha and doc["settings"]["protocol"]["headline_alpha"] == alpha
    assert doc["metrics"]["intra"]["overall"]["semantic_pck"] == pytest.approx(_stored_row(env, alpha))
    assert doc["metrics"]["intra"]["overall"]["concept_pck"] == pytest.approx(_stored_row(env, alpha, "cc"))
    rec_path = tmp_path / "rec.json"
    assert cli.main(["export-results", BACKBONE, str(rec_path), "--protocol", p, "--format", "record"]) == 0
    rec = json.loads(rec_path.read_text())
    assert rec["results"]["soc"]["value"] == pytest.approx(_stored_row(env, alpha))
    stored = env["storage"] / "results" / "records" / f"{BACKBONE}.json"
    # the same predictions: the matching hash and every pair hash stay those of the stored run
    assert cli.main(["diff-runs", str(stored), str(rec_path)]) == 0
