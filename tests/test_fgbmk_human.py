"""FG-BMK human-oriented half and robustness: questions, answer rules, JSONL formats, a loopback LVLM."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

from soco_pipeline.features.global_cache import GlobalFeatures
from soco_pipeline.features.global_extractors import GlobalExtractor
from soco_pipeline.lvlm.backends.openai import OpenAIBackend
from soco_pipeline.lvlm.cache import AnswerCache
from soco_pipeline.lvlm.server import serve
from soco_pipeline.tasks.fgbmk.answer_scoring import (
    circular_accuracy,
    knowledge_bias,
    score_answer_file,
    score_answers,
)
from soco_pipeline.tasks.fgbmk.answers import ask
from soco_pipeline.tasks.fgbmk.config import load_config
from soco_pipeline.tasks.fgbmk.embedded import ensure_embedded, hierarchy
from soco_pipeline.tasks.fgbmk.linear_probe import train_probe
from soco_pipeline.tasks.fgbmk.questions import build_questions, circular
from soco_pipeline.tasks.fgbmk.readers import (
    ANSWER_KEYS,
    FgbmkFormatError,
    hierarchical_path,
    human_files,
    knowledge_bias_path,
    read_answers,
    read_questions,
    write_jsonl,
)
from soco_pipeline.tasks.fgbmk.robustness import evaluate_robustness, fgsm
from tests.lvlm_helpers import openai_spec

pytestmark = pytest.mark.unit

SUBS = ["zebra", "horse", "donkey", "taxi", "car", "chair"]


@pytest.fixture(scope="module")
def small_set(tmp_path_factory):
    root = tmp_path_factory.mktemp("fgbmk")
    cfg = load_config(embedded={"images_per_subclass": {"train": 1, "test": 1}})
    items = ensure_embedded(str(root / "set"), cfg.embedded, subclasses=SUBS, workers=1)
    return cfg, items, hierarchy(subclasses=SUBS)


def test_questions_published_wording_parents_and_circular(small_set):
    cfg, items, h = small_set
    q = build_questions(items, h, cfg.questions)
    assert set(q.form) == {"choice", "true_false", "short_answer"} and q.simulated.all()
    zebra = q[(q.subclass == "zebra") & (q.task == "hierarchical")]
    choice = zebra[(zebra.level == "subclass") & (zebra.form == "choice")].iloc[0]
    opts = json.loads(choice.options)
    assert "zebra" in opts and {"horse", "donkey"} <= set(opts)  # distractors from the same class first
    assert choice.text.endswith("Answer the question using a single word or phrase.")
    assert 'Choose one answer from the following list: "' in choice.text and "species" in choice.text
    tf = zebra[zebra.form == "true_false"].text.iloc[0]
    assert tf.endswith("Answer with yes or no.")
    assert set(q[q.task == "attribute"].level) == {"colour", "texture", "body_shape"}
    kb = q[(q.task == "knowledge_bias") & (q.subclass == "zebra")]
    # two per image, as the release asks: yes for the true subclass, no for one sibling
    assert list(kb["class"]) == ["yes", "no"] and "zebra" in kb.text.iloc[0]
    assert any(s in kb.text.iloc[1] for s in ("horse", "donkey"))
    rot = circular(q, cfg.questions)
    grp = rot[rot.group_id == choice.group_id]
    assert len(grp) == 4 and len({tuple(json.loads(o)) for o in grp.options}) == 4
    assert len(rot[rot.form != "choice"]) == len(q[q.form != "choice"])


def test_answer_rules_cover_every_method():
    rows = [
        ("choice", "Zebra.", "zebra", ["zebra", "horse", "donkey", "car"], True, "exact"),
        (
            "choice",
            "It is a police car",
            "police car",
            ["car", "police car", "bus", "taxi"],
            True,
            "contains",
        ),
        ("choice", "horse or zebra", "zebra", ["zebra", "horse", "donkey", "car"], False, "ambiguous"),
        ("choice", "no idea", "zebra", ["zebra", "horse", "donkey", "car"], False, "none"),
        ("short_answer", "Polar_Bear", "polar bear", [], True, "exact"),
        ("short_answer", "I think this is a polar bear.", "polar bear", [], True, "contains"),
        ("short_answer", "bear", "polar bear", [], False, "none"),
        ("true_false", "Yes, it is.", "yes", [], True, "leading"),
        ("true_false", "I would say no", "no", [], True, "contains"),
        ("true_false", "maybe", "yes", [], False, "none"),
        ("true_false", "It is not yes", "no", [], False, "contains"),
    ]
    df = pd.DataFrame(rows, columns=["form", "raw_answer", "class", "options", "want", "want_method"])
    df["options"] = df.options.map(json.dumps)
    got = score_answers(df)
    assert got.method.tolist() == df.want_method.tolist()
    assert got.correct.tolist() == df.want.tolist()
    assert got.correct.mean() == pytest.approx(6 / 11)
    # FG-BMK's substring rule differs where it should: "no" hides in "not", a wrong ambiguous answer passes
    assert got.correct_published.tolist()[2] and got.correct_published.tolist()[10]


def test_circular_and_knowledge_bias_report():
    df = pd.DataFrame(
        {
            "form": ["choice"] * 4 + ["true_false"] * 4,
            "group_id": [0, 0, 1, 1, 2, 3, 4, 5],
            "level": "subclass",
            "correct": [True, True, True, False, True, False, True, True],
            "task": ["hierarchical"] * 4 + ["knowledge_bias"] * 4,
            "subclass": ["a", "a", "b", "b", "a", "a", "b", "b"],
        }
    )
    assert circular_accuracy(df, ["level"]).circular_accuracy.iloc[0] == 50.0
    per, rep = knowledge_bias(df, worst=1)
    assert per.set_index("subclass").accuracy.to_dict() == {"a": 50.0, "b": 100.0}
    assert rep["worst"] == ["a"] and rep["std"] == 25.0 and (rep["min"], rep["max"]) == (50.0, 100.0)


def test_jsonl_round_trip_layout_and_published_answer_file(tmp_path, small_set):
    cfg, items, h = small_set
    q = build_questions(items, h, cfg.questions)
    part = q[(q.task == "hierarchical") & (q.level == "subclass") & (q.form == "choice")]
    path = hierarchical_path(str(tmp_path), "embedded", "species", "choice")
    write_jsonl(part, path)
    back = read_questions(path)
    pd.testing.assert_frame_equal(
        back.drop(columns="line"), part[list(back.columns[:-1])].reset_index(drop=True), check_dtype=False
    )
    write_jsonl(q[q.task == "knowledge_bias"], knowledge_bias_path(str(tmp_path), "embedded"))
    files = human_files(str(tmp_path))
    assert files[["task", "level", "form"]].values.tolist() == [
        ["hierarchical_granularity_recognition", "species", "choice"],
        ["knowledge_bias_estimation", "all_class", "true_false"],
    ]
    answers = part.head(2).assign(prompt=part.text.head(2), text=["zebra", "a horse"])
    write_jsonl(answers.assign(text=list(part["class"].head(2))), str(tmp_path / "ans.jsonl"), ANSWER_KEYS)
    scored = score_answer_file(read_answers(str(tmp_path / "ans.jsonl")))
    assert scored.correct.all() and (scored.form == "choice").all() and (scored.method == "exact").all()


@pytest.mark.parametrize(
    "line,needle",
    [
        ("{not json", ":1: not valid JSON"),
        ('{"question_id": 1, "image": "a.jpg", "text": "q"}', ":1: missing keys ['class', 'category']"),
        ("[1, 2]", ":1: expected a JSON object"),
    ],
)
def test_jsonl_reader_rejects_bad_lines(tmp_path, line, needle):
    (tmp_path / "q.jsonl").write_text(line + "\n")
    with pytest.raises(FgbmkFormatError, match=r"q\.jsonl" + needle.replace("[", r"\[").replace("]", r"\]")):
        read_questions(str(tmp_path / "q.jsonl"))


def test_loopback_server_constant_answer_scores_its_share(tmp_path, small_set):
    cfg, items, h = small_set
    q = build_questions(items, h, cfg.questions)
    tf = q[q.form == "true_false"].reset_index(drop=True)
    with serve(lambda request, body: "Yes.") as server:
        spec = openai_spec(server.base_url, "const")
        answers = ask(tf, spec, OpenAIBackend(spec), AnswerCache(str(tmp_path / "cache")))
        sent = server.requests
        again = ask(tf, spec, OpenAIBackend(spec), AnswerCache(str(tmp_path / "cache")))
        assert server.requests == sent  # every answer came from the cache
    assert sent == answers.request_hash.nunique() and (answers.method == "leading").all()
    assert answers.correct.mean() == pytest.approx((tf["class"] == "yes").mean())
    assert again.correct.tolist() == answers.correct.tolist()


def test_identical_requests_reach_the_server_once(tmp_path, small_set):
    """Issue 53: through FG-BMK's LVLM path a constant-answer server received 244-245 requests for 236
    distinct questions. Rotations of a choice question with fewer than four options repeat one question;
    each distinct request (one request hash: the image's content and the text) is asked once, even when
    several worker threads meet it at the same time."""
    from soco_pipeline.tasks.fgbmk.questions import questions_for

    cfg, items, _ = small_set
    q = questions_for(items, cfg)
    with serve(lambda request, body: "A") as server:
        spec = openai_spec(server.base_url, "const", max_concurrency=8)
        answers = ask(q, spec, OpenAIBackend(spec), AnswerCache(str(tmp_path / "cache")))
        received = server.requests
    distinct = answers.request_hash.nunique()
    assert distinct < len(q) == len(answers), (
        "the sample must repeat questions for this test to mean anything"
    )
    assert received == distinct
    assert (answers.error == "").all()
    # a repeated question gets its one reply: every row of a request hash has the same raw answer
    assert (answers.groupby("request_hash").raw_answer.nunique() == 1).all()


class PixelMean(GlobalExtractor):
    """Toy differentiable backbone: the mean of each colour channel (a margin oracle for robustness)."""

    name, differentiable = "pixel_mean", True

    def identity(self):
        return {"hash": "pixel-mean"}

    def forward(self, pixels, records):
        m = pixels.mean(dim=(2, 3))
        return m, m, m


def test_fgsm_zero_is_identity_and_accuracy_falls_with_epsilon():
    # two classes by red intensity: class 0 below 0.5, class 1 above, margins spread over 0..20/255
    n = 64
    rng = np.random.default_rng(0)
    y = np.arange(n) % 2
    margin = rng.uniform(0.5 / 255, 20 / 255, n)
    red = np.where(y == 1, 0.5 + margin, 0.5 - margin)
    pixels = torch.full((n, 3, 4, 4), 0.5)
    pixels[:, 0] = torch.tensor(red, dtype=torch.float32)[:, None, None]
    ex = PixelMean()
    recs = pd.DataFrame({"image_id": [f"i{i}" for i in range(n)]})
    feats = GlobalFeatures(recs.image_id.to_numpy(), *[p.numpy() for p in ex.forward(pixels, recs)])
    cfg = load_config(
        linear_probe={
            "learning_rates": [0.05],
            "n_last_blocks": [1],
            "avgpool": [False],
            "epochs": 4,
            "epoch_length": 100,
            "batch_size": 64,
            "optimizer": "adam",
        }
    )
    probe = train_probe(feats, y, feats, y, cfg.linear_probe)
    # the decision boundary exactly at red = 0.5, so that every image's margin is the one drawn above
    head = probe.grid.heads[0]
    head.weight.data = torch.tensor([[-100.0, 0, 0], [100.0, 0, 0]])
    head.bias.data = torch.tensor([50.0, -50.0])
    from soco_pipeline.tasks.fgbmk.robustness import ProbedModel

    model = ProbedModel(ex, probe, recs)
    torch.testing.assert_close(fgsm(model, pixels, torch.as_tensor(y), 0.0), pixels, rtol=0, atol=0)
    rob = evaluate_robustness(
        "pixel_mean",
        ex,
        probe,
        pixels,
        y,
        recs,
        "subclass",
        cfg.robustness.model_copy(update={"epsilons": (0.0, 1, 2, 4, 8, 16)}),
    )
    for attack in ("fgsm", "pgd"):
        acc = rob[rob.attack == attack].sort_values("strength").accuracy.to_numpy()
        assert acc[0] == 100.0 and (np.diff(acc) <= 0).all() and acc[-1] < 60.0, acc


def test_two_levels_attacked_at_once_give_the_same_rows(small_set, tmp_path):
    """The demo's `workers: 2` attacks the fine and the coarse level at once (a tiny random ViT, one torch
    thread each): the rows equal one level after the other."""
    from soco_pipeline.backbones import parse_spec
    from soco_pipeline.features import cached_global
    from soco_pipeline.features.global_extractors import build_global_extractor
    from soco_pipeline.tasks.fgbmk.robustness import robustness_for_backbone

    cfg, items, _ = small_set
    vit = parse_spec(
        {"kind": "timm", "model": "vit_tiny_patch16_224", "input": {"nearest_multiple": 32}, "device": "cpu"},
        "vit_attacked",
    )
    policy = cfg.global_features.model_copy(update={"resize": 40, "crop": 32, "threads": 1})
    _, folder = cached_global(vit, items, str(tmp_path / "cache"), policy, {"device": "cpu"})
    extractor = build_global_extractor(vit, policy, {"device": "cpu"})
    tables = []
    for workers in (1, 2):
        run = cfg.model_copy(update={"global_features": policy.model_copy(update={"workers": workers})})
        tables.append(robustness_for_backbone("vit_attacked", extractor, folder, items, run))
    pd.testing.assert_frame_equal(tables[0], tables[1])
    assert set(tables[0].level) == {"subclass", "superclass"}
    assert {"clean", "fgsm", "pgd", "gaussian"} <= set(tables[0].attack)
