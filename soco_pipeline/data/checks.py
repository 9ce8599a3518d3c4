"""Cross-table rules that a single-table schema cannot express (used by the asset checks)."""

from __future__ import annotations

import pandas as pd


def keypoints_inside_images(keypoints: pd.DataFrame, image_set: pd.DataFrame) -> list[str]:
    """Visible keypoints must lie inside their image; every keypoint's image must be in the set."""
    sizes = image_set.set_index("image_id")[["width", "height"]]
    joined = keypoints.join(sizes, on="image_id")
    problems = [
        f"keypoint of unknown image {i!r}" for i in joined.loc[joined.width.isna(), "image_id"].unique()[:5]
    ]
    vis = joined[joined.visible & joined.width.notna()]
    bad = vis[(vis.x < 0) | (vis.y < 0) | (vis.x > vis.width) | (vis.y > vis.height)]
    problems += [
        f"{r.image_id}/{r.keypoint} at ({r.x:.1f}, {r.y:.1f}) outside the image"
        for r in bad.head(10).itertuples()
    ]
    return problems


def table_problems(asset: str, df: pd.DataFrame, **related: pd.DataFrame) -> list[str]:
    """Cross-table problems of one asset's table given the related tables it refers to."""
    if asset == "keypoints" and "image_set" in related:
        return keypoints_inside_images(df, related["image_set"])
    return []
