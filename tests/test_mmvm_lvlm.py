"""MMVM through the LVLM harness: a real loopback server (oracle, constant and free-text answerers, an LLM
matcher as judge), the tiny random transformers VLM, and VLMEvalKit workbooks scored like our rows."""

import random

import numpy as np
import pandas as pd
import pytest

from soco_pipeline.lvlm.backends import build_backend
from soco_pipeline.lvlm.backends.openai import OpenAIBackend
from soco_pipeline.lvlm.cache import AnswerCache
from soco_pipeline.lvlm.server import serve
from soco_pipeline.lvlm.specs import parse_spec
from soco_pipeline.storage import read_bytes
from soco_pipeline.tasks.mmvm.answers import exact_letter, judge_prompt, run_lvlm, score_predictions
from soco_pipeline.tasks.mmvm.generator import generate
from soco_pipeline.tasks.mmvm.metrics import accuracy_table
from soco_pipeline.tasks.mmvm.prompt import build_items, option_map
from tests.lvlm_helpers import content_key, openai_spec
from tests.test_mmvm_core import tiny_config
from tests.tiny_vlm import build_tiny_qwen2_vl

FORMS = ["{x}", "The answer is {x}.", "({x})", "{x}. {id}", "I pick option {x}, because the colour matches"]


@pytest.fixture(scope="module")
def items(tmp_path_factory):
    root = tmp_path_factory.mktemp("mmvm_lvlm")
    cfg = tiny_config(cases={"train": 1, "test": 5})
    t = generate(cfg, str(root / "gen"))
    return build_items(t["cases"], t["objects"], t["images"], cfg, str(root / "marked"))


def _key(items: pd.DataFrame) -> dict:
    return {content_key([read_bytes(r.frame0_marked), read_bytes(r.frame1_marked)], r.question): r
            for r in items.itertuples(index=False)}


def test_oracle_server_scores_100_by_exact_matching(items, tmp_path):
    key = _key(items)

    def answer(request, body):
        r = key[content_key(list(request.images), request.text)]
        form = FORMS[random.Random(r.item_id).randrange(len(FORMS))]
        return form.format(x=r.answer, id=r.answer_id)

    with serve(answer) as srv:
        spec = openai_spec(srv.base_url, "oracle")
        rows = run_lvlm(items, spec, OpenAIBackend(spec), AnswerCache(str(tmp_path / "cache")))
        assert srv.requests == len(items)
        again = run_lvlm(items, spec, OpenAIBackend(spec), AnswerCache(str(tmp_path / "cache")))
        assert srv.requests == len(items)  # the second run came from the cache
    assert rows["correct"].all() and (rows["method"] == "exact").all()
    assert rows["raw_answer"].tolist() == again["raw_answer"].tolist()


def test_constant_letter_scores_exactly_its_share(items, tmp_path):
    with serve(lambda request, body: "A") as srv:
        spec = openai_spec(srv.base_url, "always_a")
        rows = run_lvlm(items, spec, OpenAIBackend(spec), AnswerCache(str(tmp_path / "cache")))
    m = accuracy_table(rows, "always_a", "lvlm").set_index(["breakdown", "key"])
    test = items[items.split == "test"]
    assert m.loc[("overall", "all"), "accuracy"] == pytest.approx(100 * (test["answer"] == "A").mean())


def test_free_text_goes_to_the_judge_only_when_asked(items, tmp_path):
    key = _key(items)
    judge_seen = []

    def vlm(request, body):
        r = key[content_key(list(request.images), request.text)]
        if r.query_absent:
            return "None of them: not number 1 and not number 2"  # no exact match either
        other = 1 if r.answer_id != 1 else 2
        return f"It is object number {r.answer_id} and not number {other}"  # two option texts: no exact match

    def matcher(request, body):
        judge_seen.append(request.text)
        opts = request.text.rsplit("Options: ", 1)[1].split("\nAnswer: ")[0]
        said = request.text.rsplit("Answer: ", 1)[1]
        if said.startswith("None of them"):
            return list(option_map(opts))[-1]
        number = said.split("number ")[1].split(" ")[0]
        return next((k for k, v in option_map(opts).items() if v == number), "Z")

    with serve(vlm) as srv, serve(matcher) as jsrv:
        spec = openai_spec(srv.base_url, "chatty")
        plain = run_lvlm(items, spec, OpenAIBackend(spec), AnswerCache(str(tmp_path / "c1")))
        assert (plain["method"] == "none").all() and not plain["correct"].any() and not judge_seen
        judge = OpenAIBackend(openai_spec(jsrv.base_url, "judge"))
        judged = run_lvlm(items, spec, OpenAIBackend(spec), AnswerCache(str(tmp_path / "c1")), judge=judge)
    assert (judged["method"] == "judge").all() and judged["correct"].all()
    assert judged["judge_raw"].str.len().gt(0).all()
    assert "Example 5: \nQuestion: Here are two images." in judge_seen[0]


