"""Ask a model every item of its settings: cached answers first, the rest with bounded concurrency.

Each finished answer is cached at once (atomic file per request hash), so a run killed at any point
resumes where it stopped and ends with the same table. A request that still fails after its
retries is recorded with its error and counted as wrong; only when `max_consecutive_failures`
requests in a row fail (a server that is down, a wrong key) does the run stop, with an error naming
the endpoint, keeping every answer it got.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

import numpy as np
import pandas as pd

from soco_pipeline.lvlm.backends import Backend, Reply
from soco_pipeline.lvlm.cache import AnswerCache
from soco_pipeline.lvlm.parse import parse_answers
from soco_pipeline.lvlm.prompt import ChatRequest, build_prompts, request_key
from soco_pipeline.lvlm.specs import LvlmSpec
from soco_pipeline.storage import read_bytes

ANSWER_COLUMNS = [
    "model", "setting", "index", "g_index", "qid", "rotation", "pair_id", "level", "pair_group",
    "supercategory", "src_keypoint", "answer", "raw_answer", "parsed", "correct", "latency_s", "attempts",
    "error", "request_hash",
]


class LvlmRunError(RuntimeError):
    """The run stopped (too many consecutive failures); answers so far are cached."""


@dataclass
class RunResult:
    """The answers table and what the run did."""

    answers: pd.DataFrame
    sent: int
    cached: int
    errors: int


class _Images:
    """Reads rendered images once per path and remembers their digests (sources repeat across rows)."""

    def __init__(self) -> None:
        self._digest: dict[str, str] = {}
        self._lock = threading.Lock()

    def paths(self, row) -> list[str]:
        return [p for p in (row.src_render, row.trg_render) if isinstance(p, str) and p]

    def digest(self, path: str) -> str:
        with self._lock:
            d = self._digest.get(path)
        if d is None:
            d = hashlib.sha256(read_bytes(path)).hexdigest()
            with self._lock:
                self._digest[path] = d
        return d

    def request(self, row, text: str) -> ChatRequest:
        return ChatRequest(tuple(read_bytes(p) for p in self.paths(row)), text)


def run_model(
    items: pd.DataFrame,
    spec: LvlmSpec,
    backend: Backend,
    cache: AnswerCache,
    log: Callable[[str], None] = lambda _msg: None,
) -> RunResult:
    """Answers (ANSWER_COLUMNS) of one model to the items of its settings, in item order."""
    rows = items[items["setting"].isin(spec.settings)].reset_index(drop=True)
    texts = build_prompts(rows).to_numpy()
    images = _Images()
    generation = spec.generation()
    # Per-request I/O (image digests, cache files): a loop over requests is the work itself here.
    keys = np.array([
        request_key(t, [images.digest(p) for p in images.paths(r)], generation)
        for r, t in zip(rows.itertuples(index=False), texts, strict=True)
    ], dtype=object)
    n = len(rows)
    raw = np.full(n, "", dtype=object)
    latency = np.zeros(n)
    attempts = np.zeros(n, dtype=np.int64)
    error = np.full(n, "", dtype=object)
    todo = []
    for i, key in enumerate(keys):
        rec = cache.get(key)
        if rec is None:
            todo.append(i)
        else:
            raw[i], latency[i], attempts[i] = rec["text"], rec["latency_s"], rec["attempts"]
    n_cached = n - len(todo)
    log(f"{spec.name}: {n} requests, {n_cached} cached, {len(todo)} to ask")

    row_list = list(rows.itertuples(index=False))
    batch = max(1, int(getattr(backend, "batch_size", 1)))
    chunks = [todo[k:k + batch] for k in range(0, len(todo), batch)]

    def ask(chunk: list[int]) -> list[Reply]:
        reqs = [images.request(row_list[i], texts[i]) for i in chunk]
        if hasattr(backend, "answer") and batch == 1:
            return [backend.answer(reqs[0], jitter_seed=int(rows["index"].iat[chunk[0]]))]
        return backend.answer_batch(reqs)

    consecutive, done = 0, 0
    workers = max(1, int(getattr(backend, "max_concurrency", 1)))
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"lvlm-{spec.name}")
    try:
        # At most 2 x workers chunks in flight: bounded memory (images are read in the workers).
        pending: dict[Future, list[int]] = {}
        queue = iter(chunks)
        for chunk in queue:
            pending[pool.submit(ask, chunk)] = chunk
            if len(pending) >= 2 * workers:
                break
        while pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in finished:
                chunk = pending.pop(fut)
                for i, reply in zip(chunk, fut.result(), strict=True):
                    raw[i], latency[i], attempts[i], error[i] = reply.text, reply.latency_s, reply.attempts, reply.error
                    if reply.error:
                        consecutive += 1
                    else:
                        consecutive = 0
                        cache.put(keys[i], {"text": reply.text, "latency_s": reply.latency_s,
                                            "attempts": reply.attempts})
                done += len(chunk)
                limit = getattr(spec, "max_consecutive_failures", 0) if spec.backend == "openai" else 0
                if limit and consecutive >= limit:
                    raise LvlmRunError(
                        f"{spec.name}: {consecutive} requests in a row failed (last: {error[i]}); is the server at "
                        f"{spec.base_url} up and the key right? {done - consecutive} answers are cached, "
                        f"a rerun resumes there"
                    )
                nxt = next(queue, None)
                if nxt is not None:
                    pending[pool.submit(ask, nxt)] = nxt
            if done and done % max(1, len(todo) // 10) < batch:
                log(f"{spec.name}: {done}/{len(todo)} asked")
    finally:
        pool.shutdown(wait=True, cancel_futures=True)

    out = rows[["setting", "index", "g_index", "qid", "rotation", "pair_id", "level", "pair_group",
                "supercategory", "src_keypoint", "answer"]].copy()
    out.insert(0, "model", spec.name)
    out["raw_answer"] = raw.astype(str)
    out["parsed"] = parse_answers(out["raw_answer"])
    out["correct"] = (out["parsed"] == out["answer"]) & (error == "")
    out["latency_s"] = latency
    out["attempts"] = attempts
    out["error"] = error.astype(str)
    out["request_hash"] = keys.astype(str)
    return RunResult(out[ANSWER_COLUMNS], sent=len(todo), cached=n_cached, errors=int((error != "").sum()))
