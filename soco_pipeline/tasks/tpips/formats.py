"""JSONL import/export of the odd-one-out and 2AFC sets in our layout (docs/tpips.md, "Formats"): one line per
(item, aspect); the published pruning is applied on read and counted, the removed lines named."""

from __future__ import annotations

import json
from collections.abc import Iterable

import numpy as np
import pandas as pd

from soco_pipeline import storage

from .afc import AFC_COLUMNS
from .annotators import normalise
from .ooo import OOO_COLUMNS

SPLITS = ("train", "val", "test")
OOO_FIELDS = ("triplet_id", "images", "aspect", "votes", "cannot_tell", "split")
NAMED_MAX = 20  # pruned lines named in a summary (all are counted)


class TpipsFormatError(ValueError):
    """A bad record in a TPIPS JSONL file; the message names the file, the line and the fix."""


def jsonl_records(path: str) -> list[tuple[int, dict]]:
    """(line number, object) of every non-blank line of a JSONL file, refusing a line that is no object."""
    out = []
    try:
        text = storage.read_bytes(path).decode()
    except UnicodeDecodeError as e:
        raise TpipsFormatError(f"{path}: not UTF-8 text ({e}); write the file as UTF-8 JSONL") from None
    for no, line in enumerate(text.splitlines(), start=1):
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


def _count(v: object) -> bool:
    """A non-negative JSON integer (bool is an int in Python, not in the format)."""
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _text(v: object) -> bool:
    return isinstance(v, str) and bool(v.strip())


def resolve(path: str, base: str | None) -> str:
    """The location of an image path as written: absolute (or a URL) as is, relative under `base`."""
    if base is None or "://" in path or path.startswith("/"):
        return path
    return storage.join(base, path)


def line_image_ids(
    path: str, no: int, rec: dict, keys: tuple[str, ...], paths: list, named: dict[str, tuple[str, int]]
) -> list[str]:
    """The ids of a line's images (`image_ids`, else the paths); `named` refuses an id naming two paths."""
    where = f"{path}:{no}"
    for p in paths:
        if not _text(p):
            raise TpipsFormatError(f"{where}: image path {p!r} is not a path; give the image file")
    ids = list(paths)
    if "image_ids" in rec:
        given = rec["image_ids"]
        if not isinstance(given, dict) or set(given) != set(keys) or not all(_text(given[k]) for k in keys):
            raise TpipsFormatError(
                f"{where}: extra field 'image_ids' must map {', '.join(keys)} to non-empty image ids, got "
                f"{given!r}; fix it or drop it (the paths are then the ids)"
            )
        ids = [given[k] for k in keys]
    for i, p in zip(ids, paths, strict=True):
        first, line = named.setdefault(i, (p, no))
        if first != p:
            raise TpipsFormatError(
                f"{where}: image id {i!r} names {p!r} here but {first!r} on line {line}; one id names one "
                f"image: fix 'image_ids' (or the path)"
            )
    return ids


def _folder(path: str) -> str:
    return path.rsplit("/", 1)[0] if "/" in path else "."


def _check_record(where: str, rec: dict, fields: tuple, n_votes: int, n_annotators: int, aspects) -> None:
    missing = [f for f in fields if f not in rec]
    if missing:
        raise TpipsFormatError(f"{where}: missing field(s) {missing}")
    aspect = rec["aspect"]
    if not _text(aspect):
        raise TpipsFormatError(f"{where}: empty aspect; give the aspect text (e.g. 'colour' or 'overall')")
    if aspects is not None and aspect not in aspects:
        raise TpipsFormatError(
            f"{where}: aspect {aspect!r} is not in the config's vocabulary {sorted(aspects)}; add it to 'aspects'"
        )
    votes = rec["votes"]
    if not isinstance(votes, list) or len(votes) != n_votes or not all(_count(v) for v in votes):
        raise TpipsFormatError(
            f"{where}: 'votes' must be {n_votes} non-negative integers (not true/false), got {votes!r}"
        )
    cannot = rec.get("cannot_tell", 0)
    if not _count(cannot):
        raise TpipsFormatError(f"{where}: 'cannot_tell' must be a non-negative integer, got {cannot!r}")
    if sum(votes) + cannot != n_annotators:
        raise TpipsFormatError(
            f"{where}: votes {votes} + cannot_tell {cannot} = {sum(votes) + cannot}, not the annotator count "
            f"{n_annotators}; every annotator gives one vote or 'cannot tell'"
        )


