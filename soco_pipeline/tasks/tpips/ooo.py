"""The odd-one-out set: every (triplet, aspect) judged by the simulated observers, pruned and normalised."""

from __future__ import annotations

import pandas as pd

from .annotators import JUDGEMENTS, normalise, observe
from .aspects import triplet_distances
from .config import TpipsConfig
from .triplets import TripletSet

OOO_COLUMNS = [
    "triplet_id",
    "image_0",
    "image_1",
    "image_2",
    "aspect",
    "votes",
    "cannot_tell",
    "split",
    "y_0",
    "y_1",
    "y_2",
    "judgements",
]


def annotate_triplets(ts: TripletSet, cfg: TpipsConfig) -> tuple[pd.DataFrame, dict]:
    """(kept OOO rows, summary): every aspect of the vocabulary asked of every triplet."""
    trip = ts.triplets
    imgs = trip[["image_0", "image_1", "image_2"]].to_numpy()
    ids = trip.triplet_id.tolist()
    parts, asked = [], 0
    for aspect in cfg.aspects:
        d = triplet_distances(aspect, ts.images, imgs, cfg)
        votes, cannot = observe(d, ids, aspect, cfg.observer, cfg.seed)
        keep, y = normalise(votes, cannot, cfg.observer.prune_cannot_tell)
        asked += len(ids)
        part = trip[["triplet_id", "image_0", "image_1", "image_2", "split"]].copy()
        part["aspect"] = aspect
        part["votes"] = list(votes.tolist())
        part["cannot_tell"] = cannot
        part[["y_0", "y_1", "y_2"]] = y
        parts.append(part[keep])
    out = pd.concat(parts, ignore_index=True)
    out["judgements"] = JUDGEMENTS
    out = out[OOO_COLUMNS].sort_values(["triplet_id", "aspect"], kind="stable").reset_index(drop=True)
    summary = {
        "judgements": JUDGEMENTS,
        "observer": cfg.observer.model_dump(),
        "asked": asked,
        "kept": int(len(out)),
        "pruned": int(asked - len(out)),
        "by_aspect": {a: int(v) for a, v in out.aspect.value_counts().sort_index().items()},
    }
    return out, summary
