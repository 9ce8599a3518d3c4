"""The official protocol as a per-pair reference scorer, written step by step like the SOCO repo's
`scripts/evaluate_dinov2.py` (DESIGN.md section 1). It is slow on purpose: one pair, one keypoint at a time,
in the order the protocol text gives. The fast path (`matching.predict` + `metrics.compute_metrics`) is
tested against it (tests/test_matching.py), so this file is where to read what the numbers mean.

Steps 1-3 (RGB, white padding to a square at the top-left, resize to S x S, normalisation, final-block
patch tokens L2-normalised over channels) happen in the backbone: the feature store hands over the
C x h x w maps of the padded S x S square and S. Steps 4-8 are below. Every place where the official
code has a quirk that we copy on purpose says so.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F


class MapStore(Protocol):
    """Any feature store: `get(image_id) -> (C x h x w float32 map, {"input_size": S, ...})`."""

    def get(self, image_id: str) -> tuple[np.ndarray, dict[str, Any]]: ...


# ---------------------------------------------------------------------------- step 4: keypoints
def official_unit_point(x: float, y: float, width: int, height: int, size: int) -> tuple[float, float]:
    """A keypoint in original pixels -> its [0, 1) position on the padded, resized S x S square.

    Quirk copied on purpose: the official script `int()`s the annotation, scales it by S / max(W, H),
    `int()`s again and only then divides by S, so points move by up to one input pixel.
    """
    side = max(width, height)  # the padded square's side: the image sits at its top-left corner
    return int(int(x) * size / side) / size, int(int(y) * size / side) / size


# ---------------------------------------------------------------------------- step 5: the source descriptor
def source_descriptor(source_map: torch.Tensor, u: float, v: float) -> torch.Tensor:
    """The C-vector read from the source map at unit point (u, v).

    Quirk copied on purpose: `grid_sample(bilinear, align_corners=True)` at 2p - 1 puts p = 0 and p = 1
    on the centres of the first and last cells (not on the cell that contains p).
    """
    grid = torch.tensor([[[[2 * u - 1, 2 * v - 1]]]], dtype=torch.float32)
    return F.grid_sample(source_map[None], grid, mode="bilinear", align_corners=True)[0, :, 0, 0]


# ---------------------------------------------------------------------------- step 6: the prediction
def predicted_point(
    similarity: torch.Tensor, allowed_cells: list[tuple[int, int]] | None = None
) -> tuple[float, float]:
    """The argmax patch of an h x w similarity map (over every patch, or only `allowed_cells` (row, col):
    SOC-geo), reported as (u, v) of its top-left corner.

    Quirk copied on purpose: the official script reports (col / w, row / h), the patch's corner, not its
    centre; ties go to the first patch in row-major order (torch.argmax).
    """
    h, w = similarity.shape
    if allowed_cells is not None:
        masked = torch.full_like(similarity, float("-inf"))
        for row, col in allowed_cells:
            masked[row, col] = similarity[row, col]
        similarity = masked
    best = int(torch.argmax(similarity))
    return (best % w) / w, (best // w) / h


def cell_of(u: float, v: float, h: int, w: int) -> tuple[int, int]:
    """(row, col) of the grid cell that holds unit point (u, v)."""
    return int(v * h), int(u * w)


# ---------------------------------------------------------------------------- step 7: PCK
def pck_threshold(alpha: float, target: Mapping[str, float]) -> float:
    """alpha * the longer side of the target's bounding box, in unit coordinates of its padded square."""
    bbox_side = max(target["bbox_r"] - target["bbox_l"], target["bbox_b"] - target["bbox_t"])
    return alpha * bbox_side / max(target["width"], target["height"])


def is_correct(pred: tuple[float, float], truth: tuple[float, float], threshold: float) -> float:
    """1.0 when the prediction is strictly closer than the threshold (the official `<`), else 0.0."""
    return float(np.hypot(pred[0] - truth[0], pred[1] - truth[1]) < threshold)


