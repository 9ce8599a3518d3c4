"""An FG-BMK dataset in the release's official layout, foreign names, scored through the same Dagster assets as
the generated set: `source: {kind: official, folder, questions}` in the family's config; the board printed.

The layout is written here: benchmark/machine-oriented/<dataset>/{train,test}.csv + classes.txt (a multi-label
line, an unused class id) and benchmark/human-oriented/ with the release's spellings (`true_flase`,
`knowledge_bias_estimination`); images are small solid-colour JPEGs, one colour per class.
"""

from __future__ import annotations

import json

import dagster as dg
import pytest
import yaml
from PIL import Image

from soco_pipeline.analysis.leaderboard import leaderboard_markdown
from soco_pipeline.defs.definitions import build_definitions
from soco_pipeline.lvlm.server import serve
from soco_pipeline.storage import PROJECT_ROOT, read_parquet
from soco_pipeline.tables import table_for

pytestmark = [pytest.mark.pipeline, pytest.mark.timeout(900)]

CLASSES = ["Zürich-Möwe", "鹦鹉 parrot", "unused ∅", "Boeing 707-320", "Ōkami wolf"]
COLOURS = {0: (200, 40, 40), 1: (40, 200, 40), 3: (40, 40, 200), 4: (200, 200, 40)}
TINY = {
    "linear_probe": {"learning_rates": [0.01, 0.05], "epochs": 1, "epoch_length": 5, "batch_size": 8},
    "retrieval": {"learning_rates": [0.05], "epochs": 1, "epoch_length": 5, "batch_size": 8, "embed_dim": 8},
    "robustness": {"epsilons": [2], "pgd_steps": 1, "noise_sigmas": [8], "max_images": 4},
    "global_features": {"resize": 64, "crop": 64},
}


