"""The family's items from its configured source: `generated` (the embedded renderer and simulated observers)
or `official` (a folder in the documented layout, read by formats.py).

Official layout (docs/tpips.md, "Real data"; TPIPS has no released data, so the layout is the one formats.py
defines):

    <source.path>/ooo.jsonl     one (triplet, aspect) per line, image paths relative to the folder
    <source.path>/afc.jsonl     optional: one (2AFC item, aspect) per line
    <source.path>/<the images the lines name, under any names>

Image ids are the paths as written (foreign names kept); every line is validated and everything the published
pruning removes is counted and named in the summaries (asset metadata), so nothing is dropped silently.
"""

from __future__ import annotations

import io

import pandas as pd
from PIL import Image, UnidentifiedImageError

from soco_pipeline import storage

from .afc import AFC_COLUMNS, annotate_afc, generate_afc
from .config import AFC_FILE, OOO_FILE, TpipsConfig
from .formats import TpipsFormatError, image_paths, load_afc_jsonl, load_ooo_jsonl, resolve
from .images import IMAGE_CATEGORY, write_images
from .ooo import annotate_triplets
from .triplets import generate_triplets, triplet_set, value_records


def _official(cfg: TpipsConfig) -> tuple[str, str | None]:
    folder = str(cfg.source.path)
    afc = storage.join(folder, AFC_FILE)
    return storage.join(folder, OOO_FILE), afc if storage.exists(afc) else None


def official_ooo(cfg: TpipsConfig) -> tuple[pd.DataFrame, dict]:
    """The official OOO rows (pruned, normalised) and what the pruning removed."""
    path, _ = _official(cfg)
    return load_ooo_jsonl(
        path,
        n_annotators=cfg.observer.n_annotators,
        prune_cannot_tell=cfg.observer.prune_cannot_tell,
        judgements=cfg.source.votes_are,
        splits=cfg.triplets.splits,
        aspects=cfg.aspects,
    )


def official_afc(cfg: TpipsConfig) -> tuple[pd.DataFrame, dict]:
    """The official 2AFC rows (ties and >= 3 cannot-tell removed) and what was removed; none without afc.jsonl."""
    _, path = _official(cfg)
    if path is None:
        return pd.DataFrame(columns=AFC_COLUMNS), {
            "file": None,
            "lines": 0,
            "kept": 0,
            "note": f"no {AFC_FILE}",
        }
    return load_afc_jsonl(
        path,
        n_annotators=cfg.observer.n_annotators,
        prune_cannot_tell=cfg.observer.prune_cannot_tell,
        judgements=cfg.source.votes_are,
        sources=cfg.afc.sources,
        aspects=cfg.aspects,
    )


def _size(uri: str) -> tuple[int, int]:
    try:
        with Image.open(io.BytesIO(storage.read_bytes(uri))) as img:
            return img.size
    except (UnidentifiedImageError, OSError) as e:
        raise TpipsFormatError(
            f"{uri}: not a readable image ({e}); replace the file or drop its lines"
        ) from None


def official_images(cfg: TpipsConfig) -> pd.DataFrame:
    """One row per image the official files name (the lines that pruning removes included): image_id (the path
    as written), uri, width, height, category, role (triplet | afc)."""
    official_ooo(cfg)  # every line validated first
    official_afc(cfg)
    folder = str(cfg.source.path)
    ooo_path, afc_path = _official(cfg)
    trip = image_paths(ooo_path, ("images",))
    named = set(trip)
    pair = [i for i in image_paths(afc_path, ("ref", "x0", "x1")) if i not in named] if afc_path else []
    ids = [*trip, *pair]
    uris = [resolve(i, folder) for i in ids]
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
    """(images, triplets, 2AFC items, metadata) of the configured source, made once: the generator's
    triplets and 2AFC items with every image rendered under `root`, or the official files' images as found
    with the triplets and items their lines name."""
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
