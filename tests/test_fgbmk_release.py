"""FG-BMK's published files read as released, and its bad input refused or flagged (issues 35 and 38).

Small files in the release's layout are written here (foreign names, the release's spellings
`true_flase` / `knowledge_bias_estimination`, multi-label lines, unused class ids); what the release's own
scripts do with them is written down from its code (SEU-VIPGroup/FG-BMK 7765a10a: dataset.py,
demo/human_evaluation/answer_acc.py).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from soco_pipeline.features.global_cache import GlobalFeatures
from soco_pipeline.tasks.fgbmk.answer_scoring import answer_acc, per_class_published, score_answer_file
from soco_pipeline.tasks.fgbmk.config import load_config
from soco_pipeline.tasks.fgbmk.embedded import ensure_embedded, hierarchy
from soco_pipeline.tasks.fgbmk.leaderboard import lvlm_metrics
from soco_pipeline.tasks.fgbmk.machine_eval import evaluate_backbone, label_lists
from soco_pipeline.tasks.fgbmk.questions import build_questions, official_questions
from soco_pipeline.tasks.fgbmk.readers import (
    FgbmkFormatError,
    human_files,
    items_from_dataset,
    read_answers,
    read_machine_dataset,
    read_questions,
)

pytestmark = pytest.mark.unit

NAMES = ["Boeing 707-320", "Zürich-Möwe", "鹦鹉 parrot", "A340-600", "Cessna 208"]


def _machine(tmp_path, train_lines, test_lines, classes=NAMES):
    folder = tmp_path / "machine-oriented" / "aircraft"
    (folder / "images").mkdir(parents=True)
    (folder / "classes.txt").write_text("\n".join(classes) + "\n", encoding="utf-8")
    for name, lines in (("train.csv", train_lines), ("test.csv", test_lines)):
        (folder / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
        for line in lines:
            Image.new("RGB", (8, 6), (40, 80, 120)).save(folder / line.rsplit(",", 1)[0])
    return folder


def test_class_name_listed_twice_is_refused_naming_both_ids(tmp_path):
    folder = _machine(tmp_path, ["images/a.jpg,0"], ["images/b.jpg,2"], [*NAMES[:3], "Boeing 707-320"])
    with pytest.raises(FgbmkFormatError, match=r"'Boeing 707-320' is listed twice \(ids 0 and 3"):
        read_machine_dataset(str(folder))


def test_duplicate_question_ids_are_refused_naming_them(tmp_path):
    path = tmp_path / "q.jsonl"
    recs = [
        {
            "question_id": i,
            "image": f"images/{i}.jpg",
            "text": "Is it? Answer with yes or no.",
            "class": "yes",
        }
        for i in (1, 2, 2, 3, 1)
    ]
    path.write_text("\n".join(json.dumps({**r, "category": "generic"}) for r in recs))
    with pytest.raises(
        FgbmkFormatError, match=r"duplicate question ids \(2\): id 1 on lines 1, 5; id 2 on lines 2, 3"
    ):
        read_questions(str(path))


def test_multi_label_rows_and_the_release_ids_are_kept(tmp_path):
    """Class 1 is never used: ids stay as released (3 stays odd, unseen); the multi-label line stays."""
    folder = _machine(
        tmp_path,
        ["images/t0.jpg,0", "images/t1.jpg,3", "images/t2.jpg,4", "images/t3.jpg,0 3"],
        ["images/e0.jpg,0", "images/e1.jpg,3 4"],
    )
    items = items_from_dataset(read_machine_dataset(str(folder)))
    assert len(items) == 6  # nothing dropped
    assert items.subclass_id.tolist() == [0, 3, 4, 0, 0, 3]
    assert items.labels.tolist() == ["0", "3", "4", "0 3", "0", "3 4"]
    assert items.multi_label.tolist() == [False, False, False, True, False, True]
    assert items.subclass.iloc[3] == "Boeing 707-320 + A340-600" and items.subclass.iloc[2] == "Cessna 208"
    assert label_lists(items, "subclass")[5] == [3, 4]


def _feats(items: pd.DataFrame, seed: int = 0) -> GlobalFeatures:
    rng = np.random.default_rng(seed)
    onehot = np.eye(int(items.subclass_id.max()) + 1)[items.subclass_id] * 3.0
    x = (onehot + 0.3 * rng.normal(size=onehot.shape)).astype(np.float32)
    return GlobalFeatures(items.image_id.to_numpy(), x, x, x)


def test_metrics_count_skipped_rows_and_flag_test_classes_without_training_images(tmp_path):
    train = [f"images/t{i}_{c}.jpg,{c}" for c in (0, 2, 4) for i in range(3)] + ["images/m.jpg,0 2"]
    test = [f"images/e{i}_{c}.jpg,{c}" for c in (0, 2, 4) for i in range(2)] + ["images/only3.jpg,3"]
    items = items_from_dataset(read_machine_dataset(str(_machine(tmp_path, train, test))))
    cfg = load_config(
        linear_probe={"learning_rates": [0.05], "epochs": 1, "epoch_length": 10, "batch_size": 4},
        retrieval={"learning_rates": [0.05], "epochs": 1, "epoch_length": 4, "batch_size": 4, "embed_dim": 4},
    )
    metrics, _ = evaluate_backbone("b", _feats(items), items, cfg, simulated=False)
    row = metrics.iloc[0]
    assert (row.level, row.probe_rows_skipped, row.n_train, row.n_test) == ("subclass", 1, 9, 7)
    assert row.probe_rows_skipped_ids == "aircraft/images/m.jpg"
    assert row.test_classes_without_train == 1 and row.test_classes_without_train_ids == "3"
    assert row.n_classes == 4 and row.chance_top1 == 25.0  # classes present, not max id + 1


def _published_tree(root):
    """A human-oriented tree in the release's layout (its spellings), foreign names, one LFS pointer."""
    rows = {
        "hierarchical_granularity_recognition/aircraft/species/species_question_choice.jsonl": [
            (
                "images/1.jpg",
                "Which fine-grained category does this aircraft belong to? Choose one answer "
                'from the following list: "Zürich-Möwe", "A340-600". Answer the question using a single word '
                "or phrase.",
                "Zürich-Möwe",
                "generic",
            ),
        ],
        "hierarchical_granularity_recognition/aircraft/species/species_question_true_flase.jsonl": [
            (
                "images/1.jpg",
                "Is the aircraft fine-grained category in this photo a A340-600? Answer with yes or no.",
                "no",
                "Zürich-Möwe",
            ),
        ],
        "knowledge_bias_estimination/aircraft/questions_true_false_all_class.jsonl": [
            (
                "images/1.jpg",
                "Does this aircraft belong to the fine-grained category known as Zürich-Möwe? "
                "Answer with yes or no.",
                "yes",
                "Zürich-Möwe",
            ),
            (
                "images/1.jpg",
                "Is the fine-grained category of the aircraft A340-600? Answer with yes or no.",
                "no",
                "Zürich-Möwe",
            ),
            (
                "images/2.jpg",
                "Is the fine-grained category of the aircraft 鹦鹉 parrot? Answer with yes or no.",
                "yes",
                "鹦鹉 parrot",
            ),
            (
                "images/2.jpg",
                "Is the fine-grained category of the aircraft Cessna 208? Answer with yes or no.",
                "no",
                "鹦鹉 parrot",
            ),
        ],
    }
    for rel, recs in rows.items():
        p = root / rel
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
    lfs = root / "knowledge_bias_estimination/cub/questions_true_false_all_class.jsonl"
    lfs.parent.mkdir(parents=True)
    lfs.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:00\nsize 1\n")
    return root


