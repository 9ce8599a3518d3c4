"""The TPIPS release's odd-one-out JSONL, read as released and written from our tables (docs/tpips.md, "The
released format"); what is skipped or dropped is counted and named, bad input refused naming the fix."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import PurePosixPath

import numpy as np
import pandas as pd

from soco_pipeline import storage

from .formats import NAMED_MAX, SPLITS, TpipsFormatError, jsonl_records, line_image_ids, resolve
from .ooo import OOO_COLUMNS

PATH_FIELDS = ("p0_path", "p1_path", "p2_path")
LABELS = ("p0", "p1", "p2")
SHARE_TOL = 1e-6  # shares summing to 1 within this are kept as written; others are normalised (and counted)


@dataclass(frozen=True)
class ReleaseSet:
    """A released OOO file as read: its rows, kept image ids, what was skipped or dropped, and paths."""

    rows: pd.DataFrame
    images: list[str]
    summary: dict
    paths: dict[str, str]


def is_release_file(path: str) -> bool:
    """Whether a JSONL file is in the released format (its first object names p0_path or factors)."""
    fs, inner = storage.filesystem(path)
    with fs.open(inner, "rb") as f:
        first = next((line for line in f if line.strip()), b"")
    try:
        rec = json.loads(first) if first else None
    except (json.JSONDecodeError, UnicodeDecodeError):
        return False  # the layout's reader names the bad line
    return isinstance(rec, dict) and any(f in rec for f in (*PATH_FIELDS, "factors"))


def _named(items: list[str]) -> list[str]:
    return items[:NAMED_MAX] + (["..."] if len(items) > NAMED_MAX else [])


def _is_share(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v >= 0


def _is_count(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _text(v: object) -> bool:
    return isinstance(v, str) and bool(v.strip())


def _shares(where: str, probs: object) -> tuple[list[float], bool]:
    """(y, whether it was normalised) of a factor's `probs`."""
    if not isinstance(probs, list) or len(probs) != 3:
        raise TpipsFormatError(
            f"{where}: 'probs' must list 3 vote shares [P0, P1, P2] (one per image), got {probs!r}"
        )
    bad = [p for p in probs if not _is_share(p)]
    if bad:
        raise TpipsFormatError(
            f"{where}: 'probs' must be non-negative finite numbers (the share of votes for each image), got "
            f"{probs!r}; fix the shares or drop the factor"
        )
    total = float(sum(probs))
    if total <= 0:
        raise TpipsFormatError(
            f"{where}: 'probs' {probs!r} sum to 0 (no vote); give the shares or drop the factor"
        )
    if abs(total - 1.0) <= SHARE_TOL:
        return [float(p) for p in probs], False
    return [float(p) / total for p in probs], True


def _counts(where: str, factor: dict, y: list[float], n_annotators: int) -> tuple[list[int], int]:
    """Our export's extra `votes` / `cannot_tell` of a factor, checked against the annotator count and the shares."""
    votes, cannot = factor["votes"], factor.get("cannot_tell", 0)
    if not isinstance(votes, list) or len(votes) != 3 or not all(_is_count(v) for v in votes):
        raise TpipsFormatError(f"{where}: extra field 'votes' must be 3 non-negative integers, got {votes!r}")
    if not _is_count(cannot):
        raise TpipsFormatError(
            f"{where}: extra field 'cannot_tell' must be a non-negative integer, got {cannot!r}"
        )
    if sum(votes) + cannot != n_annotators:
        raise TpipsFormatError(
            f"{where}: votes {votes} + cannot_tell {cannot} != the annotator count {n_annotators}; fix the counts "
            f"or drop the extra fields (the shares alone are the release's format)"
        )
    if sum(votes) == 0 or not np.allclose(np.array(votes) / sum(votes), y, atol=SHARE_TOL):
        raise TpipsFormatError(
            f"{where}: extra field 'votes' {votes} does not give the shares 'probs' {y}; fix one or drop 'votes'"
        )
    return [int(v) for v in votes], int(cannot)


def _line_fields(where: str, rec: dict, default_id: str, split: str, splits: tuple[str, ...]) -> tuple:
    missing = [f for f in (*PATH_FIELDS, "factors") if f not in rec]
    if missing:
        hint = (
            " (this line is in the project's own layout: one file holds one format)"
            if "images" in rec
            else ""
        )
        raise TpipsFormatError(
            f"{where}: missing field(s) {missing}; a released odd-one-out line holds p0_path, p1_path, p2_path and "
            f"factors{hint}"
        )
    paths = [rec[f] for f in PATH_FIELDS]
    for f, p in zip(PATH_FIELDS, paths, strict=True):
        if not _text(p):
            raise TpipsFormatError(f"{where}: '{f}' must be an image path under the image root, got {p!r}")
    if not isinstance(rec["factors"], list):
        raise TpipsFormatError(
            f"{where}: 'factors' must be a list of {{name, label, probs}}, got {rec['factors']!r}"
        )
    tid = rec.get("triplet_id", default_id)
    if not _text(tid):
        raise TpipsFormatError(f"{where}: extra field 'triplet_id' must be a non-empty string, got {tid!r}")
    line_split = rec.get("split", split)
    if line_split not in splits:
        raise TpipsFormatError(
            f"{where}: split {line_split!r} is not one of {list(splits)}; fix it (or the config's triplets.splits)"
        )
    return paths, tid, line_split


