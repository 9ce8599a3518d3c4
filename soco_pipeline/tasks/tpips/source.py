"""The family's items from its configured source: `generated` or `official` (docs/tpips.md, "Real data")."""

from __future__ import annotations

import io

import pandas as pd
from PIL import Image, UnidentifiedImageError

from soco_pipeline import storage

from .afc import AFC_COLUMNS, annotate_afc, generate_afc
from .config import AFC_FILE, OOO_FILE, TpipsConfig
from .formats import TpipsFormatError, image_files, load_afc_jsonl, load_ooo_jsonl, resolve
from .images import IMAGE_CATEGORY, write_images
from .ooo import annotate_triplets
from .release import ReleaseSet, is_release_file, read_release
from .triplets import generate_triplets, triplet_set, value_records


def _official(cfg: TpipsConfig) -> tuple[str, str | None]:
    """(the OOO file, the 2AFC file or None) of an official source."""
    path = str(cfg.source.path)
    if storage.exists(storage.join(path, OOO_FILE)):
        afc = storage.join(path, AFC_FILE)
        return storage.join(path, OOO_FILE), afc if storage.exists(afc) else None
    return path, None


def _root(cfg: TpipsConfig, file: str) -> str:
    """The folder the image paths of `file` are relative to."""
    if cfg.source.image_root:
        return str(cfg.source.image_root)
    return file.rsplit("/", 1)[0] if "/" in file else "."


def _reader(cfg: TpipsConfig, path: str) -> dict:
    """The settings the JSONL readers of our layout take from the config."""
    o = cfg.observer
    keys = {"n_annotators": o.n_annotators, "prune_cannot_tell": o.prune_cannot_tell, "aspects": cfg.aspects}
    return keys | {"judgements": cfg.source.votes_are, "base": _root(cfg, path)}


def official_release(cfg: TpipsConfig) -> ReleaseSet | None:
    """The official OOO file read in the released format, or None when it is in our own layout."""
    path, _ = _official(cfg)
    if not is_release_file(path):
        return None
    return read_release(
        path,
        _root(cfg, path),
        split=cfg.source.split,
        judgements=cfg.source.votes_are,
        n_annotators=cfg.observer.n_annotators,
        prune_cannot_tell=cfg.observer.prune_cannot_tell,
        splits=tuple(cfg.triplets.splits),
    )


def official_ooo(cfg: TpipsConfig) -> tuple[pd.DataFrame, dict]:
    """The official OOO rows and what the reader skipped, dropped or pruned."""
    release = official_release(cfg)
    if release is not None:
        return release.rows, release.summary
    path, _ = _official(cfg)
    return load_ooo_jsonl(path, splits=cfg.triplets.splits, **_reader(cfg, path))


def source_note(cfg: TpipsConfig) -> str | None:
    """One line for the board on what the official OOO reader skipped and dropped (None for generated data)."""
    if cfg.source.kind != "official":
        return None
    _, s = official_ooo(cfg)
    if s.get("format") != "release":
        return (
            f"source: {s['file']} (our layout): {s['kept']} of {s['lines']} (triplet, aspect) lines kept, "
            f"{s['pruned_cannot_tell']} pruned (>= 3 cannot tell), {s['pruned_ties']} ties"
        )

    def first(named: list[str]) -> str:  # "line 4", "line 2: factor 'x' no label"; the first 3 of them
        short = [n.replace(f"{s['file']}:", "line ", 1) for n in named if n != "..."]
        return "; ".join(short[:3]) + (" ..." if len(short) > 3 or "..." in named else "") or "-"

    return (
        f"source: {s['file']} (released format; split {s['split']!r} where a line names none): {s['kept']} "
        f"(triplet, factor) rows kept of {s['factors']} factors on {s['lines']} lines; "
        f"{s['skipped_factors']} factors skipped, no usable label ({first(s['skipped'])}); "
        f"{s['dropped_triplets']} triplets dropped, no usable factor ({first(s['dropped_lines'])}); "
        f"{s['renormalised']} factors' shares normalised to sum 1; all named in tpips_ooo's metadata `summary`"
    )