def _layout(root):
    machine = root / "benchmark" / "machine-oriented" / "mini_birds"
    images = root / "images"
    (images / "imgs").mkdir(parents=True)
    machine.mkdir(parents=True)
    (machine / "classes.txt").write_text("\n".join(CLASSES) + "\n", encoding="utf-8")
    lines = {"train": [], "test": []}
    for split, n in (("train", 4), ("test", 2)):
        for c, rgb in COLOURS.items():
            for i in range(n):
                rel = f"imgs/{split}_{c}_{i}.jpg"
                Image.new("RGB", (40, 32), rgb).save(images / rel)
                lines[split].append(f"{rel},{c}")
    Image.new("RGB", (40, 32), (120, 120, 40)).save(images / "imgs/both.jpg")
    lines["train"].append("imgs/both.jpg,0 4")  # multi-label: a retrieval gallery row, not a probe row
    for split, rows in lines.items():
        (machine / f"{split}.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    human = root / "benchmark" / "human-oriented"
    tests = [r.split(",")[0] for r in lines["test"]]
    names = {0: CLASSES[0], 1: CLASSES[1], 3: CLASSES[3], 4: CLASSES[4]}
    files = {
        "hierarchical_granularity_recognition/mini_birds/species/species_question_true_flase.jsonl": [
            (
                im,
                f"Is the aves species in this photo a {names[int(im.split('_')[1])]}? Answer with yes or no.",
                "yes",
                "generic",
            )
            for im in tests
        ],
        "knowledge_bias_estimination/mini_birds/questions_true_false_all_class.jsonl": [
            q
            for im in tests
            for q in (
                (
                    im,
                    f"Does this aves belong to the species known as {names[int(im.split('_')[1])]}? Answer "
                    "with yes or no.",
                    "yes",
                    names[int(im.split("_")[1])],
                ),
                (
                    im,
                    "Is the species of the aves Boeing 707-320? Answer with yes or no.",
                    "no",
                    names[int(im.split("_")[1])],
                ),
            )
        ],
    }
    for rel, recs in files.items():
        p = human / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(
            "\n".join(
                json.dumps(
                    {"question_id": i, "image": im, "text": t, "class": k, "category": c}, ensure_ascii=False
                )
                for i, (im, t, k, c) in enumerate(recs, 1)
            ),
            encoding="utf-8",
        )
    return machine, images, human


def test_official_layout_scores_through_the_assets_and_prints_its_board(tmp_path, monkeypatch, capsys):
    machine, images, human = _layout(tmp_path / "fgbmk")
    doc = yaml.safe_load((PROJECT_ROOT / "assets" / "fgbmk.yaml").read_text())
    shared_policy = yaml.safe_load((PROJECT_ROOT / "assets" / "global_features.yaml").read_text())
    for key, value in TINY.items():
        doc[key] = {**doc.get(key, shared_policy if key == "global_features" else {}), **value}
    doc["source"] = {
        "kind": "official",
        "folder": str(machine),
        "image_root": str(images),
        "questions": str(human),
    }
    (tmp_path / "fgbmk.yaml").write_text(yaml.safe_dump(doc, allow_unicode=True))
    monkeypatch.setenv("SOCO_FGBMK_CONFIG", str(tmp_path / "fgbmk.yaml"))
    backbones, lvlms = tmp_path / "backbones", tmp_path / "lvlms"
    for d in (backbones, lvlms, tmp_path / "home"):
        d.mkdir()
    (backbones / "vit_tiny.yaml").write_text(
        "kind: timm\nmodel: vit_tiny_patch16_224\nweights: none\ninput: {nearest_multiple: 224}\n"
        "normalisation: clip\ndevice: cpu\nseed: 0\n"
    )
    storage = tmp_path / "storage"
    defs = build_definitions(
        storage_root=str(storage), backbones_dir=str(backbones), lvlms_dir=str(lvlms), device="cpu"
    )
    with (
        serve(lambda request, body: "No.") as server,
        dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance,
    ):
        (lvlms / "always_no.yaml").write_text(
            f"backend: openai\nmodel: m\nbase_url: {server.base_url}\nmax_concurrency: 2\nretries: 1\n"
        )
        instance.add_dynamic_partitions("backbones", ["vit_tiny"])
        instance.add_dynamic_partitions("lvlms", ["always_no"])

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
        run("fgbmk_global_features", "fgbmk_metrics", "fgbmk_robustness", partition="vit_tiny")
        run("fgbmk_answers", "fgbmk_lvlm_metrics", partition="always_no")
        run("fgbmk_leaderboard", "fgbmk_findings")
    tables = str(storage / "tables")
    items = read_parquet(table_for("fgbmk_items").path(tables))
    assert len(items) == 25 and not items.simulated.any()  # 16 + 8 single-label rows and the multi-label one
    assert set(items.subclass) >= {"Zürich-Möwe", "鹦鹉 parrot", "Ōkami wolf", "Zürich-Möwe + Ōkami wolf"}
    metrics = read_parquet(table_for("fgbmk_metrics").path(tables, "vit_tiny"))
    row = metrics.iloc[0]
    assert (len(metrics), row.level, row.n_classes, row.probe_rows_skipped) == (1, "subclass", 4, 1)
    assert row.chance_top1 == 25.0 and not row.simulated
    questions = read_parquet(table_for("fgbmk_questions").path(tables))
    assert len(questions) == 24 and set(questions.task) == {"hierarchical", "knowledge_bias"}
    answers = read_parquet(table_for("fgbmk_answers").path(tables, "always_no"))
    lvlm = read_parquet(table_for("fgbmk_lvlm_metrics").path(tables, "always_no")).set_index(
        ["task", "metric"]
    )
    # always "No.": every hierarchical key is yes (0), half the knowledge-bias keys are no; no image all right
    assert (
        lvlm.value[("hierarchical", "accuracy")] == 0.0 and lvlm.value[("knowledge_bias", "accuracy")] == 50.0
    )
    assert lvlm.value[("knowledge_bias", "overall_accuracy_published")] == 0.0 and not answers.simulated.any()
    board = read_parquet(table_for("fgbmk_leaderboard").path(tables))
    assert set(board.kind) == {"backbone", "lvlm"} and not board.simulated.any()
    findings = read_parquet(table_for("fgbmk_findings").path(tables))
    assert findings.finding.tolist() == [1, 2, 3, 4, 5] and not findings.simulated.any()
    print(leaderboard_markdown(board))
    out = capsys.readouterr().out
    assert "vit_tiny" in out and "always_no" in out