# ---------------------------------------------------------------------------- one pair
def pair_scores(
    pair: Any,
    rows: list[dict[str, Any]],
    images: dict[str, dict[str, Any]],
    keypoints: dict[tuple[str, str], tuple[float, float]],
    store: MapStore,
    alpha: float,
) -> dict[str, float]:
    """The mean correctness of one pair's keypoints, per metric (cc, soc, soc_geo; cross_cc, cross_soc).

    `pair` is an image_pairs row, `rows` its correspondences (records), `images` the image rows by
    image_id and `keypoints` the (x, y) by (image_id, keypoint): plain lookups, one keypoint at a time.
    """
    source_map, meta = store.get(pair.src_image)
    target_map, _ = store.get(pair.trg_image)
    size = meta["input_size"]
    a, b = (
        torch.from_numpy(np.asarray(source_map, np.float32)),
        torch.from_numpy(np.asarray(target_map, np.float32)),
    )
    _, h, w = b.shape
    threshold = pck_threshold(alpha, images[pair.trg_image])

    def unit(image_id: str, name: str) -> tuple[float, float]:
        x, y = keypoints[(image_id, name)]
        im = images[image_id]
        return official_unit_point(x, y, im["width"], im["height"], size)

    intra = pair.level == "intra"
    scores: dict[str, list[float]] = defaultdict(list)
    names = list(dict.fromkeys(r["src_keypoint"] for r in rows))  # each source keypoint once, in row order
    queries = torch.stack([source_descriptor(a, *unit(pair.src_image, name)) for name in names])
    # Cosine similarity: both sides are L2-normalised, so a dot product with every target patch
    # (all the pair's source keypoints in one product, as the official script does).
    similarities = torch.einsum("kc,chw->khw", queries, b)
    for name, similarity in zip(names, similarities, strict=True):
        pred = predicted_point(similarity)
        soc = [r for r in rows if r["kind"] == "soc" and r["src_keypoint"] == name]
        cc = [r["trg_keypoint"] for r in rows if r["kind"] == "cc" and r["src_keypoint"] == name]
        if soc:  # SOC: the one target keypoint with the same identity
            truth = unit(pair.trg_image, soc[0]["trg_keypoint"])
            scores["soc" if intra else "cross_soc"].append(is_correct(pred, truth, threshold))
            if intra and soc[0]["geo"]:  # SOC-geo: the argmax over the same-concept patches only
                cells = [cell_of(*unit(pair.trg_image, t), h, w) for t in cc]
                scores["soc_geo"].append(is_correct(predicted_point(similarity, cells), truth, threshold))
        if cc:  # CC: any target keypoint of the same concept counts, so the nearest one is scored
            nearest = min(
                np.hypot(pred[0] - gu, pred[1] - gv) for gu, gv in (unit(pair.trg_image, t) for t in cc)
            )
            scores["cc" if intra else "cross_cc"].append(float(nearest < threshold))
    # Step 8, first mean: over the pair's keypoints.
    return {metric: float(np.mean(values)) for metric, values in scores.items()}


# ---------------------------------------------------------------------------- step 8: the reduction
def reference_category_pck(
    images: pd.DataFrame,
    keypoints: pd.DataFrame,
    image_pairs: pd.DataFrame,
    correspondences: pd.DataFrame,
    store: MapStore,
    alpha: float,
) -> dict[tuple[str, str], float]:
    """Official PCK@alpha (0-100) per (metric, category), one evaluated pair at a time.

    Mean over a pair's keypoints (pair_scores), then over the pairs of a category (its pair group). The
    headline is the unweighted mean of these over categories (`official_mean`).
    """
    im = images.set_index("image_id").to_dict("index")
    kp = {(r.image_id, r.keypoint): (r.x, r.y) for r in keypoints.itertuples()}
    by_pair = {pair_id: g.to_dict("records") for pair_id, g in correspondences.groupby("pair_id", sort=False)}
    per_pair: dict[tuple[str, str], list[float]] = defaultdict(list)
    for pair in image_pairs[image_pairs["evaluated"].astype(bool)].itertuples():
        rows = by_pair.get(pair.pair_id, [])
        if not rows:
            continue
        for metric, value in pair_scores(pair, rows, im, kp, store, alpha).items():
            per_pair[(metric, pair.pair_group)].append(value)
    return {key: 100 * float(np.mean(values)) for key, values in per_pair.items()}


def official_mean(category_pck: dict[tuple[str, str], float], metric: str) -> float:
    """The reported number: the unweighted mean over categories of one metric's category PCK."""
    values = [v for (m, _), v in category_pck.items() if m == metric]
    return float(np.mean(values)) if values else float("nan")