def official_afc(cfg: TpipsConfig) -> tuple[pd.DataFrame, dict]:
    """The official 2AFC rows (ties and >= 3 cannot-tell removed) and what was removed; none without afc.jsonl."""
    _, path = _official(cfg)
    if path is None:
        none = {"file": None, "lines": 0, "kept": 0, "note": f"no {AFC_FILE}"}
        return pd.DataFrame(columns=AFC_COLUMNS), none
    return load_afc_jsonl(path, sources=cfg.afc.sources, **_reader(cfg, path))


def _size(uri: str) -> tuple[int, int]:
    try:
        with Image.open(io.BytesIO(storage.read_bytes(uri))) as img:
            return img.size
    except (UnidentifiedImageError, OSError) as e:
        raise TpipsFormatError(
            f"{uri}: not a readable image ({e}); replace the file or drop its lines"
        ) from None


def official_images(cfg: TpipsConfig) -> pd.DataFrame:
    """One row per image the official files name: image_id, uri, width, height, category, role."""
    release = official_release(cfg)
    if release is None:
        official_ooo(cfg)  # every line validated first
    official_afc(cfg)
    ooo_path, afc_path = _official(cfg)
    trip = release.paths if release is not None else image_files(ooo_path, ("images",))
    pair = image_files(afc_path, ("ref", "x0", "x1")) if afc_path else {}
    clash = [i for i, p in pair.items() if trip.get(i, p) != p]
    if clash:
        raise TpipsFormatError(
            f"{afc_path}: image id {clash[0]!r} names {pair[clash[0]]!r} there but {trip[clash[0]]!r} in "
            f"{ooo_path}; one id names one image in both files: fix 'image_ids' (or the path)"
        )
    pair = {i: p for i, p in pair.items() if i not in trip}
    ids = [*trip, *pair]
    uris = [resolve(p, _root(cfg, ooo_path)) for p in [*trip.values(), *pair.values()]]
    sizes = [_size(u) for u in uris]
    return pd.DataFrame(
        {
            "image_id": ids,
            "uri": uris,
            "width": [w for w, _ in sizes],
            "height": [h for _, h in sizes],
            "category": IMAGE_CATEGORY,
            "role": ["triplet"] * len(trip) + ["afc"] * len(pair),
        }
    )


def renders(cfg: TpipsConfig, root: str) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, dict]:
    """(images, triplets, 2AFC items, metadata) of the configured source, made once."""
    if cfg.source.kind == "official":
        images = official_images(cfg)
        ooo, _ = official_ooo(cfg)
        afc, _ = official_afc(cfg)
        triplets = (
            ooo.groupby("triplet_id", sort=False)
            .agg(
                image_0=("image_0", "first"),
                image_1=("image_1", "first"),
                image_2=("image_2", "first"),
                varied=("aspect", lambda a: ",".join(sorted(set(a) - {"overall"}))),
                split=("split", "first"),
            )
            .reset_index()
        )
        items = afc.groupby("item_id", sort=False)[["ref", "x0", "x1", "source"]].first().reset_index()
        return images, triplets, items, {"images": len(images), "source": f"official: {cfg.source.path}"}
    ts = generate_triplets(cfg)
    afc_values, afc_items = generate_afc(cfg)
    values = pd.concat([ts.images.assign(role="triplet"), afc_values.assign(role="afc")], ignore_index=True)
    written = write_images(values.drop(columns="role"), root, cfg)
    images = values.merge(written, on="image_id", validate="one_to_one")
    meta = {"images": len(images), "seed": cfg.seed, "image_size": cfg.image_size, "source": "generated"}
    return images, ts.triplets, afc_items, meta


def ooo_table(cfg: TpipsConfig, images: pd.DataFrame, triplets: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """(OOO rows, summary): simulated votes on the stored triplets (none regenerated), or the official file's."""
    if cfg.source.kind == "official":
        return official_ooo(cfg)
    return annotate_triplets(triplet_set(images, triplets), cfg)


def afc_table(cfg: TpipsConfig, images: pd.DataFrame, items: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """(2AFC rows, summary): simulated votes on the stored 2AFC items, or the official file's."""
    if cfg.source.kind == "official":
        return official_afc(cfg)
    return annotate_afc(value_records(images, "afc"), items, cfg)
