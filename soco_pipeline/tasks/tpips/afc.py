"""The 2AFC out-of-distribution set: a reference and two outputs of real image operations (ours, standing in
for the paper's sources) with simulated votes; ties and >= 3 "cannot tell" removed (published)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .annotators import JUDGEMENTS, normalise, observe
from .aspects import VALUE_COLUMNS, aspect_distance
from .config import TpipsConfig
from .triplets import IMAGE_PREFIX, base_values, perturb

AFC_COLUMNS = [
    "item_id",
    "ref",
    "x0",
    "x1",
    "aspect",
    "votes",
    "cannot_tell",
    "source",
    "y_0",
    "y_1",
    "judgements",
]


def _operation(source: str, ref: dict, rng: np.random.Generator, cfg: TpipsConfig) -> tuple[str, dict]:
    """(operation name, output record) of one random operation of a source applied to the reference record."""
    a = cfg.afc
    if source == "editing":
        op = ["recolour", "colour_transfer", "relight"][int(rng.integers(3))]
        if op == "recolour":
            return op, perturb(ref, "colour", float(rng.uniform(0.1, 0.9)), rng, cfg)
        if op == "relight":
            return op, perturb(ref, "lighting", float(rng.uniform(0.1, 0.9)), rng, cfg)
        return op, {**ref, "transfer": float(rng.uniform(0.3, 1.0))}
    if source == "compositing":
        op = ["composite", "rescale"][int(rng.integers(2))]
        aspect = "background" if op == "composite" else "size"
        return op, perturb(ref, aspect, float(rng.uniform(0.2, 1.0)), rng, cfg)
    if source == "novel_view":
        return "new_view", perturb(ref, "pose", float(rng.uniform(0.05, 0.6)), rng, cfg)
    if source == "distortion":
        if rng.random() < 0.5:
            return "blur", {**ref, "blur_sigma": float(rng.uniform(*a.blur_sigma))}
        return "jpeg", {**ref, "jpeg_quality": int(rng.integers(a.jpeg_quality[0], a.jpeg_quality[1] + 1))}
    raise ValueError(f"unknown 2AFC source {source!r}: use one of {a.sources}")


def generate_afc(
    cfg: TpipsConfig, n: int | None = None, seed: int | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(value records of every 2AFC image, item table ref/x0/x1/source/ops), deterministic per seed."""
    n = cfg.afc.n if n is None else int(n)
    seed = cfg.seed if seed is None else int(seed)
    rows, items = [], []
    for t in range(n):
        rng = np.random.default_rng([seed, 0xAFC, t])
        source = cfg.afc.sources[t % len(cfg.afc.sources)]
        ref = base_values(rng, cfg)
        ref["count"] = 1
        ops, outs = zip(*(_operation(source, ref, rng, cfg) for _ in range(2)), strict=True)
        recs = [ref, *outs]
        ids = [f"{IMAGE_PREFIX}afc/s{seed}/a{t:05d}_{s}" for s in ("ref", "x0", "x1")]
        for image_id, rec in zip(ids, recs, strict=True):
            rows.append({"image_id": image_id, **rec})
        items.append(
            {
                "item_id": f"{IMAGE_PREFIX}afc/s{seed}/a{t:05d}",
                "ref": ids[0],
                "x0": ids[1],
                "x1": ids[2],
                "source": source,
                "op_0": ops[0],
                "op_1": ops[1],
            }
        )
    return pd.DataFrame(rows).astype(VALUE_COLUMNS), pd.DataFrame(items)


def annotate_afc(values: pd.DataFrame, items: pd.DataFrame, cfg: TpipsConfig) -> tuple[pd.DataFrame, dict]:
    """(kept 2AFC rows, summary): each item asked for its source's aspects; ties and >= 3 cannot-tell removed."""
    v = values.set_index("image_id")
    parts, asked = [], 0
    for source, grp in items.groupby("source", sort=True):
        for aspect in cfg.afc.aspects[source]:  # never "overall" (published; the config refuses it)
            d = np.column_stack(
                [aspect_distance(aspect, v.loc[grp.ref], v.loc[grp[x]], cfg) for x in ("x0", "x1")]
            )
            votes, cannot = observe(d, grp.item_id.tolist(), aspect, cfg.observer, cfg.seed)
            keep, y = normalise(votes, cannot, cfg.observer.prune_cannot_tell, drop_ties=True)
            asked += len(grp)
            part = grp[["item_id", "ref", "x0", "x1", "source"]].copy()
            part["aspect"] = aspect
            part["votes"] = list(votes.tolist())
            part["cannot_tell"] = cannot
            part[["y_0", "y_1"]] = y
            parts.append(part[keep])
    out = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=AFC_COLUMNS)
    out["judgements"] = JUDGEMENTS
    out = out[AFC_COLUMNS].sort_values(["item_id", "aspect"], kind="stable").reset_index(drop=True)
    summary = {
        "judgements": JUDGEMENTS,
        "asked": asked,
        "kept": int(len(out)),
        "pruned": int(asked - len(out)),
        "by_source": {s: int(c) for s, c in out.source.value_counts().sort_index().items()},
    }
    return out, summary
