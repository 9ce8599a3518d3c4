"""The fgbmk Dagster group end to end on a tiny set: items, questions, a backbone and an LVLM partition,
the leaderboard; the tables land where tables.py says."""

from __future__ import annotations

import dagster as dg
import pytest
import yaml

from soco_pipeline.defs.definitions import build_definitions
from soco_pipeline.lvlm.server import serve
from soco_pipeline.storage import PROJECT_ROOT, read_parquet
from soco_pipeline.tables import table_for
from tests.record_helpers import exported_family_record
from tests.watch_helpers import figure, mean_outcome, plant_earlier_version, regression_check

pytestmark = pytest.mark.pipeline

TINY = {
    "embedded": {
        "images_per_subclass": {"train": 2, "test": 1},
        "workers": 1,
        "image_size": 64,
        "subclasses": ["zebra", "horse", "donkey", "cat", "taxi", "car"],
    },
    "linear_probe": {"learning_rates": [0.01, 0.05], "epochs": 1, "epoch_length": 5, "batch_size": 8},
    "retrieval": {"learning_rates": [0.05], "epochs": 1, "epoch_length": 5, "batch_size": 8, "embed_dim": 8},
    "robustness": {"epsilons": [2], "pgd_steps": 1, "noise_sigmas": [8], "max_images": 4},
    "questions": {"images_per_subclass": 1},
    "global_features": {"resize": 64, "crop": 64},
}