def test_published_question_files_read_as_released(tmp_path):
    root = _published_tree(tmp_path / "human-oriented")
    files = human_files(str(root))
    assert sorted(files.dataset) == ["aircraft", "aircraft", "aircraft", "cub"]
    q = official_questions(str(root), "aircraft", "/data/aircraft")
    assert len(q) == 6 and q.question_id.tolist() == [1, 2, 3, 4, 5, 6]  # every row of every file
    assert q.published_question_id.tolist() == ["1", "1", "1", "2", "3", "4"]
    assert q.form.tolist() == ["choice", "true_false", "true_false", "true_false", "true_false", "true_false"]
    assert json.loads(q.options.iloc[0]) == ["Zürich-Möwe", "A340-600"]
    # knowledge-bias classes come from `category` (foreign names kept), not from the image folder
    assert q[q.task == "knowledge_bias"].subclass.tolist() == ["Zürich-Möwe"] * 2 + ["鹦鹉 parrot"] * 2
    assert q.uri.iloc[0] == "/data/aircraft/images/1.jpg" and q.image_id.iloc[0] == "aircraft/images/1.jpg"
    with pytest.raises(FgbmkFormatError, match="Git LFS pointer"):
        official_questions(str(root), "cub", "/data/cub")


def _answers(q: pd.DataFrame, reply: str) -> pd.DataFrame:
    return q.assign(prompt=q.text, text=reply)[
        ["question_id", "image", "prompt", "text", "class", "category"]
    ]


