"""Ask a model: cached answers first, the rest with bounded concurrency, behind both error guards."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

import numpy as np
import pandas as pd

from soco_pipeline.lvlm.backends import Backend, Reply
from soco_pipeline.lvlm.cache import AnswerCache
from soco_pipeline.lvlm.items import ITEM_KEYS
from soco_pipeline.lvlm.metrics import unparsable_warning
from soco_pipeline.lvlm.parse import parse_answers
from soco_pipeline.lvlm.prompt import ChatRequest, build_prompts, request_key
from soco_pipeline.lvlm.specs import LvlmSpec
from soco_pipeline.storage import read_bytes

ANSWER_COLUMNS = [
    "model",
    *ITEM_KEYS,
    "answer",
    "raw_answer",
    "parsed",
    "correct",
    "latency_s",
    "attempts",
    "error",
    "request_hash",
]


class LvlmRunError(RuntimeError):
    """The run stopped (too many consecutive failures, or too many failures in all); answers so far are cached."""


def error_rate_exceeded(n_errors: int, n_rows: int, max_error_rate: float) -> bool:
    """Whether `n_errors` failed rows of `n_rows` are more than the spec's `max_error_rate` allows."""
    return n_rows > 0 and n_errors > max_error_rate * n_rows


@dataclass
class RunResult:
    """The answers table and what the run did."""

    answers: pd.DataFrame
    sent: int
    cached: int
    errors: int


def _image_paths(row) -> list[str]:
    """The row's images in prompt order: the marked source (absent in the desc setting), the target."""
    return [p for p in (row.src_render, row.trg_render) if isinstance(p, str) and p]


@dataclass
class Answered:
    """The replies to a list of requests, in request order, and where each came from."""

    text: np.ndarray  # answer text ("" for a failed request)
    latency_s: np.ndarray
    attempts: np.ndarray
    error: np.ndarray  # "" or the failure after the backend's retries
    request_hash: np.ndarray
    cached: np.ndarray  # bool: not asked (read from the answer cache, or an identical request's reply)

    @property
    def sent(self) -> int:
        """Requests sent to the backend (not answered from the cache)."""
        return int((~self.cached).sum())

    @property
    def errors(self) -> int:
        """Requests that failed after the backend's retries."""
        return int((self.error != "").sum())


