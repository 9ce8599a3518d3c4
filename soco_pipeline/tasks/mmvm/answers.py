"""LVLMs on MMVM items through the SOCO harness, and answer extraction as MMVMEvalKit does it: exact
matching, then optionally an LLM judge in a published mode (`matcher`, `yes_no`); docs/mmvm.md, "LVLMs"."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from soco_pipeline.lvlm.backends import Backend, Reply
from soco_pipeline.lvlm.cache import AnswerCache
from soco_pipeline.lvlm.prompt import ChatRequest
from soco_pipeline.lvlm.run import LvlmRunError, ask_requests, error_rate_exceeded
from soco_pipeline.lvlm.specs import LvlmSpec
from soco_pipeline.storage import read_bytes
from soco_pipeline.tasks.mmvm.prompt import ITEM_KEYS, QUESTION, option_map, options_of

ANSWER_COLUMNS = [
    "model",
    *ITEM_KEYS,
    "raw_answer",
    "parsed",
    "extraction",
    "judge_mode",
    "judge_raw",
    "judge_status",
    "correct",
    "latency_s",
    "attempts",
    "error",
    "request_hash",
]
JUDGE_MODES = ("off", "matcher", "yes_no")
REFUSALS = (
    "Sorry, I can't help with images of people yet.",
    "I can't process this file.",
    "I'm sorry, but without the image provided",
    "Cannot determine the answer",
)
API_FAILURE = "Failed to obtain answer via API"
_PUNCT = str.maketrans({c: " " for c in ".()[],:;!*#{}"})
JUDGE_ATTEMPTS = 3
NO_OPTION = "Z"  # what `infer_option` returns for a decided "no option" (a refusal or a lone Z)

_EXAMPLES = (
    (
        "Options: A. 1\nB. 2\nC. 3\nD. 4\nE. None of the above choices are correct\n",
        "E. None of the above choices are correct",
        "E",
    ),
    (
        "Options: A. 1\nB. 2\nC. 3\nD. 4\nE. 5\nF. None of the above choices are correct\n",
        "The object marked with a cyan contour in the first image is identified as number 4.",
        "D",
    ),
    (
        "Options: A. 1\nB. 2\nC. 3\nD. 4\nE. 5\nF. 6\nG. None of the above choices are correct\n",
        "The object marked with a cyan contour in the first image is the same as the object marked with a cyan "
        "tour in the second image. Therefore, the answer is:\nA. 1",
        "A",
    ),
    ("Options: A. 1\nB. 2\nC. 3\nD. 4\nE. None of the above choices are correct\n", "B", "B"),
)


def infer_option(answer: object, choices: dict[str, str]) -> str:
    """MMVMEvalKit's `can_infer` of one answer: an option letter, NO_OPTION (a refusal or a lone Z) or ""."""
    text = str(answer)
    if API_FAILURE not in text:
        if any(r in text for r in REFUSALS):
            return NO_OPTION
        words = text.translate(_PUNCT).split()
        hits = [c for c in choices if c in words]
        if len(hits) == 1:
            return hits[0]
        if not hits and NO_OPTION in words:
            return NO_OPTION
    low = text.lower()
    by_text = [k for k, v in choices.items() if str(v).lower() in low]
    return by_text[0] if len(by_text) == 1 else ""


def exact_letter(answer: object, choices: dict[str, str]) -> str:
    """The option letter an answer names by MMVMEvalKit's exact matching, or "" (none, refused, or Z)."""
    letter = infer_option(answer, choices)
    return letter if letter in choices else ""


def judge_prompt(question: str, options: str, prediction: str) -> str:
    """The published matcher prompt (MMVMEvalKit `build_prompt_mmatch`) for one answer."""
    head = ", ".join(option_map(options))
    text = (
        "You are an AI assistant who will help me to match an answer with several options of a single-choice "
        "question. You are provided with a question, several options, and an answer, and you need to find "
        "which option is most similar to the answer. If the meaning of all options are significantly "
        "different from the answer, output Z. Your should output a single uppercase character in "
        f"{head} (if they are valid options), and Z. \n"
    )
    for k, (opts, ans, out) in enumerate(_EXAMPLES, start=1):
        text += f"Example {k}: \nQuestion: {QUESTION}{opts}Answer: {ans}\nYour output: {out}\n"
    # the reference passes the bare template as the question and the options block separately
    return (
        text + f"Example 5: \nQuestion: {QUESTION}\nOptions: {options}\nAnswer: {prediction}\nYour output: "
    )


# Upstream VLMEvalKit's MMVMBench judge: its YES tags, read as substrings of the reply.
YES_TAGS = ("[YES]", "[Yes]", "[yes]", "YES", "Yes", "yes")