def read_release(
    path: str,
    image_root: str | None = None,
    split: str = "test",
    judgements: str = "human",
    n_annotators: int = 5,
    prune_cannot_tell: int = 3,
    splits: tuple[str, ...] = SPLITS,
    check_images: bool = True,
) -> ReleaseSet:
    """Read a released odd-one-out JSONL file; image paths are under `image_root` (default: its folder)."""
    root = image_root if image_root is not None else (path.rsplit("/", 1)[0] if "/" in path else ".")
    name = PurePosixPath(path).name
    rows: list[dict] = []
    images: dict[str, str] = {}  # id -> path, of the kept triplets
    named: dict[str, tuple[str, int]] = {}  # id -> (path, first line), of every line
    skipped, dropped, renormalised, ids = [], [], [], {}
    n_factors = not_top = 0
    recs = jsonl_records(path)
    for no, rec in recs:
        where = f"{path}:{no}"
        paths, tid, line_split = _line_fields(where, rec, f"{name}:{no}", split, tuple(splits))
        if tid in ids:
            raise TpipsFormatError(
                f"{where}: triplet_id {tid!r} again (first on line {ids[tid]}); one id names one triplet"
            )
        ids[tid] = no
        image_ids = line_image_ids(path, no, rec, LABELS, paths, named)
        usable, names = [], set()
        for j, factor in enumerate(rec["factors"]):
            n_factors += 1
            fwhere = f"{where} factor {j}"
            if not isinstance(factor, dict):
                raise TpipsFormatError(f"{fwhere}: must be an object {{name, label, probs}}, got {factor!r}")
            label = factor.get("label")
            if not isinstance(label, str) or label not in LABELS:
                how = f"label {json.dumps(label, ensure_ascii=False)}" if "label" in factor else "no label"
                skipped.append(f"{where}: factor {factor.get('name')!r} {how}")
                continue
            aspect = factor.get("name")
            if not _text(aspect):
                raise TpipsFormatError(
                    f"{fwhere}: no 'name'; give the aspect the factor asks (e.g. 'colour')"
                )
            if aspect in names:
                raise TpipsFormatError(
                    f"{fwhere}: factor {aspect!r} twice in one triplet; merge the shares or drop one factor"
                )
            names.add(aspect)
            y, normed = _shares(f"{fwhere} ({aspect!r})", factor.get("probs"))
            if normed:
                renormalised.append(f"{where}: factor {aspect!r}")
            votes, cannot = (
                _counts(f"{fwhere} ({aspect!r})", factor, y, n_annotators) if "votes" in factor else ([], 0)
            )
            not_top += y[LABELS.index(label)] < max(y)
            usable.append((aspect, y, votes, cannot))
        if not usable:
            dropped.append(where)
            continue
        if check_images:
            for p in paths:
                if not storage.exists(resolve(p, root)):
                    raise TpipsFormatError(
                        f"{where}: image {p!r} does not exist under the image root (looked at {resolve(p, root)}); "
                        f"fix the path or source.image_root, or drop the line"
                    )
        images.update((i, p) for i, p in zip(image_ids, paths, strict=True) if i not in images)
        for aspect, y, votes, cannot in usable:
            rows.append(
                {
                    "triplet_id": tid,
                    "image_0": image_ids[0],
                    "image_1": image_ids[1],
                    "image_2": image_ids[2],
                    "aspect": aspect,
                    "votes": votes,
                    "cannot_tell": cannot,
                    "split": line_split,
                    "y_0": y[0],
                    "y_1": y[1],
                    "y_2": y[2],
                    "judgements": judgements,
                }
            )
    df = pd.DataFrame(rows, columns=OOO_COLUMNS)
    df["cannot_tell"] = df.cannot_tell.astype("int64")
    pruned = df.cannot_tell.to_numpy() >= prune_cannot_tell
    summary = {
        "file": path,
        "format": "release",
        "image_root": root,
        "lines": len(recs),
        "factors": n_factors,
        "kept": int((~pruned).sum()),
        "split": split,
        "skipped_factors": len(skipped),
        "skipped": _named(skipped),
        "dropped_triplets": len(dropped),
        "dropped_lines": _named(dropped),
        "renormalised": len(renormalised),
        "renormalised_factors": _named(renormalised),
        "label_not_top": int(not_top),
        "pruned_cannot_tell": int(pruned.sum()),
    }
    return ReleaseSet(df[~pruned].reset_index(drop=True), list(images), summary, images)


def release_lines(ooo: pd.DataFrame, paths: dict[str, str]) -> list[str]:
    """Our OOO rows as released-format lines, one per triplet, labelled by the largest share."""
    out = []
    y = ooo[["y_0", "y_1", "y_2"]].to_numpy(float)
    for _, idx in ooo.groupby("triplet_id", sort=False).indices.items():
        first = ooo.iloc[idx[0]]
        factors = []
        for i in idx:
            r = ooo.iloc[i]
            f = {"name": r.aspect, "label": LABELS[int(np.argmax(y[i]))], "probs": [float(v) for v in y[i]]}
            if len(r.votes):
                f |= {"votes": [int(v) for v in r.votes], "cannot_tell": int(r.cannot_tell)}
            factors.append(f)
        line = {f: paths[first[f"image_{k}"]] for k, f in enumerate(PATH_FIELDS)}
        line |= {"factors": factors, "triplet_id": first.triplet_id, "split": first.split}
        line["image_ids"] = {lab: first[f"image_{k}"] for k, lab in enumerate(LABELS)}
        out.append(json.dumps(line, ensure_ascii=False))
    return out