def test_exact_letter_follows_the_reference_rules():
    ch = {"A": "1", "B": "2", "C": "3", "D": "None of the above choices are correct"}
    assert exact_letter("B", ch) == "B"
    assert exact_letter("The answer is (C).", ch) == "C"
    assert exact_letter("A or B", ch) == ""  # two letters: no exact answer
    assert exact_letter("none of the above choices are correct", ch) == "D"  # by option text
    assert exact_letter("Z", ch) == "" and exact_letter("Cannot determine the answer", ch) == ""
    assert "in A, B, C, D (if they are valid options)" in judge_prompt("q", "A. 1\nB. 2\nC. 3\nD. x\n", "p")


def test_workbook_scores_like_our_rows(items, tmp_path):
    rng = np.random.default_rng(1)
    items = items[items.split == "test"].reset_index(drop=True)  # what an exported TSV holds

    def answer(request, body):
        return f"My answer: {'ABCDE'[int(rng.integers(5))]}"

    with serve(answer) as srv:
        spec = openai_spec(srv.base_url, "rand", max_concurrency=1)
        rows = run_lvlm(items, spec, OpenAIBackend(spec), AnswerCache(str(tmp_path / "cache")))
    book = pd.DataFrame({"index": np.arange(len(items)), "question": items["question"], "answer": items["answer"],
                         "match_type": items["match_type"], "prediction": rows["raw_answer"]})
    path = tmp_path / "model_MMVMBench.xlsx"
    book.to_excel(path, index=False)
    from soco_pipeline.tasks.mmvm.official import read_prediction_workbook

    scored = score_predictions(read_prediction_workbook(path))
    assert scored["parsed"].tolist() == rows["parsed"].tolist()
    ours = accuracy_table(rows, "m", "lvlm")
    theirs = accuracy_table(scored, "m", "lvlm")
    # the workbook names candidate counts by number, ours "all" for the whole set: compare the rest
    ours, theirs = ours[ours.breakdown != "candidates"], theirs[theirs.breakdown != "candidates"]
    merged = ours.merge(theirs, on=["breakdown", "key"])
    assert np.allclose(merged["accuracy_x"], merged["accuracy_y"]) and len(merged) == len(ours) == len(theirs)


def test_tiny_random_transformers_vlm_answers_every_item(items, tmp_path):
    folder = build_tiny_qwen2_vl(tmp_path / "model", list(items["question"].unique()))
    spec = parse_spec({"backend": "transformers", "model": str(folder), "device": "cpu", "dtype": "float32",
                       "batch_size": 2, "max_tokens": 4}, "tiny")
    few = items.head(3)
    rows = run_lvlm(few, spec, build_backend(spec), AnswerCache(str(tmp_path / "cache")))
    assert len(rows) == 3 and (rows["error"] == "").all() and (rows["raw_answer"].str.len() > 0).all()
    assert set(rows["method"]) <= {"exact", "none"}
    assert all(p == "" or p in option_map(o) for p, o in zip(rows["parsed"], few["options"], strict=True))


def test_vlmevalkit_judge_scores_read_like_upstream():
    from soco_pipeline.tasks.mmvm.answers import judge_hits, yes_no_judge_prompt

    hits = judge_hits(pd.Series(["The response is right. [YES]", "[NO]", "", None, "Yes"]))
    assert hits.tolist() == [True, False, False, False, True]
    p = yes_no_judge_prompt("Q?", "B. 2", "B")
    assert p.startswith("I asked a model a question: {Q?}. The model's response was: {B. 2}.") and "[NO]." in p
