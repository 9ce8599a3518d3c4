"""Ask an LVLM the FG-BMK questions through the project's harness (`lvlm.run.ask_requests`)."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from soco_pipeline.lvlm.backends import Backend
from soco_pipeline.lvlm.cache import AnswerCache
from soco_pipeline.lvlm.prompt import ChatRequest
from soco_pipeline.lvlm.run import ask_requests
from soco_pipeline.lvlm.specs import LvlmSpec
from soco_pipeline.storage import read_bytes
from soco_pipeline.tasks.fgbmk.answer_scoring import score_answers

ANSWER_COLUMNS = [
    "model",
    "question_id",
    "group_id",
    "rotation",
    "task",
    "level",
    "form",
    "image",
    "class",
    "subclass",
    "superclass",
    "options",
    "raw_answer",
    "parsed",
    "method",
    "correct",
    "correct_published",
    "latency_s",
    "attempts",
    "error",
    "request_hash",
    "simulated",
]


def ask(
    questions: pd.DataFrame,
    spec: LvlmSpec,
    backend: Backend,
    cache: AnswerCache,
    log: Callable[[str], None] = lambda _m: None,
) -> pd.DataFrame:
    """ANSWER_COLUMNS rows of one model on every question, scored (a failed request scores wrong)."""
    rows = questions.reset_index(drop=True)
    n = len(rows)
    uris, texts, ids = rows.uri.tolist(), rows.text.tolist(), rows.question_id.tolist()
    got = ask_requests(
        n,
        lambda i: ChatRequest((read_bytes(uris[i]),), texts[i]),
        spec,
        backend,
        cache,
        labels=lambda i: f"question {ids[i]}",
        log=log,
    )
    out = rows.copy()
    out["model"] = spec.name
    out["raw_answer"] = got.text.astype(str).tolist()
    out["latency_s"] = got.latency_s
    out["attempts"] = got.attempts
    out["error"] = got.error.astype(str).tolist()
    out["request_hash"] = got.request_hash.astype(str)
    scored = score_answers(out)
    log(f"{spec.name}: {n} FG-BMK answers, {n - got.sent} from the cache, {got.errors} errors")
    return scored[ANSWER_COLUMNS]
