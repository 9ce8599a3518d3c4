"""LVLM baselines through the project's harness (backends with retries, the answer cache), both as published:

- early fusion: two images and "how similar are these in terms of <aspect>, 0-10" for every pair; the three
  pair scores of a triplet (or the two of a 2AFC item) are the model's similarities;
- triplet oracle: all three images and "in terms of <aspect>, which image is the most different?" (1-3); for
  2AFC the reference and both outputs, "which is more similar to the first?" (1-2).

Prompts come from assets/tpips.yaml (`lvlm`). An unparseable answer scores as a tie (every option equal, so the
first is picked) and is counted in `parse_failures`.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable

import numpy as np
import pandas as pd
from PIL import Image

from soco_pipeline import storage
from soco_pipeline.lvlm.backends import Backend
from soco_pipeline.lvlm.cache import AnswerCache
from soco_pipeline.lvlm.prompt import ChatRequest
from soco_pipeline.lvlm.run import ask_requests
from soco_pipeline.lvlm.specs import LvlmSpec

from .aspects import PAIRS
from .config import LvlmPrompts

_NUMBER = re.compile(r"(?<![\d.])(10|\d)(?:\.\d+)?(?![\d])")


def jpeg_of(uri: str) -> bytes:
    """The image at `uri` as JPEG bytes (quality 95) for the chat payload."""
    img = Image.open(io.BytesIO(storage.read_bytes(uri))).convert("RGB")
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=95)
    return buf.getvalue()


def parse_score(text: str, top: int) -> float:
    """The first integer 0..top in an answer (NaN when there is none)."""
    for m in _NUMBER.finditer(text or ""):
        v = int(m.group(1))
        if 0 <= v <= top:
            return float(v)
    return float("nan")


def parse_choice(text: str, n: int) -> int:
    """The first option number 1..n in an answer as a 0-based index (-1 when there is none)."""
    for m in re.finditer(r"\d+", text or ""):
        v = int(m.group(0))
        if 1 <= v <= n:
            return v - 1
    return -1


def ask_all(requests: list[ChatRequest], spec: LvlmSpec, backend: Backend, cache: AnswerCache) -> list[str]:
    """Answer texts in order, through the harness's `ask_requests` (the answer cache, the backend's retries
    and concurrency, both of the spec's error guards: LvlmRunError, no score, when too many fail); a failed
    request within the allowed rate answers "" (a parse failure, scored as a tie)."""
    got = ask_requests(len(requests), requests.__getitem__, spec, backend, cache)
    return np.where(got.error == "", got.text, "").astype(str).tolist()


def _images(uris: dict[str, str]) -> Callable[[str], bytes]:
    memo: dict[str, bytes] = {}

    def get(image_id: str) -> bytes:
        if image_id not in memo:
            memo[image_id] = jpeg_of(uris[image_id])
        return memo[image_id]

    return get


def _ask_and_parse(
    pair_reqs: list,
    trip_reqs: list,
    k: int,
    prompts: LvlmPrompts,
    spec: LvlmSpec,
    backend: Backend,
    cache: AnswerCache,
) -> dict[str, np.ndarray | int]:
    """Ask every request; (N, k) pairwise scores (k requests per row) and (N, k) one-hot picks (one per row)."""
    texts = ask_all(pair_reqs + trip_reqs, spec, backend, cache)
    pair = np.array([parse_score(t, prompts.scale_max) for t in texts[: len(pair_reqs)]]).reshape(-1, k)
    picks = np.array([parse_choice(t, k) for t in texts[len(pair_reqs) :]], dtype=np.int64)
    fails = int(np.isnan(pair).sum() + (picks < 0).sum())
    n = len(trip_reqs)
    trip = np.zeros((n, k))
    trip[np.arange(n)[picks >= 0], picks[picks >= 0]] = 1.0
    return {"pairwise": np.nan_to_num(pair, nan=0.0), "triplet": trip, "parse_failures": fails}


def ooo_answers(
    ooo: pd.DataFrame,
    uris: dict[str, str],
    prompts: LvlmPrompts,
    spec: LvlmSpec,
    backend: Backend,
    cache: AnswerCache,
) -> dict[str, np.ndarray | int]:
    """{'pairwise': (N, 3) early-fusion scores of the pair excluding k, 'triplet': (N, 3) one-hot odd picks,
    'parse_failures': int} for OOO rows."""
    img = _images(uris)
    cols = ooo[["image_0", "image_1", "image_2"]].to_numpy()
    aspects = ooo.aspect.tolist()
    pair_reqs = [
        ChatRequest((img(row[i]), img(row[j])), prompts.pairwise_prompt.format(aspect=a))
        for row, a in zip(cols, aspects, strict=True)
        for i, j in PAIRS
    ]
    trip_reqs = [
        ChatRequest(tuple(img(x) for x in row), prompts.triplet_prompt.format(aspect=a))
        for row, a in zip(cols, aspects, strict=True)
    ]
    return _ask_and_parse(pair_reqs, trip_reqs, 3, prompts, spec, backend, cache)


def afc_answers(
    afc: pd.DataFrame,
    uris: dict[str, str],
    prompts: LvlmPrompts,
    spec: LvlmSpec,
    backend: Backend,
    cache: AnswerCache,
) -> dict[str, np.ndarray | int]:
    """{'pairwise': (N, 2) scores of (ref, x0), (ref, x1), 'triplet': (N, 2) one-hot picks, 'parse_failures'}."""
    img = _images(uris)
    cols = afc[["ref", "x0", "x1"]].to_numpy()
    aspects = afc.aspect.tolist()
    pair_reqs = [
        ChatRequest((img(row[0]), img(row[k])), prompts.pairwise_prompt.format(aspect=a))
        for row, a in zip(cols, aspects, strict=True)
        for k in (1, 2)
    ]
    trip_reqs = [
        ChatRequest(tuple(img(x) for x in row), prompts.afc_prompt.format(aspect=a))
        for row, a in zip(cols, aspects, strict=True)
    ]
    return _ask_and_parse(pair_reqs, trip_reqs, 2, prompts, spec, backend, cache)
