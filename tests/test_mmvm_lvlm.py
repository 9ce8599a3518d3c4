"""MMVM through the LVLM harness: a real loopback server (oracle, constant and free-text answerers, an LLM
matcher as judge), the tiny random transformers VLM, and VLMEvalKit workbooks scored like our rows."""

import random

import numpy as np
import pandas as pd
import pytest

from soco_pipeline.lvlm.backends import build_backend
from soco_pipeline.lvlm.backends.openai import OpenAIBackend
from soco_pipeline.lvlm.cache import AnswerCache
from soco_pipeline.lvlm.server import HttpReply, serve
from soco_pipeline.lvlm.specs import parse_spec
from soco_pipeline.storage import read_bytes
from soco_pipeline.tasks.mmvm.answers import (
    Judge,
    build_judge,
    exact_letter,
    judge_prompt,
    run_lvlm,
    score_predictions,
)
from soco_pipeline.tasks.mmvm.generator import generate
from soco_pipeline.tasks.mmvm.metrics import accuracy_table
from soco_pipeline.tasks.mmvm.prompt import build_items, option_map
from tests.lvlm_helpers import content_key, openai_spec
from tests.test_mmvm_core import tiny_config
from tests.tiny_vlm import build_tiny_qwen2_vl

pytestmark = pytest.mark.unit

FORMS = ["{x}", "The answer is {x}.", "({x})", "{x}. {id}", "I pick option {x}, because the colour matches"]


@pytest.fixture(scope="module")
def items(tmp_path_factory):
    root = tmp_path_factory.mktemp("mmvm_lvlm")
    cfg = tiny_config(cases={"train": 1, "test": 5})
    t = generate(cfg, str(root / "gen"))
    return build_items(t["cases"], t["objects"], t["images"], cfg, str(root / "marked"))


def _key(items: pd.DataFrame) -> dict:
    return {
        content_key([read_bytes(r.frame0_marked), read_bytes(r.frame1_marked)], r.question): r
        for r in items.itertuples(index=False)
    }


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
    assert rows["correct"].all() and (rows["extraction"] == "exact").all()
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
        assert (plain["extraction"] == "none").all() and not plain["correct"].any() and not judge_seen
        judge = Judge(OpenAIBackend(openai_spec(jsrv.base_url, "judge")), "matcher")
        judged = run_lvlm(items, spec, OpenAIBackend(spec), AnswerCache(str(tmp_path / "c1")), judge=judge)
        # one matcher call per distinct row prompt (identical ones asked once), each settled at the first attempt
        assert jsrv.requests == len(judge_seen) == len(set(judge_seen)) > 1
    assert (judged["judge_status"] == "decided").all()
    assert (judged["extraction"] == "judge").all() and judged["correct"].all()
    assert (judged["judge_mode"] == "matcher").all()
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
        # the same items through VLMEvalKit's TSV: the imported frames are the same bytes, so the same requests
        from soco_pipeline.tasks.mmvm.official import export_vlmevalkit, import_vlmevalkit

        export_vlmevalkit(items, str(tmp_path / "MMVMBench.tsv"))
        imported = import_vlmevalkit(str(tmp_path / "MMVMBench.tsv"), str(tmp_path / "imgs"))
        via_tsv = run_lvlm(imported, spec, OpenAIBackend(spec), AnswerCache(str(tmp_path / "cache")))
        assert srv.requests == len(items)  # every imported item hit the cache
    assert via_tsv["request_hash"].tolist() == rows["request_hash"].tolist()
    assert via_tsv["correct"].tolist() == rows["correct"].tolist()
    book = pd.DataFrame(
        {
            "index": np.arange(len(items)),
            "question": items["question"],
            "answer": items["answer"],
            "match_type": items["match_type"],
            "prediction": rows["raw_answer"],
        }
    )
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
    spec = parse_spec(
        {
            "backend": "transformers",
            "model": str(folder),
            "device": "cpu",
            "dtype": "float32",
            "batch_size": 2,
            "max_tokens": 4,
        },
        "tiny",
    )
    few = items.head(3)
    rows = run_lvlm(few, spec, build_backend(spec), AnswerCache(str(tmp_path / "cache")))
    assert len(rows) == 3 and (rows["error"] == "").all() and (rows["raw_answer"].str.len() > 0).all()
    assert set(rows["extraction"]) <= {"exact", "none"}
    assert all(p == "" or p in option_map(o) for p, o in zip(rows["parsed"], few["options"], strict=True))


