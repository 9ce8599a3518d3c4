"""LVLM baselines through the project's harness, as published (appendix C.3): early fusion (pairwise 0-10
scores) and the triplet oracle, permutation-averaged; an unparseable answer counts in `parse_failures`."""

from __future__ import annotations

import functools
import io
import itertools
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

PERMS_OOO = tuple(itertools.permutations(range(3)))  # 6 orders of a triplet's images
PERMS_AFC = ((0, 1), (1, 0))  # 2 orders of a 2AFC item's outputs (the reference stays first)

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
    """Answer texts in order, through `ask_requests`; a failed request within the allowed rate answers ""."""
    got = ask_requests(len(requests), requests.__getitem__, spec, backend, cache)
    return np.where(got.error == "", got.text, "").astype(str).tolist()


def _images(uris: dict[str, str]) -> Callable[[str], bytes]:
    return functools.cache(lambda image_id: jpeg_of(uris[image_id]))


def _pair_scores(texts: list[str], n: int, k: int, top: int) -> tuple[np.ndarray, int]:
    """((n, k) pair scores averaged over the two orders, NaN when neither parsed; parse failures)."""
    s = np.array([parse_score(x, top) for x in texts], float).reshape(n, k, 2)
    ok = ~np.isnan(s)
    count = ok.sum(2)
    mean = np.where(ok, s, 0.0).sum(2) / np.maximum(count, 1)
    return np.where(count > 0, mean, np.nan), int((~ok).sum())


def _picks(texts: list[str], n: int, perms: tuple[tuple[int, ...], ...]) -> tuple[np.ndarray, int]:
    """((n, k) share of the orders whose answer named each original option, parse failures)."""
    k = len(perms[0])
    pos = np.array([parse_choice(x, k) for x in texts], np.int64).reshape(n, len(perms))
    order = np.array(perms, np.int64)  # order[p, j]: the original option shown at position j in order p
    out = np.zeros((n, k))
    rows, ps = np.nonzero(pos >= 0)
    np.add.at(out, (rows, order[ps, pos[rows, ps]]), 1.0 / len(perms))
    return out, int((pos < 0).sum())


def _pairwise_requests(img, cols: np.ndarray, aspects: list[str], pairs, prompts: LvlmPrompts) -> list:
    return [
        ChatRequest((img(row[u]), img(row[v])), prompts.ask(prompts.pairwise_prompt, a))
        for row, a in zip(cols, aspects, strict=True)
        for i, j in pairs
        for u, v in ((i, j), (j, i))
    ]


def ooo_requests(ooo: pd.DataFrame, uris: dict[str, str], prompts: LvlmPrompts) -> list[ChatRequest]:
    """Every request of the OOO rows: 6 pairwise per row (pair k excludes image k), then 6 triplet ones."""
    img = _images(uris)
    cols = ooo[["image_0", "image_1", "image_2"]].to_numpy()
    aspects = ooo.aspect.tolist()
    trip = [
        ChatRequest(tuple(img(row[i]) for i in perm), prompts.ask(prompts.triplet_prompt, a))
        for row, a in zip(cols, aspects, strict=True)
        for perm in PERMS_OOO
    ]
    return _pairwise_requests(img, cols, aspects, PAIRS, prompts) + trip


def ooo_predictions(texts: list[str], n: int, prompts: LvlmPrompts) -> dict[str, np.ndarray | int]:
    """{'pairwise': (n, 3), 'triplet': (n, 3), 'parse_failures'} from the answers to `ooo_requests`."""
    pair, pair_fails = _pair_scores(texts[: 6 * n], n, 3, prompts.scale_max)
    trip, fails = _picks(texts[6 * n :], n, PERMS_OOO)
    return {"pairwise": pair, "triplet": trip, "parse_failures": pair_fails + fails}


def afc_requests(afc: pd.DataFrame, uris: dict[str, str], prompts: LvlmPrompts) -> list[ChatRequest]:
    """Every request of the 2AFC rows: 4 pairwise per row, then 2 triplet-style ones (reference first)."""
    img = _images(uris)
    cols = afc[["ref", "x0", "x1"]].to_numpy()
    aspects = afc.aspect.tolist()
    trip = [
        ChatRequest((img(row[0]), *(img(row[1 + i]) for i in perm)), prompts.ask(prompts.afc_prompt, a))
        for row, a in zip(cols, aspects, strict=True)
        for perm in PERMS_AFC
    ]
    return _pairwise_requests(img, cols, aspects, ((0, 1), (0, 2)), prompts) + trip


def afc_predictions(texts: list[str], n: int, prompts: LvlmPrompts) -> dict[str, np.ndarray | int]:
    """{'pairwise': (n, 2), 'triplet': (n, 2), 'parse_failures'} from the answers to `afc_requests`."""
    pair, pair_fails = _pair_scores(texts[: 4 * n], n, 2, prompts.scale_max)
    trip, fails = _picks(texts[4 * n :], n, PERMS_AFC)
    return {"pairwise": pair, "triplet": trip, "parse_failures": pair_fails + fails}


def ooo_answers(
    ooo: pd.DataFrame,
    uris: dict[str, str],
    prompts: LvlmPrompts,
    spec: LvlmSpec,
    backend: Backend,
    cache: AnswerCache,
) -> dict[str, np.ndarray | int]:
    """Ask an LVLM every OOO request (`ooo_requests`) and parse the answers (`ooo_predictions`)."""
    texts = ask_all(ooo_requests(ooo, uris, prompts), spec, backend, cache)
    return ooo_predictions(texts, len(ooo), prompts)


def afc_answers(
    afc: pd.DataFrame,
    uris: dict[str, str],
    prompts: LvlmPrompts,
    spec: LvlmSpec,
    backend: Backend,
    cache: AnswerCache,
) -> dict[str, np.ndarray | int]:
    """Ask an LVLM every 2AFC request (`afc_requests`) and parse the answers (`afc_predictions`)."""
    texts = ask_all(afc_requests(afc, uris, prompts), spec, backend, cache)
    return afc_predictions(texts, len(afc), prompts)