def yes_no_judge_prompt(question: str, prediction: str, answer: str) -> str:
    """VLMEvalKit MMVMBench's judge prompt for one row (each field wrapped in braces, as there)."""
    return (
        f"I asked a model a question: {{{question}}}. The model's response was: {{{prediction}}}. "
        f"The correct answer to this question is: {{{answer}}}. Please determine whether the model's "
        "response is correct. If it is, conclude with [YES]. If it is not, conclude with [NO]."
    )


def judge_hits(scores: pd.Series) -> pd.Series:
    """VLMEvalKit's reading of its judge replies: a hit iff any YES tag occurs (a plain substring test)."""
    s = scores.fillna("").astype(str)
    return s.apply(lambda v: any(tag in v for tag in YES_TAGS))


@dataclass(frozen=True)
class Judge:
    """An LLM judge of LVLM answers in a published mode (`matcher` | `yes_no`), with its error guards."""

    backend: Backend
    mode: str = "matcher"
    generation: dict | None = None
    cache: AnswerCache | None = None
    name: str = "judge"
    max_error_rate: float = 0.1
    max_consecutive_failures: int = 25

    def __post_init__(self) -> None:
        if self.mode not in JUDGE_MODES[1:]:
            raise ValueError(f"judge mode {self.mode!r}: use one of {list(JUDGE_MODES[1:])}")

    def ask(self, prompts: list[str], attempt: int = 0) -> list[Reply]:
        """One reply per prompt, through `ask_requests` (cache, retries); the judge's own `guard` applies."""
        gen = dict(self.generation or {}) | {"judge_mode": self.mode, "attempt": attempt}
        unguarded = LvlmSpec(self.name, "judge", "", max_consecutive_failures=0, max_error_rate=1.0)
        got = ask_requests(
            len(prompts),
            lambda i: ChatRequest((), prompts[i]),
            unguarded,
            self.backend,
            self.cache,
            generation=gen,
        )
        rows = zip(got.text, got.latency_s, got.attempts, got.error, strict=True)
        return [Reply(str(t), float(s), int(a), str(e)) for t, s, a, e in rows]

    def guard(self, failed: np.ndarray, first_error: str) -> None:
        """Raise LvlmRunError when the failures (in the order the rows were asked) break either guard."""
        failed = np.asarray(failed, bool)
        n, n_failed = len(failed), int(failed.sum())
        run = longest_run(failed)
        limit = int(self.max_consecutive_failures)
        if limit and run >= limit:
            raise LvlmRunError(
                f"MMVM judge {self.name} ({self.mode}): {run} rows in a row failed (first: {first_error}); is "
                f"its server up, its key right, its replies readable? Every reply received is cached: a rerun "
                f"resumes there"
            )
        if error_rate_exceeded(n_failed, n, float(self.max_error_rate)):
            raise LvlmRunError(
                f"MMVM judge {self.name} ({self.mode}): failed on {n_failed} of {n} rows, more than "
                f"max_error_rate {self.max_error_rate:g} allows; no score is posted. First failure: "
                f"{first_error}. Fix the judge (or raise max_error_rate in its spec)"
            )


def longest_run(flags: np.ndarray) -> int:
    """The length of the longest run of True in a boolean vector."""
    f = np.concatenate([[0], np.asarray(flags, np.int8), [0]])
    edges = np.flatnonzero(np.diff(f))
    return int((edges[1::2] - edges[::2]).max()) if len(edges) else 0


def build_judge(
    spec, mode: str, cache: AnswerCache | None = None, api_key: str | None = None
) -> Judge | None:
    """The judge of an LVLM spec in a published mode, or None for "off" (yes_no at temperature 0)."""
    if mode == "off" or spec is None:
        return None
    from soco_pipeline.lvlm.backends import build_backend

    if mode == "yes_no":
        spec = replace(spec, temperature=0.0)
    return Judge(
        build_backend(spec, api_key=api_key),
        mode,
        spec.generation(),
        cache,
        name=spec.name,
        max_error_rate=float(getattr(spec, "max_error_rate", 0.1)),
        max_consecutive_failures=int(getattr(spec, "max_consecutive_failures", 25) or 0),
    )


def judge_from_config(cfg, cache: AnswerCache | None = None) -> Judge | None:
    """The judge an MmvmConfig asks for (`judge: {mode, spec}`), or None when it is off (the default)."""
    path = cfg.judge.spec_path()
    if path is None:
        return None
    from soco_pipeline.lvlm.specs import load_spec

    return build_judge(load_spec(path), cfg.judge.mode, cache=cache)


def has_prediction(raw: np.ndarray) -> np.ndarray:
    """Which rows hold a prediction: not None and not NaN (whitespace counts, as in VLMEvalKit)."""
    return ~pd.isna(pd.Series(np.asarray(raw, dtype=object), dtype=object)).to_numpy()