def test_vlmevalkit_judge_scores_read_like_upstream():
    from soco_pipeline.tasks.mmvm.answers import judge_hits, yes_no_judge_prompt

    hits = judge_hits(pd.Series(["The response is right. [YES]", "[NO]", "", None, "Yes"]))
    assert hits.tolist() == [True, False, False, False, True]
    p = yes_no_judge_prompt("Q?", "B. 2", "B")
    assert (
        p.startswith("I asked a model a question: {Q?}. The model's response was: {B. 2}.") and "[NO]." in p
    )


def _mixed_answerer(key: dict):
    """An LVLM behind the server: per item (by a seeded draw) the right letter, a wrong letter, free text
    naming the right object's ID (no exact match), or an HTTP 400 (no prediction at all)."""

    def vlm(request, body):
        r = key[content_key(list(request.images), request.text)]
        kind = random.Random(f"mixed:{r.item_id}").randrange(4)
        letters = list(option_map(r.options))
        if kind == 0:
            return f"The answer is {r.answer}."
        if kind == 1:
            return next(x for x in letters if x != r.answer)
        if kind == 2:
            named = "none of them" if r.query_absent else f"the one with ID {r.answer_id}"
            return f"Either {letters[0]} or {letters[1]} (IDs 1 and 2 look alike): I would say {named}"
        return HttpReply(400, b'{"error": "image too large"}')

    return vlm


def _yes_no_judge(seen: list):
    """The VLMEvalKit judge behind a server: reads the braced response and answer of its prompt and says
    [YES] iff the response names the right letter alone, or the right ID / "none of them" in words."""

    def judge(request, body):
        seen.append((request.text, body.get("temperature")))
        text = request.text
        response = text.split("The model's response was: {", 1)[1].split("}. The correct answer", 1)[0]
        answer = text.split("The correct answer to this question is: {", 1)[1].split("}. Please", 1)[0]
        opts = option_map(
            text.split("Please make a choice from the following options: \n", 1)[1].split("}.")[0]
        )
        said = exact_letter(response, opts)
        words = response.rsplit(": I would say ", 1)[-1]
        right = (
            said == answer
            or words == f"the one with ID {opts[answer]}"
            or (words == "none of them" and answer == list(opts)[-1])
        )
        return "The response matches. [YES]" if right else "It does not. [NO]"

    return judge


