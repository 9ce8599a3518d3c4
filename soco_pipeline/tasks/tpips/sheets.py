"""Contact sheets of aspect-conditioned retrieval: one PNG per (query, aspect) under the caller's folder."""

from __future__ import annotations

import pandas as pd

from soco_pipeline import storage

from .retrieval import contact_sheet


def write_contact_sheets(
    hits: pd.DataFrame, uris: dict[str, str], title: str, folder: str
) -> dict[tuple[str, str], bytes]:
    """Write one contact sheet per (query, aspect) under `folder`; returns the PNGs by (query_id, aspect)."""
    sheets = {}
    for (query, aspect), group in hits.groupby(["query_id", "aspect"], sort=True):
        png = contact_sheet(
            [uris[q] for q in query.split("|")], [uris[i] for i in group.image_id], f"{aspect} | {title}"
        )
        name = query.replace("/", "_").replace("|", "+")
        storage.write_bytes_atomic(storage.join(folder, f"{name}_{aspect}.png"), png)
        sheets[(query, aspect)] = png
    return sheets
