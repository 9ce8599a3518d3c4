"""LVLMs on MMVM items through the SOCO harness (backends, answer cache, retries), and answer extraction.

Request: the marked frame 1, the marked frame 2, then the question text (the published template and its
options), as VLMEvalKit sends a multi-image item. Extraction follows MMVMEvalKit:

1. exact matching (`can_infer`): punctuation ``.()[],:;!*#{}`` becomes spaces; when exactly one option
   letter stands alone among the words, that letter; else, when exactly one option's text occurs in the
   lower-cased answer, that option; refusal phrases and a lone ``Z`` give no answer;
2. optionally (off by default) an LLM matcher, any OpenAI-compatible spec, given the published matcher
   prompt (`build_prompt_mmatch`), its reply again read by exact matching; up to 3 attempts;
3. otherwise no answer (counted wrong). The reference then draws a random letter; we record "none".

Each row keeps the raw text, the parsed letter and the method (exact | judge | none).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd

from soco_pipeline.lvlm.backends import Backend
from soco_pipeline.lvlm.cache import AnswerCache
from soco_pipeline.lvlm.prompt import ChatRequest, request_key
from soco_pipeline.storage import read_bytes
from soco_pipeline.tasks.mmvm.prompt import QUESTION, option_map, options_of

ANSWER_COLUMNS = ["model", "item_id", "case_id", "split", "n_candidates", "count_label", "match_type",
                  "query_absent", "answer", "raw_answer", "parsed", "method", "judge_raw", "correct", "latency_s",
                  "attempts", "error", "request_hash"]
REFUSALS = ("Sorry, I can't help with images of people yet.", "I can't process this file.",
            "I'm sorry, but without the image provided", "Cannot determine the answer")
API_FAILURE = "Failed to obtain answer via API"
_PUNCT = str.maketrans({c: " " for c in ".()[],:;!*#{}"})
JUDGE_ATTEMPTS = 3

_EXAMPLES = (
    ("Options: A. 1\nB. 2\nC. 3\nD. 4\nE. None of the above choices are correct\n",
     "E. None of the above choices are correct", "E"),
    ("Options: A. 1\nB. 2\nC. 3\nD. 4\nE. 5\nF. None of the above choices are correct\n",
     "The object marked with a cyan contour in the first image is identified as number 4.", "D"),
    ("Options: A. 1\nB. 2\nC. 3\nD. 4\nE. 5\nF. 6\nG. None of the above choices are correct\n",
     "The object marked with a cyan contour in the first image is the same as the object marked with a cyan "
     "tour in the second image. Therefore, the answer is:\nA. 1", "A"),
    ("Options: A. 1\nB. 2\nC. 3\nD. 4\nE. None of the above choices are correct\n", "B", "B"),
)


def exact_letter(answer: object, choices: dict[str, str]) -> str:
    """The option letter an answer names by MMVMEvalKit's exact matching, or "" (none, refused, or Z)."""
    text = str(answer)
    if API_FAILURE in text or any(r in text for r in REFUSALS):
        return ""
    words = text.translate(_PUNCT).split()
    hits = [c for c in choices if c in words]
    if len(hits) == 1:
        return hits[0]
    if not hits and "Z" in words:
        return ""  # the matcher's "no option"
    low = text.lower()
    by_text = [k for k, v in choices.items() if str(v).lower() in low]
    return by_text[0] if len(by_text) == 1 else ""


def judge_prompt(question: str, options: str, prediction: str) -> str:
    """The published matcher prompt (MMVMEvalKit `build_prompt_mmatch`) for one answer."""
    head = ", ".join(option_map(options))
    text = ("You are an AI assistant who will help me to match an answer with several options of a single-choice "
            "question. You are provided with a question, several options, and an answer, and you need to find "
            "which option is most similar to the answer. If the meaning of all options are significantly "
            "different from the answer, output Z. Your should output a single uppercase character in "
            f"{head} (if they are valid options), and Z. \n")
    for k, (opts, ans, out) in enumerate(_EXAMPLES, start=1):
        text += f"Example {k}: \nQuestion: {QUESTION}{opts}Answer: {ans}\nYour output: {out}\n"
    # the reference passes the bare template as the question and the options block separately
    return text + f"Example 5: \nQuestion: {QUESTION}\nOptions: {options}\nAnswer: {prediction}\nYour output: "


def extract(raw: np.ndarray, items: pd.DataFrame, judge: Backend | None = None) -> tuple[list, list, list]:
    """(parsed letters, methods, judge replies) of raw answers; the judge is asked only where exact fails."""
    parsed, method, judged = [], [], []
    for text, it in zip(raw, items.itertuples(index=False), strict=True):  # free text: one parse per answer
        choices = option_map(it.options)
        letter = exact_letter(text, choices)
        if letter:
            parsed.append(letter), method.append("exact"), judged.append("")
            continue
        reply_text = ""
        if judge is not None:
            req = ChatRequest((), judge_prompt(it.question, it.options, str(text)))
            for _ in range(JUDGE_ATTEMPTS):
                reply = judge.answer_batch([req])[0]
                reply_text = reply.text
                letter = "" if reply.error else exact_letter(reply.text, choices)
                if letter:
                    break
        parsed.append(letter)
        method.append("judge" if letter else "none")
        judged.append(reply_text)
    return parsed, method, judged


