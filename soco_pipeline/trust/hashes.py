"""Per-sample input hashes over image content (never paths) and task hashes over them (docs/results.md,
"Per-sample hashes and task hashes")."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable

import numpy as np
import pandas as pd

from soco_pipeline.storage import read_bytes

MATCHING_HASH = "matching_hash"  # sample_hashes' metadata: the protocol's matching hash they were made with
HASH_LENGTH = 16  # hex characters kept of each sha256 (64 bits: collisions are not a concern at 1M rows)


def sha(text: str) -> str:
    """The first HASH_LENGTH hex characters of the sha256 of `text`."""
    return hashlib.sha256(text.encode()).hexdigest()[:HASH_LENGTH]


def _sha_many(texts: Iterable[str]) -> np.ndarray:
    return np.array([sha(t) for t in texts], dtype=object)


def _joined(sep: str, *parts):
    """`a + sep + b + sep + c ...` of equal-length Series / arrays, left to right (a row-wise join)."""
    return functools.reduce(lambda a, b: a + sep + b, parts)


def _fmt(values: pd.Series) -> pd.Series:
    """Floats with a fixed 4-decimal text form ('nan' for missing): the hash sees values, not dtype noise."""
    return values.astype(np.float64).round(4).map("{:.4f}".format)


def image_digests(image_set: pd.DataFrame) -> pd.Series:
    """sha256 of every image file's bytes, indexed by image_id (reads each image once)."""
    uris = image_set.set_index("image_id")["uri"]
    return pd.Series(
        [hashlib.sha256(read_bytes(u)).hexdigest()[:HASH_LENGTH] for u in uris],
        index=uris.index,
        name="image_digest",
    )


def pair_hashes(
    image_pairs: pd.DataFrame,
    correspondences: pd.DataFrame,
    keypoints: pd.DataFrame,
    image_set: pd.DataFrame,
    matching_hash: str,
    digests: pd.Series | None = None,
) -> pd.DataFrame:
    """pair_id, pair_group, src_image, trg_image and pair_hash of each pair (`digests`: image digests)."""
    digests = image_digests(image_set) if digests is None else digests
    kp = keypoints.set_index(["image_id", "keypoint"])
    kp_text = _joined(",", _fmt(kp["x"]), _fmt(kp["y"]), kp["visible"].astype(bool).astype(str)).rename("kp")
    pairs = image_pairs[["pair_id", "level", "pair_group", "src_image", "trg_image"]]
    corr = correspondences.merge(pairs[["pair_id", "src_image", "trg_image"]], on="pair_id", how="inner")
    src = kp_text.reindex(pd.MultiIndex.from_arrays([corr["src_image"], corr["src_keypoint"]])).fillna("?")
    trg = kp_text.reindex(pd.MultiIndex.from_arrays([corr["trg_image"], corr["trg_keypoint"]])).fillna("?")
    # kind:src_keypoint@x,y,visible>trg_keypoint@x,y,visible:geo:n_candidates
    src_at = _joined("@", corr["src_keypoint"].astype(str), src.to_numpy())
    trg_at = _joined("@", corr["trg_keypoint"].astype(str), trg.to_numpy())
    geo, n_cand = corr["geo"].astype(bool).astype(str), corr["n_candidates"].astype(str)
    row_text = _joined(":", corr["kind"].astype(str), _joined(">", src_at, trg_at), geo, n_cand)
    per_pair = (
        pd.DataFrame({"pair_id": corr["pair_id"], "t": row_text})
        .sort_values(["pair_id", "t"])
        .groupby("pair_id", sort=False)["t"]
        .agg("|".join)
    )
    im = image_set.set_index("image_id")
    corners = _joined(",", *(_fmt(im[c]) for c in ("bbox_l", "bbox_t", "bbox_r", "bbox_b")))
    box = im["width"].astype(str) + "x" + im["height"].astype(str) + ":" + corners
    text = _joined(
        ";",
        pairs["pair_id"].astype(str),
        pairs["level"].astype(str),
        digests.reindex(pairs["src_image"]).fillna("?").to_numpy(),
        digests.reindex(pairs["trg_image"]).fillna("?").to_numpy(),
        box.reindex(pairs["trg_image"]).fillna("?").to_numpy(),
        per_pair.reindex(pairs["pair_id"]).fillna("").to_numpy(),
        matching_hash,
    )
    out = pairs[["pair_id", "pair_group", "src_image", "trg_image"]].reset_index(drop=True)
    out["pair_hash"] = _sha_many(text)
    return out


def four_choice_hashes(four_choice: pd.DataFrame, pair_hash: pd.DataFrame) -> pd.DataFrame:
    """One row per four-choice item: pair_id, src_keypoint, item_hash (pair hash + query + options + answer)."""
    ph = pair_hash.set_index("pair_id")["pair_hash"]
    opts = four_choice[["option_a", "option_b", "option_c", "option_d"]].astype(str).agg(",".join, axis=1)
    pair = ph.reindex(four_choice["pair_id"]).fillna("?").to_numpy()
    text = _joined(
        ";", pair, four_choice["src_keypoint"].astype(str), opts, four_choice["answer"].astype(str)
    )
    out = four_choice[["pair_id", "src_keypoint"]].reset_index(drop=True)
    out["item_hash"] = _sha_many(text.to_numpy())
    return out


def lvlm_item_hashes(items: pd.DataFrame) -> pd.DataFrame:
    """item_hash of each LVLM item row over question, options, answer and image digests."""

    def digest(paths: pd.Series) -> np.ndarray:
        return np.array(
            [
                hashlib.sha256(read_bytes(p)).hexdigest()[:HASH_LENGTH] if isinstance(p, str) and p else ""
                for p in paths
            ],
            dtype=object,
        )

    text = _joined(
        ";",
        items["setting"].astype(str),
        items["question"].astype(str),
        items[["A", "B", "C", "D"]].astype(str).agg("|".join, axis=1),
        items["answer"].astype(str),
        digest(items["src_render"]),
        digest(items["trg_render"]),
        "",  # once the pair hash; kept empty so that the item hashes stay the same
    )
    out = items[["setting", "index", "pair_id"]].reset_index(drop=True)
    out["item_hash"] = _sha_many(text.to_numpy())
    return out


def task_hash(ids: Iterable, hashes: Iterable[str]) -> str:
    """sha256 over the sorted (id, hash) list: the same set of inputs gives the same task hash."""
    rows = sorted(f"{i}={h}" for i, h in zip(ids, hashes, strict=True))
    return sha("\n".join(rows))