def test_fgbmk_group_end_to_end(tmp_path, monkeypatch):
    doc = yaml.safe_load((PROJECT_ROOT / "assets" / "fgbmk.yaml").read_text())
    shared_policy = yaml.safe_load((PROJECT_ROOT / "assets" / "global_features.yaml").read_text())
    for key, value in TINY.items():
        doc[key] = {**doc.get(key, shared_policy if key == "global_features" else {}), **value}
    (tmp_path / "fgbmk.yaml").write_text(yaml.safe_dump(doc))
    monkeypatch.setenv("SOCO_FGBMK_CONFIG", str(tmp_path / "fgbmk.yaml"))
    backbones, lvlms = tmp_path / "backbones", tmp_path / "lvlms"
    backbones.mkdir()
    (tmp_path / "home").mkdir()
    lvlms.mkdir()
    (backbones / "vit_tiny.yaml").write_text(
        "kind: timm\nmodel: vit_tiny_patch16_224\nweights: none\ninput: {nearest_multiple: 224}\n"
        "normalisation: clip\ndevice: cpu\nseed: 0\n"
    )
    storage = tmp_path / "storage"
    defs = build_definitions(
        storage_root=str(storage), backbones_dir=str(backbones), lvlms_dir=str(lvlms), device="cpu"
    )
    with (
        serve(lambda request, body: "yes") as server,
        dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance,
    ):
        (lvlms / "always_yes.yaml").write_text(
            f"backend: openai\nmodel: m\nbase_url: {server.base_url}\nmax_concurrency: 2\nretries: 1\n"
        )
        instance.add_dynamic_partitions("backbones", ["vit_tiny"])
        instance.add_dynamic_partitions("lvlms", ["always_yes"])

        def run(*keys, partition=None):
            result = dg.materialize(
                list(defs.assets),
                selection=dg.AssetSelection.assets(*keys),
                instance=instance,
                resources=defs.resources,
                partition_key=partition,
            )
            assert result.success

        run("fgbmk_items", "fgbmk_questions")
        run(
            "fgbmk_global_features",
            "fgbmk_metrics",
            "fgbmk_probe_predictions",
            "fgbmk_robustness",
            "fgbmk_history",
            partition="vit_tiny",
        )
        run("fgbmk_answers", "fgbmk_lvlm_metrics", partition="always_yes")
        run("fgbmk_leaderboard", "fgbmk_findings")
        # issue 39: an earlier data version of the backbone (better on two images): the re-run history
        # compares the probe's per-image outcomes with it by the paired test
        earlier = plant_earlier_version(str(storage), "fgbmk", "vit_tiny")
        rerun = dg.materialize(
            list(defs.assets),
            selection=dg.AssetSelection.assets("fgbmk_history"),
            instance=instance,
            resources=defs.resources,
            partition_key="vit_tiny",
        )
        assert rerun.success
    tables = str(storage / "tables")
    metrics = read_parquet(table_for("fgbmk_metrics").path(tables, "vit_tiny"))
    assert set(metrics.scope) == {"across", "within"} and set(metrics.level) == {
        "superclass",
        "class",
        "subclass",
    }
    rob = read_parquet(table_for("fgbmk_robustness").path(tables, "vit_tiny"))
    assert {"clean", "fgsm", "pgd", "gaussian"} == set(rob.attack)
    answers = read_parquet(table_for("fgbmk_answers").path(tables, "always_yes"))
    tf = answers[answers.form == "true_false"]
    assert tf.correct.mean() == (tf["class"] == "yes").mean()
    board = read_parquet(table_for("fgbmk_leaderboard").path(tables))
    assert set(board.kind) == {"backbone", "lvlm"} and board.simulated.all()
    findings = read_parquet(table_for("fgbmk_findings").path(tables))
    assert findings.finding.tolist() == [1, 2, 3, 4, 5]
    # a random-init ViT is never counted as a training paradigm: the paradigm findings cannot be tested
    assert set(findings.loc[findings.finding.isin([1, 2]), "holds"]) == {"not testable"}
    # issue 34: the family's results records (a backbone and an LVLM), in SOCO's record schema
    rec = exported_family_record(storage, backbones, lvlms, "fgbmk", "vit_tiny")
    across = metrics[metrics.scope == "across"].set_index("level")
    assert rec["results"]["top1/subclass"]["value"] == across.loc["subclass", "top1"]
    # issue 39: the probe's per-image outcomes: the mean of `correct` is each level's top-1 (across)
    preds = read_parquet(table_for("fgbmk_probe_predictions").path(tables, "vit_tiny"))
    for level, grp in preds.groupby("level"):
        # top-1 is torch's float32 mean (metrics.topk_accuracy): equal up to float32's precision
        assert mean_outcome(grp.correct) == pytest.approx(across.loc[level, "top1"], abs=1e-4)
        assert grp.probe_head.unique().tolist() == [across.loc[level, "probe_head"]]
        assert len(grp) == across.loc[level, "n_test"]
    # the regression watch: the probe's subclass top-1 in both snapshots, compared by the paired test
    hist = read_parquet(table_for("fgbmk_history").path(tables, "vit_tiny")).set_index("data_version")
    assert hist.metric.tolist() == ["top1/subclass", "top1/subclass"]
    assert hist.at["earlier", "value"] == pytest.approx(earlier["top1/subclass"])
    now = hist.drop(index="earlier").iloc[0]
    assert now["value"] == across.loc["subclass", "top1"] and now["previous_data_version"] == "earlier"
    assert now["delta_ci_low"] <= now["delta"] <= now["delta_ci_high"] <= 0
    check = regression_check(rerun, "fgbmk_history")
    assert check.metadata["paired_test"].value.startswith("paired difference per sample")
    before, after, delta, lo, hi = figure(check.metadata["top1/subclass"].value)
    assert (before, after) == (round(earlier["top1/subclass"], 1), round(now["value"], 1))
    assert (delta, lo, hi) == tuple(round(now[c], 1) for c in ("delta", "delta_ci_low", "delta_ci_high"))
    rec = exported_family_record(storage, backbones, lvlms, "fgbmk", "always_yes")
    for (task, form), grp in answers.groupby(["task", "form"]):
        assert rec["results"][f"{task}/{form}"]["value"] == pytest.approx(100 * grp.correct.mean())
    assert rec["n-samples"]["questions"]["evaluated"] == answers.question_id.nunique()