def _check_images(where: str, images: list, base: str | None) -> None:
    for p in images:
        if not _text(p):
            raise TpipsFormatError(f"{where}: image path {p!r} is not a path; give the image file")
        if not storage.exists(resolve(p, base)):
            raise TpipsFormatError(
                f"{where}: image {p!r} does not exist (looked at {resolve(p, base)}); fix the path or drop the record"
            )


def _check_item(seen: dict, aspects_seen: dict, path: str, no: int, key: tuple[str, str], what) -> None:
    """Refuse a repeated (item, aspect) and an item whose lines disagree on `what` (its images, split...)."""
    item, aspect = key
    if key in aspects_seen:
        raise TpipsFormatError(
            f"{path}:{no}: item {item!r} is asked {aspect!r} again (first on line {aspects_seen[key]}); "
            f"one line per (item, aspect): merge the votes or drop one line"
        )
    aspects_seen[key] = no
    if item in seen and seen[item][1] != what:
        raise TpipsFormatError(
            f"{path}:{no}: item {item!r} has {what} here but {seen[item][1]} on line {seen[item][0]}; "
            f"one id names one item: give the other one its own id"
        )
    seen.setdefault(item, (no, what))


def _pruned(df: pd.DataFrame, path: str, lines: list, prune: int, judgements: str, columns: list) -> tuple:
    """The rows the published pruning keeps (with their vote shares y_k) and a summary of what it removed."""
    k = 3 if "image_2" in df else 2
    cannot = df.cannot_tell.to_numpy()
    keep, y = normalise(np.array(df.votes.tolist(), float).reshape(-1, k), cannot, prune, drop_ties=k == 2)
    df[[f"y_{i}" for i in range(k)]] = y
    df["judgements"] = judgements
    dropped = [n for n, kept in zip(lines, keep, strict=True) if not kept]
    by_cannot = int(((cannot >= prune) & ~keep).sum())
    return df[keep].reset_index(drop=True)[columns], {
        "file": path,
        "lines": len(lines),
        "kept": int(keep.sum()),
        "pruned_cannot_tell": by_cannot,
        "pruned_ties": len(dropped) - by_cannot,
        "pruned_lines": [f"{path}:{n}" for n in dropped[:NAMED_MAX]]
        + (["..."] if len(dropped) > NAMED_MAX else []),
    }


def image_files(path: str, fields: tuple[str, ...]) -> dict[str, str]:
    """Image id -> path as written of every image a validated JSONL file's `fields` name, in order."""
    found: dict[str, str] = {}
    for _, rec in jsonl_records(path):
        ids = rec.get("image_ids", {})
        for f in fields:
            if isinstance(rec[f], list):
                found.update((p, p) for p in rec[f] if p not in found)
            else:
                found.setdefault(ids.get(f, rec[f]), rec[f])
    return found


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
            },
            ensure_ascii=False,
        )
        for r in ooo.itertuples(index=False)
    ]
    return _write_lines(lines, path)


def load_ooo_jsonl(
    path: str,
    n_annotators: int = 5,
    prune_cannot_tell: int = 3,
    check_images: bool = True,
    judgements: str = "simulated",
    splits: Iterable[str] = SPLITS,
    aspects: Iterable[str] | None = None,
    base: str | None = None,
) -> tuple[pd.DataFrame, dict]:
    """(OOO rows, pruning summary) of a JSONL file, every line validated, pruned and normalised."""
    base = base if base is not None else _folder(path)
    splits, aspects = tuple(splits), (set(aspects) if aspects is not None else None)
    recs = jsonl_records(path)
    seen, asked = {}, {}
    for no, rec in recs:
        where = f"{path}:{no}"
        _check_record(where, rec, OOO_FIELDS, 3, n_annotators, aspects)
        if not _text(rec["triplet_id"]):
            raise TpipsFormatError(
                f"{where}: 'triplet_id' must be a non-empty string, got {rec['triplet_id']!r}"
            )
        if not isinstance(rec["images"], list) or len(rec["images"]) != 3:
            raise TpipsFormatError(f"{where}: 'images' must list 3 image paths, got {rec['images']!r}")
        if rec["split"] not in splits:
            raise TpipsFormatError(
                f"{where}: split {rec['split']!r} is not one of {list(splits)}; fix the split (or the config's "
                f"triplets.splits)"
            )
        if check_images:
            _check_images(where, rec["images"], base)
        what = {"images": list(rec["images"]), "split": rec["split"]}
        _check_item(seen, asked, path, no, (rec["triplet_id"], rec["aspect"]), what)
    df = pd.DataFrame(
        {
            "triplet_id": [r["triplet_id"] for _, r in recs],
            **{f"image_{k}": [r["images"][k] for _, r in recs] for k in range(3)},
            "aspect": [r["aspect"] for _, r in recs],
            "votes": [list(r["votes"]) for _, r in recs],
            "cannot_tell": [int(r["cannot_tell"]) for _, r in recs],
            "split": [r["split"] for _, r in recs],
        }
    )
    return _pruned(df, path, [no for no, _ in recs], prune_cannot_tell, judgements, OOO_COLUMNS)