def ask_requests(
    n: int,
    request: Callable[[int], ChatRequest],
    spec: LvlmSpec,
    backend: Backend,
    cache: AnswerCache | None,
    *,
    labels: Callable[[int], str] = lambda i: f"request {i}",
    seeds: Callable[[int], int] = lambda i: i,
    log: Callable[[str], None] = lambda _msg: None,
    generation: dict | None = None,
) -> Answered:
    """Answer requests 0..n-1 (`request(i)` builds one), each distinct one once; guards raise LvlmRunError."""
    generation = spec.generation() if generation is None else generation
    workers = max(1, int(getattr(backend, "max_concurrency", 1)))
    batch = max(1, int(getattr(backend, "batch_size", 1)))
    keys = np.full(n, "", dtype=object)
    raw = np.full(n, "", dtype=object)
    latency = np.zeros(n)
    attempts = np.zeros(n, dtype=np.int64)
    error = np.full(n, "", dtype=object)
    was_cached = np.zeros(n, dtype=bool)

    # Identical requests are asked once; others wait (`asking`: hash -> event set once `answered` has it).
    lock = threading.Lock()
    asking: dict[str, threading.Event] = {}
    answered: dict[str, Reply] = {}

    def work(chunk: list[int]) -> list[tuple[int, Reply, bool]]:
        """Answer a chunk of requests: from the cache, the backend, or an identical request's reply."""
        out, ask, reqs, follow = [], [], [], []
        try:
            for i in chunk:
                req = request(i)
                keys[i] = request_key(req.text, req.image_digests(), generation)
                rec = cache.get(keys[i]) if cache is not None else None
                if rec is not None:
                    out.append((i, Reply(rec["text"], rec["latency_s"], rec["attempts"]), True))
                    continue
                with lock:
                    first = keys[i] not in asking
                    if first:
                        asking[keys[i]] = threading.Event()
                (ask if first else follow).append(i)
                if first:
                    reqs.append(req)
            if reqs:
                if hasattr(backend, "answer") and len(reqs) == 1:
                    replies = [backend.answer(reqs[0], jitter_seed=int(seeds(ask[0])))]
                else:
                    replies = backend.answer_batch(reqs)
                for i, reply in zip(ask, replies, strict=True):
                    if not reply.error and cache is not None:
                        cache.put(
                            keys[i],
                            {"text": reply.text, "latency_s": reply.latency_s, "attempts": reply.attempts},
                        )
                    answered[keys[i]] = reply
                    out.append((i, reply, False))
        finally:
            for i in ask:
                asking[keys[i]].set()  # also when this chunk raised: the followers then report it
        for i in follow:  # every ask above is done first, so two chunks never wait on each other
            asking[keys[i]].wait()
            reply = answered.get(keys[i]) or Reply("", 0.0, 0, "an identical request failed before its reply")
            out.append((i, reply, True))
        return out

    chunks = [list(range(k, min(k + batch, n))) for k in range(0, n, batch)]
    consecutive, done, n_errors, first_error = 0, 0, 0, ""
    limit = spec.max_consecutive_failures if spec.backend == "openai" else 0
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"lvlm-{spec.name}")
    try:
        pending: dict[Future, list[int]] = {}
        queue = iter(chunks)
        for chunk in queue:
            pending[pool.submit(work, chunk)] = chunk
            if len(pending) >= 2 * workers:
                break
        while pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in finished:
                pending.pop(fut)
                for i, reply, hit in fut.result():
                    raw[i], latency[i], attempts[i], error[i] = dataclasses.astuple(reply)
                    was_cached[i] = hit
                    if not hit:
                        consecutive = consecutive + 1 if reply.error else 0
                    if reply.error:
                        n_errors += 1
                        first_error = first_error or f"{labels(i)}: {reply.error}"
                    done += 1
                    if done % max(1, n // 10) == 0:
                        log(f"{spec.name}: {done}/{n} answered ({int(was_cached.sum())} from the cache)")
                if limit and consecutive >= limit:
                    raise LvlmRunError(
                        f"{spec.name}: {consecutive} requests in a row failed (last: {error[i]}); is the server at "
                        f"{spec.base_url} up and the key right? Every answer received is cached: a rerun resumes there"
                    )
                if error_rate_exceeded(n_errors, n, spec.max_error_rate):
                    raise LvlmRunError(
                        f"{spec.name}: {n_errors} of {n} requests failed, more than max_error_rate "
                        f"{spec.max_error_rate:g} allows; no score is posted. First error: {first_error}. Fix the "
                        f"cause (or raise max_error_rate in {spec.source or 'the spec'}); every answer received "
                        f"is cached: a rerun resumes there"
                    )
                nxt = next(queue, None)
                if nxt is not None:
                    pending[pool.submit(work, nxt)] = nxt
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return Answered(raw, latency, attempts, error, keys, was_cached)


def run_model(
    items: pd.DataFrame,
    spec: LvlmSpec,
    backend: Backend,
    cache: AnswerCache,
    log: Callable[[str], None] = lambda _msg: None,
    warn: Callable[[str], None] | None = None,
) -> RunResult:
    """Answers (ANSWER_COLUMNS) of one model, in item order; `warn` gets a line if most are unparsable."""
    rows = items[items["setting"].isin(spec.settings)].reset_index(drop=True)
    texts = build_prompts(rows).to_numpy()
    n = len(rows)
    row_list = list(rows.itertuples(index=False))
    index = rows["index"].to_numpy()
    got = ask_requests(
        n,
        lambda i: ChatRequest(tuple(read_bytes(p) for p in _image_paths(row_list[i])), texts[i]),
        spec,
        backend,
        cache,
        labels=lambda i: f"item {int(index[i])}",
        seeds=lambda i: int(index[i]),
        log=log,
    )
    error = got.error
    out = rows[[*ITEM_KEYS, "answer"]].copy()
    out.insert(0, "model", spec.name)
    out["raw_answer"] = got.text.astype(str)
    out["parsed"] = parse_answers(out["raw_answer"])
    out["correct"] = (out["parsed"] == out["answer"]) & (error == "")
    out["latency_s"] = got.latency_s
    out["attempts"] = got.attempts
    out["error"] = error.astype(str)
    out["request_hash"] = got.request_hash.astype(str)
    n_cached = int(got.cached.sum())
    log(
        f"{spec.name}: {n} answers, {n_cached} from the cache, {n - n_cached} asked, {int((error != '').sum())} errors"
    )
    if message := unparsable_warning(out):
        (warn or log)(message)
    return RunResult(out[ANSWER_COLUMNS], sent=n - n_cached, cached=n_cached, errors=int((error != "").sum()))