def _matcher(
    raw: np.ndarray, items: pd.DataFrame, open_rows: np.ndarray, judge: Judge
) -> tuple[list, list, list, np.ndarray, np.ndarray]:
    """(letters, replies, errors, decided, failed) by MMVMEvalKit's matcher rule (up to 3 attempts)."""
    n = len(raw)
    letters, replies, errors = [""] * n, [""] * n, [""] * n
    decided = np.zeros(n, bool)
    choices = [option_map(o) for o in items["options"]]
    asked = [int(i) for i in np.flatnonzero(open_rows)]
    open_ = list(asked)
    for attempt in range(JUDGE_ATTEMPTS):
        if not open_:
            break
        got = judge.ask(
            [judge_prompt(items["question"].iat[i], items["options"].iat[i], str(raw[i])) for i in open_],
            attempt,
        )
        still = []
        for i, reply in zip(open_, got, strict=True):
            replies[i], errors[i] = reply.text, reply.error
            letter = "" if reply.error or API_FAILURE in reply.text else infer_option(reply.text, choices[i])
            if letter == "":
                still.append(i)  # an API failure or no single option: ask again
            else:
                letters[i] = letter if letter in choices[i] else ""  # Z: the judge's "no option" ends it
                decided[i] = True
        open_ = still
    failed = np.zeros(n, bool)
    failed[open_] = True
    order = np.array(asked, dtype=np.int64)
    first = next((f"row {i}: {errors[i] or repr(replies[i][:80])}" for i in asked if failed[i]), "")
    judge.guard(failed[order], first)
    return letters, replies, errors, decided, failed


NO_TAGS = ("[NO]", "[No]", "[no]", "NO", "No", "no")


def extract(
    raw: np.ndarray,
    items: pd.DataFrame,
    judge: Judge | None = None,
    answers: pd.Series | None = None,
    asked_rows: np.ndarray | None = None,
) -> pd.DataFrame:
    """Per answer: `parsed`, `extraction` (exact | no_option | judge | none) and the judge's columns; the
    matcher sees the rows exact matching leaves empty, yes_no every row with a prediction."""
    raw = np.asarray(raw, dtype=object)
    n = len(raw)
    present = has_prediction(raw) if asked_rows is None else np.asarray(asked_rows, bool)
    inferred = [infer_option(text, option_map(o)) for text, o in zip(raw, items["options"], strict=True)]
    choices = [option_map(o) for o in items["options"]]
    parsed = [v if v in c else "" for v, c in zip(inferred, choices, strict=True)]
    settled = np.array([v == NO_OPTION and v not in c for v, c in zip(inferred, choices, strict=True)])
    out = pd.DataFrame(
        {
            "parsed": parsed,
            "extraction": np.where(
                [bool(p) for p in parsed], "exact", np.where(settled, "no_option", "none")
            ),
            "judge_mode": "off" if judge is None else judge.mode,
            "judge_raw": "",
            "judge_status": "",
            "judge_error": "",
            "judge_correct": np.nan,
        }
    )
    if judge is None or n == 0:
        return out
    if judge.mode == "matcher":
        open_rows = (out["extraction"].to_numpy() == "none") & present
        letters, replies, errors, decided, failed = _matcher(raw, items, open_rows, judge)
        out.loc[open_rows, "parsed"] = np.asarray(letters, dtype=object)[open_rows]
        out["judge_raw"] = replies
        out["judge_error"] = errors
        out.loc[decided, "extraction"] = "judge"
        out.loc[decided, "judge_status"] = "decided"
        out.loc[failed, "judge_status"] = "failed"
        return out
    gt = (items["answer"] if answers is None else answers).astype(str).to_numpy()
    asked = np.flatnonzero(present)
    got = judge.ask([yes_no_judge_prompt(items["question"].iat[i], str(raw[i]), gt[i]) for i in asked])
    text = pd.Series([r.text for r in got], dtype=object)
    err = np.array([r.error for r in got], dtype=object)
    hits = judge_hits(text).to_numpy() & (err == "")
    said = hits | text.map(lambda v: any(tag in str(v) for tag in NO_TAGS)).to_numpy()
    failed = (err != "") | ~said
    first = next(
        (f"row {asked[k]}: {err[k] or repr(str(text.iat[k])[:80])}" for k in np.flatnonzero(failed)), ""
    )
    judge.guard(failed, first)
    verdict = np.zeros(n, bool)
    verdict[asked] = hits
    out["judge_correct"] = verdict
    out.loc[asked, "judge_raw"] = text.to_numpy()
    out.loc[asked, "judge_error"] = err
    out.loc[asked[err == ""], "extraction"] = "judge"
    out.loc[asked, "judge_status"] = np.where(failed, "failed", "decided")
    return out


