"""Readers that turn the source data sets into candidate rows and the canonical tables."""

from __future__ import annotations

import numpy as np
import pandas as pd

from soco_pipeline.sources.animal3d import ANIMAL3D_KEYPOINTS, animal_keypoint_names, read_animal3d
from soco_pipeline.sources.clicks import EXTENT_COLUMNS, check_click_images, click_extents, read_clicks
from soco_pipeline.sources.config import CANDIDATE_COLUMNS, SourceConfig
from soco_pipeline.sources.imagenet3d import imagenet3d_image_ids, read_imagenet3d
from soco_pipeline.sources.soco_release import SocoRelease, read_soco_release
from soco_pipeline.taxonomy import Taxonomy

# Every kind of raw keypoint (origin clicks | animal3d | soco), for `keypoints.aggregate_keypoints`.
RAW_KEYPOINT_COLUMNS = (
    "image_id",
    "keypoint",
    "annotator",
    "x",
    "y",
    "visible",
    "origin",
    "concept",
    "n_annotators",
    "spread",
)

__all__ = [
    "ANIMAL3D_KEYPOINTS",
    "CANDIDATE_COLUMNS",
    "RAW_KEYPOINT_COLUMNS",
    "SocoRelease",
    "SourceConfig",
    "animal_keypoint_names",
    "read_animal3d",
    "read_candidates",
    "read_clicks",
    "read_imagenet3d",
    "read_raw_keypoints",
    "read_soco_release",
]


def read_candidates(cfg: SourceConfig, taxonomy: Taxonomy) -> pd.DataFrame:
    """Candidate image rows (CANDIDATE_COLUMNS) of every source root set in `cfg`."""
    parts = []
    if cfg.imagenet3d_root:
        rigid = read_imagenet3d(cfg.imagenet3d_root, cfg.categories, cfg.check_workers)
        if cfg.clicks_path:  # the extent of the annotators' visible clicks, as Animal3D records carry theirs
            ext = click_extents(read_clicks(cfg.clicks_path)).reindex(rigid["image_id"])
            rigid[EXTENT_COLUMNS] = ext.to_numpy(dtype=float)
        parts.append(rigid)
    if cfg.animal3d_root:
        parts.append(read_animal3d(cfg.animal3d_root, taxonomy, cfg.categories)[0])
    if cfg.soco_release_root:
        images = read_soco_release(cfg.soco_release_root, taxonomy, cfg.check_workers).images
        if cfg.categories is not None:
            images = images[images["category"].isin(cfg.categories)]
        df = images.assign(annotation_uri="", n_objects=1, dense="dense_no", object_status="status_good")
        df["keypoints_valid"] = pd.array([pd.NA] * len(df), dtype="boolean")
        df[["kp_x_min", "kp_x_max", "kp_y_min", "kp_y_max"]] = np.nan  # Animal3D only
        parts.append(df[list(CANDIDATE_COLUMNS)])
    if not parts:
        raise ValueError(
            "SourceConfig sets no source root; set imagenet3d_root/animal3d_root or soco_release_root"
        )
    parts = [p for p in parts if len(p)] or parts[:1]
    out = pd.concat(parts, ignore_index=True)
    _check_categories_found(cfg, taxonomy, set(out["category"]))
    return out


def _check_categories_found(cfg: SourceConfig, taxonomy: Taxonomy, found: set[str]) -> None:
    """ValueError naming the configured categories that the taxonomy or the sources do not have."""
    if cfg.categories is None:
        return
    import difflib

    unknown = [c for c in cfg.categories if c not in taxonomy.categories]
    absent = [c for c in cfg.categories if c in taxonomy.categories and c not in found]
    if not unknown and not absent:
        return
    lines = []
    for c in unknown:
        close = difflib.get_close_matches(c, list(taxonomy.categories), n=1)
        lines.append(
            f"{c!r} is not a taxonomy category" + (f" (did you mean {close[0]!r}?)" if close else "")
        )
    if absent:
        roots = [r for r in (cfg.imagenet3d_root, cfg.animal3d_root, cfg.soco_release_root) if r]
        lines.append(f"{absent} have no images in the sources ({', '.join(roots)})")
    raise ValueError(
        f"categories named in the source config were not found: {'; '.join(lines)}. Fix the categories "
        f"setting (SOCO_CATEGORIES or the soco resource's `categories`)"
    )


def read_raw_keypoints(cfg: SourceConfig, taxonomy: Taxonomy) -> pd.DataFrame:
    """All raw keypoint rows of the sources in `cfg` (RAW_KEYPOINT_COLUMNS), before aggregation."""
    parts = []
    if cfg.clicks_path:
        c = read_clicks(cfg.clicks_path)
        if cfg.imagenet3d_root:
            check_click_images(
                c, imagenet3d_image_ids(cfg.imagenet3d_root), cfg.clicks_path, cfg.imagenet3d_root
            )
        parts.append(c.assign(origin="clicks", concept="", n_annotators=0, spread=np.nan))
    if cfg.animal3d_root:
        kp = read_animal3d(cfg.animal3d_root, taxonomy, cfg.categories)[1]
        parts.append(kp.assign(annotator=0, origin="animal3d", concept="", n_annotators=1, spread=np.nan))
    if cfg.soco_release_root:
        kp = read_soco_release(cfg.soco_release_root, taxonomy, cfg.check_workers).keypoints
        if cfg.categories is not None:
            kp = kp[kp["category"].isin(cfg.categories)]
        parts.append(kp.assign(annotator=0, origin="soco"))
    if not parts:
        raise ValueError(
            "SourceConfig sets no keypoint source; set clicks_path, animal3d_root or soco_release_root"
        )
    out = pd.concat([p[list(RAW_KEYPOINT_COLUMNS)] for p in parts], ignore_index=True)
    return out.astype(
        {"annotator": int, "n_annotators": int, "visible": bool, "x": float, "y": float, "spread": float}
    )
