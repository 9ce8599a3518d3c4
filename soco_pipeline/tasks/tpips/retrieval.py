"""Aspect-conditioned and compositional retrieval over the image pool, with contact sheets; the score
(published): f(q, x | c) − 0.3 · f(q, x | overall), summed over a composition's (query, aspect) pairs."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
from PIL import Image, ImageDraw

from soco_pipeline import storage

from .baselines import SimFn


def retrieval_scores(sim: SimFn, n_pool: int, query: int, aspect: str, penalty: float = 0.3) -> np.ndarray:
    """(n_pool,) scores of every pool row for one (query row, aspect); the query itself gets -inf."""
    pool = np.arange(n_pool)
    q = np.full(n_pool, query)
    s = sim(q, pool, np.full(n_pool, aspect, dtype=object))
    if aspect != "overall" and penalty:
        s = s - penalty * sim(q, pool, np.full(n_pool, "overall", dtype=object))
    s = np.asarray(s, float).copy()
    s[query] = -np.inf
    return s


def compositional_scores(
    sim: SimFn, n_pool: int, pairs: list[tuple[int, str]], penalty: float = 0.3
) -> np.ndarray:
    """Sum of `retrieval_scores` over (query row, aspect) pairs; every query gets -inf."""
    total = np.zeros(n_pool)
    for q, a in pairs:
        total += retrieval_scores(sim, n_pool, q, a, penalty)
    return total


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Row indices of the k best scores, best first (finite ones only)."""
    order = np.argsort(-scores, kind="stable")
    return order[np.isfinite(scores[order])][:k]


HIT_COLUMNS = ["query_id", "aspect", "rank", "image_id", "score"]


def _hits(ids: list[str], query_id: str, aspect: str, scores: np.ndarray, k: int) -> list[dict]:
    """The k best pool rows of one score vector as hit rows (HIT_COLUMNS)."""
    return [
        {"query_id": query_id, "aspect": aspect, "rank": rank, "image_id": ids[i], "score": float(scores[i])}
        for rank, i in enumerate(top_k(scores, k))
    ]


def retrieve(
    sim: SimFn, ids: list[str], queries: list[int], aspects: list[str], k: int, penalty: float = 0.3
) -> pd.DataFrame:
    """Long table query_id, aspect, rank, image_id, score for every (query, aspect)."""
    rows = [
        h
        for q in queries
        for a in aspects
        for h in _hits(ids, ids[q], a, retrieval_scores(sim, len(ids), q, a, penalty), k)
    ]
    return pd.DataFrame(rows, columns=HIT_COLUMNS)


def retrieve_compositional(
    sim: SimFn,
    ids: list[str],
    queries: list[int],
    compositions: list[list[str]],
    k: int,
    penalty: float = 0.3,
) -> pd.DataFrame:
    """Like `retrieve` per composition (aspect i of query i): query ids joined by '|', aspects by '+'."""
    rows = []
    for comp in compositions:
        if len(comp) > len(queries):
            raise ValueError(
                f"composition {comp} needs {len(comp)} query images; only {len(queries)} are given"
            )
        pairs = list(zip(queries, comp, strict=False))  # the first len(comp) queries
        scores = compositional_scores(sim, len(ids), pairs, penalty)
        rows += _hits(ids, "|".join(ids[q] for q, _ in pairs), "+".join(comp), scores, k)
    return pd.DataFrame(rows, columns=HIT_COLUMNS)


def contact_sheet(query_uris: list[str], hit_uris: list[str], title: str, cell: int = 96) -> bytes:
    """PNG bytes: the query image(s) (framed) then the hits left to right, with a title row."""
    tiles = [*query_uris, *hit_uris]
    sheet = Image.new("RGB", (cell * len(tiles), cell + 16), (25, 25, 25))
    d = ImageDraw.Draw(sheet)
    d.text((3, 2), title, fill=(255, 255, 255))
    for i, uri in enumerate(tiles):
        img = Image.open(io.BytesIO(storage.read_bytes(uri))).convert("RGB").resize((cell - 4, cell - 4))
        sheet.paste(img, (i * cell + 2, 16 + 2))
        if i < len(query_uris):
            d.rectangle((i * cell + 1, 17, (i + 1) * cell - 2, cell + 14), outline=(255, 210, 0), width=2)
    buf = io.BytesIO()
    sheet.save(buf, format="PNG")
    return buf.getvalue()