def run_lvlm(items: pd.DataFrame, spec, backend: Backend, cache: AnswerCache, judge: Backend | None = None,
             log: Callable[[str], None] = lambda _m: None) -> pd.DataFrame:
    """ANSWER_COLUMNS rows of one model on the items: cached answers first, the rest through the backend in
    batches of its batch size on `max_concurrency` threads, each new answer cached at once."""
    items = items.reset_index(drop=True)
    n = len(items)
    generation = spec.generation()
    raw = np.full(n, "", dtype=object)
    error = np.full(n, "", dtype=object)
    latency, attempts = np.zeros(n), np.zeros(n, dtype=np.int64)
    keys = np.full(n, "", dtype=object)

    def work(chunk: list[int]) -> int:
        ask, reqs = [], []
        for i in chunk:
            req = ChatRequest((read_bytes(items.at[i, "frame0_marked"]), read_bytes(items.at[i, "frame1_marked"])),
                              items.at[i, "question"])
            keys[i] = request_key(req.text, req.image_digests(), generation)
            rec = cache.get(keys[i])
            if rec is not None:
                raw[i], latency[i], attempts[i] = rec["text"], rec["latency_s"], rec["attempts"]
            else:
                ask.append(i)
                reqs.append(req)
        if reqs:
            for i, reply in zip(ask, backend.answer_batch(reqs), strict=True):
                raw[i], latency[i], attempts[i], error[i] = reply.text, reply.latency_s, reply.attempts, reply.error
                if not reply.error:
                    cache.put(keys[i], {"text": reply.text, "latency_s": reply.latency_s, "attempts": reply.attempts})
        return len(reqs)

    batch = max(1, int(getattr(backend, "batch_size", 1)))
    chunks = [list(range(k, min(k + batch, n))) for k in range(0, n, batch)]
    with ThreadPoolExecutor(max_workers=max(1, int(getattr(backend, "max_concurrency", 1)))) as pool:
        asked = sum(pool.map(work, chunks))
    log(f"{spec.name}: {n} MMVM answers, {n - asked} from the cache, {int((error != '').sum())} errors")
    parsed, method, judged = extract(raw, items, judge)
    out = items[["item_id", "case_id", "split", "n_candidates", "count_label", "match_type", "query_absent",
                 "answer"]].copy()
    out.insert(0, "model", spec.name)
    out["raw_answer"] = raw.astype(str)
    out["parsed"] = parsed
    out["method"] = method
    out["judge_raw"] = judged
    out["correct"] = (out["parsed"] == out["answer"]) & (error == "")
    out["latency_s"] = latency
    out["attempts"] = attempts
    out["error"] = error.astype(str)
    out["request_hash"] = keys.astype(str)
    return out[ANSWER_COLUMNS]


def score_predictions(table: pd.DataFrame, judge: Backend | None = None) -> pd.DataFrame:
    """Per-row extraction and correctness of a prediction table (VLMEvalKit workbook rows: question, answer,
    match_type, prediction) by the same rules as our own answers."""
    t = table.copy()
    t["options"] = t["question"].map(options_of)
    t["answer"] = t["answer"].astype(str).str.strip().str.extract(r"^\(?([A-Z])", expand=False).fillna("")
    parsed, method, judged = extract(t["prediction"].astype(str).to_numpy(), t, judge)
    t["parsed"], t["method"], t["judge_raw"] = parsed, method, judged
    t["correct"] = t["parsed"] == t["answer"]
    letters = t["options"].map(lambda o: list(option_map(o)))
    t["n_candidates"] = letters.map(lambda ls: max(len(ls) - 1, 1))
    t["none_letter"] = letters.map(lambda ls: ls[-1] if ls else "")
    t["query_absent"] = t["answer"] == t["none_letter"]
    t["count_label"] = t["n_candidates"].astype(str)
    t["split"] = "test"
    return t


# Upstream VLMEvalKit's MMVMBench scores with a GPT judge instead of letter extraction (temperature 0).
YES_TAGS = ("[YES]", "[Yes]", "[yes]", "YES", "Yes", "yes")


def yes_no_judge_prompt(question: str, prediction: str, answer: str) -> str:
    """VLMEvalKit MMVMBench's judge prompt for one row (each field wrapped in braces, as there)."""
    return (f"I asked a model a question: {{{question}}}. The model's response was: {{{prediction}}}. "
            f"The correct answer to this question is: {{{answer}}}. Please determine whether the model's "
            "response is correct. If it is, conclude with [YES]. If it is not, conclude with [NO].")


def judge_hits(scores: pd.Series) -> pd.Series:
    """VLMEvalKit's reading of its judge replies (the `score` column of its _score workbook): a hit iff
    any of its YES tags occurs (note: a plain substring test, so "yes" inside other words counts too)."""
    s = scores.fillna("").astype(str)
    return s.apply(lambda v: any(tag in v for tag in YES_TAGS))