def write_afc_jsonl(afc: pd.DataFrame, uris: dict[str, str], path: str, keep_ids: bool = False) -> int:
    """Write 2AFC rows as JSONL with image uris (`keep_ids`: the ids too); returns the number of lines."""
    lines = []
    for r in afc.itertuples(index=False):
        line = {
            "item_id": r.item_id,
            "ref": uris[r.ref],
            "x0": uris[r.x0],
            "x1": uris[r.x1],
            "aspect": r.aspect,
            "votes": [int(v) for v in r.votes],
            "source": r.source,
            "cannot_tell": int(r.cannot_tell),
        }
        if keep_ids:
            line["image_ids"] = {"ref": r.ref, "x0": r.x0, "x1": r.x1}
        lines.append(json.dumps(line, ensure_ascii=False))
    return _write_lines(lines, path)


def load_afc_jsonl(
    path: str,
    n_annotators: int = 5,
    prune_cannot_tell: int = 3,
    check_images: bool = True,
    judgements: str = "simulated",
    sources: Iterable[str] | None = None,
    aspects: Iterable[str] | None = None,
    base: str | None = None,
) -> tuple[pd.DataFrame, dict]:
    """(2AFC rows, pruning summary) of a JSONL file, validated; ties and >= 3 cannot-tell removed."""
    base = base if base is not None else _folder(path)
    sources = tuple(sources) if sources is not None else None
    aspects = set(aspects) if aspects is not None else None
    recs = jsonl_records(path)
    seen, asked = {}, {}
    named: dict[str, tuple[str, int]] = {}
    ids = []
    for no, rec in recs:
        where = f"{path}:{no}"
        _check_record(where, rec, ("ref", "x0", "x1", "aspect", "votes", "source"), 2, n_annotators, aspects)
        if rec["aspect"] == "overall":
            raise TpipsFormatError(
                f"{where}: 2AFC aspect 'overall': the paper's 2AFC has no overall aspect (appendix A.2); "
                f"name the aspect the comparison is about or drop the line"
            )
        if sources is not None and rec["source"] not in sources:
            raise TpipsFormatError(
                f"{where}: source {rec['source']!r} is not one of {list(sources)}; fix it or list it in afc.sources"
            )
        item = rec.get("item_id", f"{path}:{no}")
        if not _text(item):
            raise TpipsFormatError(f"{where}: 'item_id' must be a non-empty string, got {item!r}")
        keys = ("ref", "x0", "x1")
        line_ids = line_image_ids(path, no, rec, keys, [rec[k] for k in keys], named)
        if check_images:
            _check_images(where, [rec[k] for k in keys], base)
        what = dict(zip(keys, line_ids, strict=True)) | {"source": rec["source"]}
        _check_item(seen, asked, path, no, (item, rec["aspect"]), what)
        ids.append(line_ids)
    df = pd.DataFrame(
        {
            "item_id": [r.get("item_id", f"{path}:{no}") for no, r in recs],
            "ref": [i[0] for i in ids],
            "x0": [i[1] for i in ids],
            "x1": [i[2] for i in ids],
            "aspect": [r["aspect"] for _, r in recs],
            "votes": [list(r["votes"]) for _, r in recs],
            "cannot_tell": [int(r.get("cannot_tell", 0)) for _, r in recs],
            "source": [r["source"] for _, r in recs],
        }
    )
    return _pruned(df, path, [no for no, _ in recs], prune_cannot_tell, judgements, AFC_COLUMNS)