def test_answer_acc_overall_is_the_share_of_images_all_right(tmp_path):
    """answer_acc.py on the knowledge-bias file (2 questions per image: one yes, one no): a constant answerer
    gets exactly half the questions and no image right; per class from `category`."""
    root = _published_tree(tmp_path / "human-oriented")
    kb = read_questions(
        str(root / "knowledge_bias_estimination/aircraft/questions_true_false_all_class.jsonl")
    )
    for reply in ("no", "yes"):
        path = tmp_path / f"answers_{reply}.jsonl"
        path.write_text(
            "\n".join(json.dumps(r, ensure_ascii=False) for r in _answers(kb, reply).to_dict("records"))
        )
        scored = score_answer_file(read_answers(str(path)))
        acc = answer_acc(scored)
        assert (acc["images"], acc["correct_images"], acc["overall_accuracy"], acc["per_question"]) == (
            2,
            0,
            0.0,
            50.0,
        )
        assert set(per_class_published(scored).subclass) == {"zürich möwe", "鹦鹉 parrot"}
    right = kb.assign(prompt=kb.text, text=kb["class"].map({"yes": "Yes.", "no": "No, it is not."}))
    acc = answer_acc(score_answer_file(right))
    assert (acc["overall_accuracy"], acc["per_question"]) == (100.0, 100.0)
    half = right.copy()
    half.loc[1, "text"] = "yes"  # image 1 loses one of its two questions
    acc = answer_acc(score_answer_file(half))
    assert (acc["correct_images"], acc["overall_accuracy"], acc["per_question"]) == (1, 50.0, 75.0)
    assert acc["per_class"]["no"] == (1, 2) and acc["per_class"]["yes"] == (2, 2)


def test_generated_knowledge_bias_is_two_questions_per_image_and_constants_score_their_share(tmp_path):
    cfg = load_config(embedded={"images_per_subclass": {"train": 1, "test": 1}})
    subs = ["zebra", "horse", "donkey", "taxi", "car"]
    items = ensure_embedded(str(tmp_path / "set"), cfg.embedded, subclasses=subs, workers=1)
    q = build_questions(items, hierarchy(subclasses=subs), cfg.questions)
    kb = q[q.task == "knowledge_bias"]
    assert kb.groupby("image_id").size().eq(2).all() and len(kb) == 2 * items.split.eq("test").sum()
    answers = kb.assign(model="const", raw_answer="No.", rotation=0, error="")
    from soco_pipeline.tasks.fgbmk.answer_scoring import score_answers

    m = lvlm_metrics(score_answers(answers)).set_index("metric").value
    assert m["accuracy"] == 50.0 and m["accuracy_published"] == 50.0  # exactly the share of "no" keys
    assert m["overall_accuracy_published"] == 0.0  # no image has both of its questions right
    from soco_pipeline.tasks.fgbmk.questions import render_text

    qc = cfg.questions
    assert "which of the following genera is it?" in render_text(
        qc.choice[0], qc, "class", "animal", ["a", "b"]
    )
    assert (len(qc.choice), len(qc.true_false), len(qc.short_answer)) == (4, 4, 4)
    assert render_text(qc.true_false[3], qc, "subclass", "aves", name="x") == (
        "Is the aves species in this photo a x? Answer with yes or no."
    )
