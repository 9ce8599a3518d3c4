"""Shared pieces of the LVLM tests: a small item set, answer-key lookups and answerers for the server.

`ScriptedAnswerer` is a test double (named as such): it plays a flaky OpenAI-compatible server from
a script of failures and answer styles. The oracle and random answerers run behind the real server.
"""

from __future__ import annotations

import json
import random
import threading
from pathlib import Path

import pandas as pd

from soco_pipeline.data.descriptions import build_descriptions
from soco_pipeline.lvlm.items import build_items
from soco_pipeline.lvlm.loopback import answer_key, content_key  # noqa: F401 - the tests' answer key is the server's
from soco_pipeline.lvlm.prompt import ChatRequest
from soco_pipeline.lvlm.protocol import load_lvlm_protocol
from soco_pipeline.lvlm.server import HttpReply
from soco_pipeline.lvlm.specs import parse_spec
from soco_pipeline.pairs.four_choice import build_four_choice
from soco_pipeline.taxonomy import load_taxonomy
from tests.fixtures_data import canonical_tables

PARSER_FORMS = [
    "{x}",
    "\\boxed{{{x}}}",
    "After comparing the parts, the final answer is {x}.",
    "Final answer: {x}",
    "The point that matches is ({x}).",
    "B: Point B is close, but {x}: Point {x}",
    "Options B and C are wrong. The correct answer is {x}",
]


def small_tables(root: Path, categories=("car", "bus", "dog"), per_category=4, seed=0) -> dict:
    """Canonical tables (JPEGs under root) plus descriptions and four-choice items."""
    taxonomy = load_taxonomy()
    images, kps, pairs, corr = canonical_tables(str(root), taxonomy, categories, per_category, seed)
    four = build_four_choice(pairs, corr, kps, seed=seed, taxonomy=taxonomy)
    return {
        "image_set": images,
        "keypoints": kps,
        "image_pairs": pairs,
        "correspondences": corr,
        "four_choice": four,
        "descriptions": build_descriptions(taxonomy),
    }


def small_items(root: Path, items_per_group: int = 6, seed: int = 0) -> pd.DataFrame:
    """LVLM items of the small tables, rendered under root/renders."""
    t = small_tables(root, seed=seed)
    proto = load_lvlm_protocol()
    from dataclasses import replace

    proto = replace(proto, items_per_group=items_per_group)
    return build_items(
        t["four_choice"],
        t["image_pairs"],
        t["keypoints"],
        t["descriptions"],
        t["image_set"],
        proto,
        str(root / "renders"),
        seed=seed,
        workers=2,
    )


def openai_spec(base_url: str, name: str = "scripted", **fields):
    """An `openai` backend spec for a local server (fast backoff for tests)."""
    doc = {
        "backend": "openai",
        "model": "test-model",
        "base_url": base_url,
        "timeout": 2,
        "max_concurrency": 4,
        "retries": 4,
        "backoff_base": 0.01,
        "backoff_max": 0.05,
    } | fields
    return parse_spec(doc, name)


class OracleAnswerer:
    """Reads the answer key: always right, in a randomly chosen parser form."""

    def __init__(self, key: dict[str, str], seed: int = 0) -> None:
        self.key, self.seed = key, seed

    def __call__(self, request: ChatRequest, body: dict) -> str:
        k = content_key(list(request.images), request.text)
        form = PARSER_FORMS[random.Random(f"{self.seed}:{k}").randrange(len(PARSER_FORMS))]
        return form.format(x=self.key[k])


class RandomAnswerer:
    """A seeded uniform pick among A-D per request (chance: 25 average, 0.39 circular)."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def __call__(self, request: ChatRequest, body: dict) -> str:
        k = content_key(list(request.images), request.text)
        return random.Random(f"{self.seed}:{k}").choice("ABCD")


class ScriptedAnswerer:
    """Test double of a flaky server: per request content, the first attempts follow a script of
    failures ("429", "500", "timeout", "malformed", "truncated"); then it answers right (from the key)
    in a parser form chosen by the request. Counts attempts per request.

    "timeout": the first `max_timeouts` such requests block until `release()` (or `block_s` passes), so the
    client's own timeout fires however slow the machine is; later ones answer at once. Call `release()`
    before stopping the server."""

    def __init__(
        self,
        key: dict[str, str],
        script: dict[int, list[str]] | None = None,
        max_timeouts: int = 2,
        block_s: float = 60.0,
    ):
        self.key = key
        self.script = script or {}
        self.max_timeouts, self.block_s, self.timeouts = max_timeouts, block_s, 0
        self.released = threading.Event()
        self.attempts: dict[str, int] = {}
        self.lock = threading.Lock()

    def release(self) -> None:
        """Let every blocked "timeout" request end (its client has long given up)."""
        self.released.set()

    def __call__(self, request: ChatRequest, body: dict) -> str | HttpReply:
        k = content_key(list(request.images), request.text)
        with self.lock:
            n = self.attempts.get(k, 0)
            self.attempts[k] = n + 1
        slot = int(k, 16) % 7
        plan = self.script.get(slot, [])
        if n < len(plan):
            what = plan[n]
            if what == "429":
                return HttpReply(429, b'{"error": "rate limited"}', {"Retry-After": "0"})
            if what == "500":
                return HttpReply(500, b'{"error": "overloaded"}')
            if what == "503":
                return HttpReply(503, b"<html>bad gateway</html>", {"Content-Type": "text/html"})
            if what == "timeout":
                with self.lock:
                    block = self.timeouts < self.max_timeouts
                    self.timeouts += int(block)
                if not block:
                    return PARSER_FORMS[slot].format(x=self.key[k])
                self.released.wait(self.block_s)
                return HttpReply(200, b"{}")
            if what == "malformed":
                return HttpReply(200, b'{"choices": [{"message": ')
            if what == "no_choices":
                return HttpReply(200, json.dumps({"object": "error"}).encode())
            if what == "400":
                return HttpReply(400, b'{"error": "image too large"}')
            raise ValueError(f"unknown scripted failure {what!r}")
        return PARSER_FORMS[slot].format(x=self.key[k])
