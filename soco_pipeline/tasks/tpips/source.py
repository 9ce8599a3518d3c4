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
from .triplets import generate_triplets


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


def images_table(cfg: TpipsConfig, root: str) -> tuple[pd.DataFrame, dict]:
    """(the image table, metadata): generated renders written under `root`, or the official images as found."""
    if cfg.source.kind == "official":
        out = official_images(cfg)
        return out, {"images": len(out), "source": f"official: {cfg.source.path}"}
    ts = generate_triplets(cfg)
    afc_values, _ = generate_afc(cfg)
    values = pd.concat([ts.images.assign(role="triplet"), afc_values.assign(role="afc")], ignore_index=True)
    written = write_images(values.drop(columns="role"), root, cfg)
    out = values.merge(written, on="image_id", validate="one_to_one")
    return out, {"images": len(out), "seed": cfg.seed, "image_size": cfg.image_size, "source": "generated"}


def ooo_table(cfg: TpipsConfig) -> tuple[pd.DataFrame, dict]:
    """(OOO rows, summary): simulated votes on generated triplets, or the official file's."""
    if cfg.source.kind == "official":
        return official_ooo(cfg)
    return annotate_triplets(generate_triplets(cfg), cfg)


def afc_table(cfg: TpipsConfig) -> tuple[pd.DataFrame, dict]:
    """(2AFC rows, summary): simulated votes on generated items, or the official file's."""
    if cfg.source.kind == "official":
        return official_afc(cfg)
    values, items = generate_afc(cfg)
    return annotate_afc(values, items, cfg)