def _expected(items: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(kind per item, whether the yes_no judge must call it right) of the mixed answerer."""
    kind = np.array([random.Random(f"mixed:{i}").randrange(4) for i in items["item_id"]])
    return kind, np.isin(kind, [0, 2])


def test_yes_no_judge_is_asked_for_every_answered_row(items, tmp_path):
    """VLMEvalKit's judge: asked for every row that has a prediction (exact or not), at temperature 0; a
    row is right iff the reply holds a YES tag; a row without a prediction is not asked and counts wrong.
    The matcher is asked only where exact matching fails. Judge calls are counted at the judge's server."""
    items = items.reset_index(drop=True)
    kind, right = _expected(items)
    assert set(kind) == {0, 1, 2, 3}  # every branch is exercised
    seen: list = []
    with serve(_mixed_answerer(_key(items))) as srv, serve(_yes_no_judge(seen)) as jsrv:
        spec = openai_spec(
            srv.base_url, "mixed", retries=0, max_error_rate=1.0
        )  # a quarter fails: on purpose
        jspec = openai_spec(jsrv.base_url, "judge", temperature=0.7)
        cache = AnswerCache(str(tmp_path / "answers"))
        judge = build_judge(jspec, "yes_no", cache=AnswerCache(str(tmp_path / "judge")))
        rows = run_lvlm(items, spec, OpenAIBackend(spec), cache, judge=judge)
        # every answered row, exact match or not (identical prompts asked once: lvlm.run.ask_requests)
        asked = jsrv.requests
        assert asked == len({t for t, _ in seen}) and (rows.loc[kind != 3, "judge_status"] != "").all()
        assert {t for _, t in seen} == {0.0}  # the spec said 0.7: VLMEvalKit forces 0
        again = run_lvlm(items, spec, OpenAIBackend(spec), cache, judge=judge)
        assert jsrv.requests == asked  # the judge's replies came from its cache
        pd.testing.assert_frame_equal(rows.drop(columns="latency_s"), again.drop(columns="latency_s"))
        matcher_seen = []
        with serve(lambda request, body: matcher_seen.append(1) or "Z") as msrv:
            matcher = Judge(OpenAIBackend(openai_spec(msrv.base_url, "matcher")), "matcher")
            matched = run_lvlm(items, spec, OpenAIBackend(spec), cache, judge=matcher)
            assert msrv.requests == int((kind == 2).sum())  # only where exact matching failed; Z ends it
    assert rows["correct"].tolist() == right.tolist()
    assert rows["extraction"].tolist() == np.where(kind == 3, "none", "judge").tolist()
    assert (rows.loc[kind != 3, "judge_raw"].str.contains(r"\[(?:YES|NO)\]")).all()
    assert (rows.loc[kind == 3, "judge_raw"] == "").all() and (rows.loc[kind == 3, "error"] != "").all()
    assert (rows["judge_mode"] == "yes_no").all()
    # the YES/NO prompt carries the full question (options included), the response and the answer letter
    first = items.index[kind != 3][0]
    assert any(
        t.startswith(
            "I asked a model a question: {" + items.at[first, "question"] + "}. The model's response was: {"
        )
        for t, _ in seen
    )
    assert (
        matched["extraction"].tolist()
        == np.where(
            kind == 0, "exact", np.where(kind == 1, "exact", np.where(kind == 2, "judge", "none"))
        ).tolist()
    )
    assert matched["correct"].tolist() == (kind == 0).tolist()
    m = accuracy_table(rows, "mixed", "lvlm").set_index(["breakdown", "key"])
    test = items["split"].to_numpy() == "test"
    assert m.loc[("overall", "all"), "accuracy"] == pytest.approx(100 * right[test].mean())


def test_yes_no_judge_scores_a_workbook_like_our_rows(items, tmp_path):
    """The same judge on a VLMEvalKit workbook of the same predictions gives the same rows' verdicts;
    an empty prediction cell (no answer) is not asked, as VLMEvalKit skips NaN predictions."""
    items = items[items.split == "test"].reset_index(drop=True)
    kind, right = _expected(items)
    seen: list = []
    with serve(_mixed_answerer(_key(items))) as srv, serve(_yes_no_judge(seen)) as jsrv:
        spec = openai_spec(
            srv.base_url, "mixed", retries=0, max_error_rate=1.0
        )  # a quarter fails: on purpose
        judge = build_judge(openai_spec(jsrv.base_url, "judge"), "yes_no")
        rows = run_lvlm(items, spec, OpenAIBackend(spec), AnswerCache(str(tmp_path / "c")), judge=judge)
        book = pd.DataFrame(
            {
                "index": np.arange(len(items)),
                "question": items["question"],
                "answer": items["answer"],
                "match_type": items["match_type"],
                "prediction": np.where(rows["error"] == "", rows["raw_answer"], ""),
            }
        )
        path = tmp_path / "model_MMVMBench.xlsx"
        book.to_excel(path, index=False)
        from soco_pipeline.tasks.mmvm.official import read_prediction_workbook

        before, shown = jsrv.requests, len(seen)
        scored = score_predictions(read_prediction_workbook(path), judge=judge)
        assert jsrv.requests - before == len({t for t, _ in seen[shown:]})  # identical prompts asked once
        assert (scored.loc[kind != 3, "judge_status"] != "").all()
    assert scored["correct"].tolist() == rows["correct"].tolist() == right.tolist()
    ours, theirs = accuracy_table(rows, "m", "lvlm"), accuracy_table(scored, "m", "lvlm")
    ours, theirs = ours[ours.breakdown != "candidates"], theirs[theirs.breakdown != "candidates"]
    merged = ours.merge(theirs, on=["breakdown", "key"])
    assert np.allclose(merged["accuracy_x"], merged["accuracy_y"]) and len(merged) == len(ours)


def test_judge_off_builds_nothing_and_bad_modes_are_named(tmp_path):
    from soco_pipeline.tasks.mmvm.answers import judge_from_config

    assert build_judge(None, "off") is None and judge_from_config(tiny_config()) is None
    (tmp_path / "judge.yaml").write_text("backend: openai\nmodel: judge\nbase_url: http://127.0.0.1:9\n")
    cfg = tiny_config(judge={"mode": "yes_no", "spec": str(tmp_path / "judge.yaml")})
    judge = judge_from_config(cfg)
    assert judge.mode == "yes_no" and judge.generation["temperature"] == 0.0
    with pytest.raises(ValueError, match="judge mode 'gpt'"):
        Judge(backend=None, mode="gpt")
