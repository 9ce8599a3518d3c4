"""Write the renders of value records as PNG files and return the image table the feature cache takes."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
from PIL import Image

from soco_pipeline import storage

from .config import TpipsConfig
from .render import render_record

IMAGE_CATEGORY = "tpips"


def image_uri(root: str, image_id: str) -> str:
    """Where an image's PNG lives under the data root (ids keep their '/', so folders follow the prefix)."""
    return storage.join(root, "images", f"{image_id}.png")


def write_images(values: pd.DataFrame, root: str, cfg: TpipsConfig) -> pd.DataFrame:
    """Render every record and write its PNG; rows image_id, uri, width, height, category, object_area."""
    dup = values.image_id[values.image_id.duplicated()]
    if len(dup):
        raise ValueError(f"duplicate TPIPS image ids {list(dup[:3])}: image ids must be unique")
    out = []
    for rec in values.to_dict("records"):
        img, mask = render_record(rec, cfg)
        buf = io.BytesIO()
        Image.fromarray(img).save(buf, format="PNG")
        uri = image_uri(root, rec["image_id"])
        storage.write_bytes_atomic(uri, buf.getvalue())
        out.append(
            {
                "image_id": rec["image_id"],
                "uri": uri,
                "width": int(img.shape[1]),
                "height": int(img.shape[0]),
                "category": IMAGE_CATEGORY,
                "object_area": float(mask.mean()),
            }
        )
    return pd.DataFrame(out)


def load_pixels(uris: list[str], size: int | None = None) -> np.ndarray:
    """Images (N, H, W, 3) uint8 from their uris, resized (bicubic) to `size` x `size` when given."""

    def one(uri: str) -> np.ndarray:
        img = Image.open(io.BytesIO(storage.read_bytes(uri))).convert("RGB")
        if size is not None and img.size != (size, size):
            img = img.resize((size, size), Image.Resampling.BICUBIC)
        return np.asarray(img)

    return np.stack([one(u) for u in uris])
