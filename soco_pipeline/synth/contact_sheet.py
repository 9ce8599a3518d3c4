"""Contact sheet: a grid of generated images with their exact keypoints drawn.

Keypoints are coloured by concept; visible ones are filled dots, invisible (occluded) ones hollow.
CLI: python -m soco_pipeline.synth.contact_sheet <root> <out.png> [--per-category N] [--cell 240]
"""

from __future__ import annotations

import argparse
import colorsys
import io

import numpy as np
import pandas as pd
from PIL import Image, ImageDraw

from .. import storage
from ..taxonomy import load_taxonomy


def concept_colors() -> dict[str, tuple[int, int, int]]:
    """A distinct colour per taxonomy concept."""
    concepts = list(load_taxonomy().concepts)
    out = {}
    for i, c in enumerate(concepts):
        h = (i * 0.618034) % 1.0
        r, g, b = colorsys.hsv_to_rgb(h, 0.9, 1.0)
        out[c] = (int(r * 255), int(g * 255), int(b * 255))
    return out


def contact_sheet(
    root: str,
    out_path: str,
    per_category: int = 2,
    cell: int = 240,
    columns: int = 8,
    categories: list[str] | None = None,
) -> int:
    """Draw up to `per_category` images of each category into one PNG; returns the number of tiles."""
    images = storage.read_parquet(storage.join(root, "ground_truth/images.parquet"))
    kps = storage.read_parquet(storage.join(root, "ground_truth/keypoints.parquet"))
    if categories:
        images = images[images.category.isin(categories)]
    images = images.sort_values("image_id").groupby("category", sort=False).head(per_category)
    tax = load_taxonomy()
    colors = concept_colors()
    kps = kps.assign(concept=kps.keypoint.map(tax.concept_of))
    by_image = dict(tuple(kps.groupby("image_id")))
    tiles = []
    for row in images.itertuples():
        img = Image.open(io.BytesIO(storage.read_bytes(storage.join(root, row.uri)))).convert("RGB")
        s = cell / max(img.size)
        img = img.resize((max(1, round(img.width * s)), max(1, round(img.height * s))), Image.BILINEAR)
        tile = Image.new("RGB", (cell, cell + 14), (30, 30, 30))
        tile.paste(img, (0, 14))
        d = ImageDraw.Draw(tile)
        d.text((2, 1), f"{row.image_id} {row.intended_reject}", fill=(255, 255, 255))
        k = by_image.get(row.image_id, pd.DataFrame(columns=kps.columns))
        for kp in k.itertuples():
            if not (np.isfinite(kp.x) and np.isfinite(kp.y)):
                continue
            x, y = kp.x * s, kp.y * s + 14
            c = colors.get(kp.concept, (255, 255, 255))
            box = (x - 3, y - 3, x + 3, y + 3)
            if kp.visible:
                d.ellipse(box, fill=c, outline=(0, 0, 0))
            else:
                d.ellipse(box, outline=c, width=1)
        tiles.append(tile)
    if not tiles:
        raise ValueError(f"{root}: no images to draw; generate a data set there first")
    cols = min(columns, len(tiles))
    rows = (len(tiles) + cols - 1) // cols
    sheet = Image.new("RGB", (cols * cell, rows * (cell + 14)), (0, 0, 0))
    for i, t in enumerate(tiles):
        sheet.paste(t, ((i % cols) * cell, (i // cols) * (cell + 14)))
    buf = io.BytesIO()
    sheet.save(buf, format="PNG")
    storage.write_bytes_atomic(out_path, buf.getvalue())
    return len(tiles)


def main(argv: list[str] | None = None) -> None:
    """CLI entry point."""
    ap = argparse.ArgumentParser(prog="python -m soco_pipeline.synth.contact_sheet", description=__doc__)
    ap.add_argument("root")
    ap.add_argument("out")
    ap.add_argument("--per-category", type=int, default=2)
    ap.add_argument("--cell", type=int, default=240)
    ap.add_argument("--columns", type=int, default=8)
    ap.add_argument("--categories", nargs="*", default=None)
    a = ap.parse_args(argv)
    n = contact_sheet(a.root, a.out, a.per_category, a.cell, a.columns, a.categories)
    print(f"wrote {a.out} ({n} images)")


if __name__ == "__main__":
    main()
