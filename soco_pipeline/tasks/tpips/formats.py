"""JSONL import/export of the odd-one-out and 2AFC sets (one JSON object per line; docs/tpips.md).

OOO line:  {"triplet_id": str, "images": [uri, uri, uri], "aspect": str, "votes": [int, int, int],
            "cannot_tell": int, "split": "train" | "val" | "test"}
2AFC line: {"ref": uri, "x0": uri, "x1": uri, "aspect": str, "votes": [int, int], "source": str,
            "cannot_tell": int (optional, default 0), "item_id": str (optional)}

Reading checks every line and names the file, line and field of the first bad one: an image that does not
exist, votes (+ cannot_tell) that do not sum to the annotator count, an empty aspect, a wrong vote count.
The published pruning (>= 3 "cannot tell") and normalisation are applied on read; a reader for the official
layout, once released, is one more module that returns the same tables.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from soco_pipeline import storage

from .afc import AFC_COLUMNS
from .annotators import normalise
from .ooo import OOO_COLUMNS


class TpipsFormatError(ValueError):
    """A bad record in a TPIPS JSONL file; the message names the file, the line and the fix."""


def _lines(path: str) -> list[tuple[int, dict]]:
    out = []
    for no, line in enumerate(storage.read_bytes(path).decode().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise TpipsFormatError(f"{path}:{no}: not valid JSON ({e})") from None
        if not isinstance(rec, dict):
            raise TpipsFormatError(f"{path}:{no}: each line must be a JSON object")
        out.append((no, rec))
    return out


def _check_record(
    path: str,
    no: int,
    rec: dict,
    fields: tuple[str, ...],
    n_votes: int,
    n_annotators: int,
    check_images: bool,
) -> None:
    where = f"{path}:{no}"
    missing = [f for f in fields if f not in rec]
    if missing:
        raise TpipsFormatError(f"{where}: missing field(s) {missing}")
    aspect = rec["aspect"]
    if not isinstance(aspect, str) or not aspect.strip():
        raise TpipsFormatError(f"{where}: empty aspect; give the aspect text (e.g. 'colour' or 'overall')")
    votes = rec["votes"]
    if (
        not isinstance(votes, list)
        or len(votes) != n_votes
        or not all(isinstance(v, int) and v >= 0 for v in votes)
    ):
        raise TpipsFormatError(f"{where}: 'votes' must be {n_votes} non-negative integers, got {votes!r}")
    cannot = rec.get("cannot_tell", 0)
    if not isinstance(cannot, int) or cannot < 0:
        raise TpipsFormatError(f"{where}: 'cannot_tell' must be a non-negative integer, got {cannot!r}")
    if sum(votes) + cannot != n_annotators:
        raise TpipsFormatError(
            f"{where}: votes {votes} + cannot_tell {cannot} = {sum(votes) + cannot}, not the annotator count "
            f"{n_annotators}; every annotator gives one vote or 'cannot tell'"
        )
    if check_images:
        images = rec["images"] if "images" in rec else [rec["ref"], rec["x0"], rec["x1"]]
        for uri in images:
            if not isinstance(uri, str) or not uri or not storage.exists(uri):
                raise TpipsFormatError(
                    f"{where}: image {uri!r} does not exist; fix the path or drop the record"
                )


def _write_lines(lines: list[str], path: str) -> int:
    storage.write_bytes_atomic(path, ("\n".join(lines) + "\n").encode())
    return len(lines)


def write_ooo_jsonl(ooo: pd.DataFrame, uris: dict[str, str], path: str) -> int:
    """Write OOO rows (OOO_COLUMNS) as JSONL with image uris from `uris` (image_id -> uri); returns lines."""
    lines = [
        json.dumps(
            {
                "triplet_id": r.triplet_id,
                "images": [uris[r.image_0], uris[r.image_1], uris[r.image_2]],
                "aspect": r.aspect,
                "votes": [int(v) for v in r.votes],
                "cannot_tell": int(r.cannot_tell),
                "split": r.split,
            }
        )
        for r in ooo.itertuples(index=False)
    ]
    return _write_lines(lines, path)


def read_ooo_jsonl(
    path: str,
    n_annotators: int = 5,
    prune_cannot_tell: int = 3,
    check_images: bool = True,
    judgements: str = "simulated",
) -> pd.DataFrame:
    """OOO rows (OOO_COLUMNS; image columns hold uris) from JSONL, validated, pruned and normalised."""
    recs = _lines(path)
    for no, rec in recs:
        _check_record(
            path,
            no,
            rec,
            ("triplet_id", "images", "aspect", "votes", "cannot_tell", "split"),
            3,
            n_annotators,
            False,
        )
        if not isinstance(rec["images"], list) or len(rec["images"]) != 3:
            raise TpipsFormatError(f"{path}:{no}: 'images' must list 3 image paths, got {rec['images']!r}")
        if check_images:
            _check_record(path, no, rec, (), 3, n_annotators, True)
    df = pd.DataFrame(
        {
            "triplet_id": [r["triplet_id"] for _, r in recs],
            "image_0": [r["images"][0] for _, r in recs],
            "image_1": [r["images"][1] for _, r in recs],
            "image_2": [r["images"][2] for _, r in recs],
            "aspect": [r["aspect"] for _, r in recs],
            "votes": [list(r["votes"]) for _, r in recs],
            "cannot_tell": [int(r["cannot_tell"]) for _, r in recs],
            "split": [r["split"] for _, r in recs],
        }
    )
    votes = np.array(df.votes.tolist(), float).reshape(-1, 3)
    keep, y = normalise(votes, df.cannot_tell.to_numpy(), prune_cannot_tell)
    df[["y_0", "y_1", "y_2"]] = y
    df["judgements"] = judgements
    return df[keep].reset_index(drop=True)[OOO_COLUMNS]


def write_afc_jsonl(afc: pd.DataFrame, uris: dict[str, str], path: str) -> int:
    """Write 2AFC rows (AFC_COLUMNS) as JSONL with image uris; returns the number of lines."""
    lines = [
        json.dumps(
            {
                "item_id": r.item_id,
                "ref": uris[r.ref],
                "x0": uris[r.x0],
                "x1": uris[r.x1],
                "aspect": r.aspect,
                "votes": [int(v) for v in r.votes],
                "source": r.source,
                "cannot_tell": int(r.cannot_tell),
            }
        )
        for r in afc.itertuples(index=False)
    ]
    return _write_lines(lines, path)


def read_afc_jsonl(
    path: str,
    n_annotators: int = 5,
    prune_cannot_tell: int = 3,
    check_images: bool = True,
    judgements: str = "simulated",
) -> pd.DataFrame:
    """2AFC rows (AFC_COLUMNS; image columns hold uris) from JSONL, validated; ties and >= 3 cannot-tell removed."""
    recs = _lines(path)
    for no, rec in recs:
        _check_record(
            path, no, rec, ("ref", "x0", "x1", "aspect", "votes", "source"), 2, n_annotators, check_images
        )
    df = pd.DataFrame(
        {
            "item_id": [r.get("item_id", f"{path}:{no}") for no, r in recs],
            "ref": [r["ref"] for _, r in recs],
            "x0": [r["x0"] for _, r in recs],
            "x1": [r["x1"] for _, r in recs],
            "aspect": [r["aspect"] for _, r in recs],
            "votes": [list(r["votes"]) for _, r in recs],
            "cannot_tell": [int(r.get("cannot_tell", 0)) for _, r in recs],
            "source": [r["source"] for _, r in recs],
        }
    )
    votes = np.array(df.votes.tolist(), float).reshape(-1, 2)
    keep, y = normalise(votes, df.cannot_tell.to_numpy(), prune_cannot_tell, drop_ties=True)
    df[["y_0", "y_1"]] = y
    df["judgements"] = judgements
    return df[keep].reset_index(drop=True)[AFC_COLUMNS]
