"""Ask an LVLM the FG-BMK questions through the project's harness (soco_pipeline.lvlm): its backends
(retries, bounded concurrency), its answer cache (one file per request hash; a rerun asks only what is
missing) and its request hashing. Scoring is `answer_scoring`."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd

from soco_pipeline.lvlm.backends import Backend, Reply
from soco_pipeline.lvlm.cache import AnswerCache
from soco_pipeline.lvlm.prompt import ChatRequest, request_key
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
    model: str,
    backend: Backend,
    cache: AnswerCache,
    generation: dict,
    log: Callable[[str], None] = lambda _m: None,
) -> pd.DataFrame:
    """Answers of one model to every question (image at `uri`, prompt `text`), scored; ANSWER_COLUMNS rows.

    Cached answers are reused; the rest go to the backend in chunks of its batch size on `max_concurrency`
    threads. A failed request (after the backend's retries) is recorded with its error and scored wrong.
    """
    rows = questions.reset_index(drop=True)
    n = len(rows)
    uris, texts = rows.uri.tolist(), rows.text.tolist()
    keys = np.full(n, "", dtype=object)
    replies: list[Reply | None] = [None] * n
    hits = np.zeros(n, dtype=bool)

    def work(chunk: list[int]) -> None:
        todo, reqs = [], []
        for i in chunk:
            req = ChatRequest((read_bytes(uris[i]),), texts[i])
            keys[i] = request_key(req.text, req.image_digests(), generation)
            rec = cache.get(keys[i])
            if rec is not None:
                replies[i], hits[i] = Reply(rec["text"], rec["latency_s"], rec["attempts"]), True
            else:
                todo.append(i)
                reqs.append(req)
        if reqs:
            for i, reply in zip(todo, backend.answer_batch(reqs), strict=True):
                if not reply.error:
                    cache.put(
                        keys[i],
                        {"text": reply.text, "latency_s": reply.latency_s, "attempts": reply.attempts},
                    )
                replies[i] = reply

    batch = max(1, int(getattr(backend, "batch_size", 1)))
    chunks = [list(range(k, min(k + batch, n))) for k in range(0, n, batch)]
    with ThreadPoolExecutor(
        max(1, int(getattr(backend, "max_concurrency", 1))), thread_name_prefix="fgbmk-lvlm"
    ) as pool:
        list(pool.map(work, chunks))
    out = rows.copy()
    out["model"] = model
    out["raw_answer"] = [r.text for r in replies]
    out["latency_s"] = [r.latency_s for r in replies]
    out["attempts"] = [r.attempts for r in replies]
    out["error"] = [r.error for r in replies]
    out["request_hash"] = keys.astype(str)
    scored = score_answers(out)
    log(
        f"{model}: {n} FG-BMK answers, {int(hits.sum())} from the cache, {int((scored.error != '').sum())} errors"
    )
    return scored[ANSWER_COLUMNS]
