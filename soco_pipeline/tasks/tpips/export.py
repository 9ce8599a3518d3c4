"""`soco export-family tpips OUT --format release`: the OOO and 2AFC files and their images, read back as
`source: {kind: official, path: OUT}` into the same tables."""

from __future__ import annotations

from pathlib import PurePosixPath

import pandas as pd

from soco_pipeline import storage

from .config import AFC_FILE, OOO_FILE
from .formats import write_afc_jsonl
from .release import release_lines

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".tif", ".tiff", ".gif")


def release_path(image_id: str, n: int) -> str:
    """Where image `image_id` (the n-th written) goes in the release folder (absolute: under external/)."""
    suffix = PurePosixPath(image_id).suffix.lower()
    if "://" in image_id or image_id.startswith("/") or ".." in PurePosixPath(image_id).parts:
        return f"external/{n:06d}{suffix if suffix in IMAGE_SUFFIXES else '.png'}"
    return image_id if suffix in IMAGE_SUFFIXES else f"{image_id}.png"


def export_release(
    ooo: pd.DataFrame, afc: pd.DataFrame, images: pd.DataFrame, out: str, overwrite: bool = False
) -> dict:
    """Write `ooo`, `afc` and their images as a release folder at `out`; returns what was written."""
    target = storage.join(out, OOO_FILE)
    if storage.exists(target) and not overwrite:
        raise FileExistsError(f"{target} exists; pass --force to replace the release folder's files")
    ids = list(dict.fromkeys([*ooo.image_0, *ooo.image_1, *ooo.image_2, *afc.ref, *afc.x0, *afc.x1]))
    uris = dict(zip(images.image_id, images.uri, strict=True))
    unknown = [i for i in ids if i not in uris]
    if unknown:
        raise ValueError(
            f"images {unknown[:3]} of the vote tables are not in tpips_images; re-materialize the family"
        )
    paths = {i: release_path(i, n) for n, i in enumerate(ids)}
    if len(set(paths.values())) != len(paths):
        raise ValueError("two images would be written to one path; rename them before exporting")
    for i, p in paths.items():
        storage.write_bytes_atomic(storage.join(out, p), storage.read_bytes(uris[i]))
    lines = release_lines(ooo, paths)
    storage.write_bytes_atomic(target, ("\n".join(lines) + "\n").encode())
    n_afc = write_afc_jsonl(afc, paths, storage.join(out, AFC_FILE), keep_ids=True) if len(afc) else 0
    return {"triplets": len(lines), "ooo_rows": len(ooo), "afc_lines": n_afc, "images": len(paths)}


def _write_release(tables: dict[str, pd.DataFrame], out: str, overwrite: bool) -> dict:
    return export_release(tables["tpips_ooo"], tables["tpips_afc"], tables["tpips_images"], out, overwrite)


# what `soco export-family tpips OUT --format F` writes: F -> (the tables it reads, the writer, its help line)
FORMATS = {
    "release": (
        ("tpips_ooo", "tpips_afc", "tpips_images"),
        _write_release,
        "TPIPS's released odd-one-out JSONL (plus our 2AFC layout) and the images",
    )
}
