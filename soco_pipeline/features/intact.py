"""Whether the cache files a stored feature table lists are still there (before its rows are reused)."""

from __future__ import annotations

import pandas as pd

from soco_pipeline.storage import exists, join


def cached_rows_intact(table: pd.DataFrame, cache_root: str) -> bool:
    """True unless `table` lists cache files that are gone: a global-feature table (`folder`) whose folder no
    longer holds its images' features, or a feature manifest (`path`, `cls_path`) with a missing file."""
    from soco_pipeline.features.global_cache import read_global, resolve_folder
    from soco_pipeline.features.layout import FeatureError

    if "folder" in table.columns:
        try:
            for folder, rows in table.groupby("folder"):
                read_global(resolve_folder(str(folder), cache_root), rows["image_id"])
        except (FeatureError, KeyError, OSError, ValueError):
            return False
    for column in ("path", "cls_path"):
        if column in table.columns:
            files = table[column].dropna().astype(str)
            if not all(exists(join(cache_root, f)) for f in files[files != ""]):
                return False
    return True