def run_lvlm(
    items: pd.DataFrame,
    spec,
    backend: Backend,
    cache: AnswerCache,
    judge: Judge | None = None,
    log: Callable[[str], None] = lambda _m: None,
) -> pd.DataFrame:
    """ANSWER_COLUMNS rows of one model on the items (a judge error is recorded as "judge: ...")."""
    items = items.reset_index(drop=True)
    n = len(items)
    frames0, frames1 = items["frame0_marked"].tolist(), items["frame1_marked"].tolist()
    questions, ids = items["question"].tolist(), items["item_id"].tolist()
    got = ask_requests(
        n,
        lambda i: ChatRequest((read_bytes(frames0[i]), read_bytes(frames1[i])), questions[i]),
        spec,
        backend,
        cache,
        labels=lambda i: f"item {ids[i]}",
        log=log,
    )
    raw, error, latency, attempts, keys = got.text, got.error, got.latency_s, got.attempts, got.request_hash
    log(f"{spec.name}: {n} MMVM answers, {n - got.sent} from the cache, {got.errors} errors")
    ex = extract(raw, items, judge, asked_rows=error == "")
    out = items[ITEM_KEYS].copy()
    out.insert(0, "model", spec.name)
    out["raw_answer"] = raw.astype(str)
    for col in ("parsed", "extraction", "judge_mode", "judge_raw", "judge_status"):
        out[col] = ex[col].to_numpy()
    right = (
        ex["judge_correct"].to_numpy(bool)
        if judge is not None and judge.mode == "yes_no"
        else (out["parsed"].to_numpy() == out["answer"].to_numpy()) & (out["parsed"].to_numpy() != "")
    )
    judge_err = ex["judge_error"].to_numpy()
    error = np.where((error == "") & (judge_err != ""), "judge: " + judge_err.astype(str), error)
    out["correct"] = right & (error == "")
    out["latency_s"] = latency
    out["attempts"] = attempts
    out["error"] = error.astype(str)
    out["request_hash"] = keys.astype(str)
    if judge is not None:
        log(
            f"{spec.name}: judge {judge.name} ({judge.mode}) decided {int((out['judge_status'] == 'decided').sum())} "
            f"rows and failed on {int((out['judge_status'] == 'failed').sum())}"
        )
    return out[ANSWER_COLUMNS]


def score_predictions(
    table: pd.DataFrame, judge: Judge | None = None, where: str = "workbook"
) -> pd.DataFrame:
    """Per-row extraction and correctness of a workbook's predictions by the rules of our answers."""
    from soco_pipeline.tasks.mmvm.official import MmvmFormatError

    t = table.reset_index(drop=True).copy()
    if "choices" in t and t["choices"].notna().all() and (t["choices"].astype(str).str.strip() != "").all():
        t["options"] = t["choices"].astype(str)
    else:
        t["options"] = t["question"].astype(str).map(options_of)
    letters = t["options"].map(lambda o: list(option_map(o)))
    written = t["answer"].astype(str)
    t["answer"] = written.str.strip().str.extract(r"^\(?([A-Z])(?:[.):\s]|$)", expand=False).fillna("")
    valid = np.array([a in ls for a, ls in zip(t["answer"], letters, strict=True)])
    if not valid.all():
        k = int(np.flatnonzero(~valid)[0])
        idx = t["index"].iat[k] if "index" in t else k
        raise MmvmFormatError(
            f"{where}: row {k + 2} (index {idx}): answer {table['answer'].iat[k]!r} is not one of its options "
            f"{letters.iat[k]}; {int((~valid).sum())} row(s) like it. Fix the answer cell (a letter such as "
            f"'B') or the row's options"
        )
    pred = t["prediction"]
    raw = pred.to_numpy(dtype=object)
    if judge is None or judge.mode == "matcher":
        raw = np.array([str(x) for x in raw], dtype=object)  # MMVMEvalKit: str() of every cell, NaN -> "nan"
    ex = extract(
        raw,
        t,
        judge,
        answers=written,
        asked_rows=np.ones(len(t), bool) if judge is not None and judge.mode == "matcher" else None,
    )
    for col in ("parsed", "extraction", "judge_mode", "judge_raw", "judge_status", "judge_error"):
        t[col] = ex[col].to_numpy()
    if judge is not None and judge.mode == "yes_no":
        t["correct"] = ex["judge_correct"].to_numpy(bool)
    else:
        t["correct"] = (t["parsed"] == t["answer"]) & (t["parsed"] != "")
    t["prediction"] = pred.fillna("").astype(str)
    t["n_candidates"] = letters.map(lambda ls: max(len(ls) - 1, 1))
    t["none_letter"] = letters.map(lambda ls: ls[-1] if ls else "")
    t["query_absent"] = t["answer"] == t["none_letter"]
    t["count_label"] = t["n_candidates"].astype(str)
    t["split"] = "test"
    return t
