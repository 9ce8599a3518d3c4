"""The filtered image set: which candidate images enter the benchmark, and why the others do not.

A candidate is kept iff it passes every check; else `rejected_images` holds the first failing reason, in this
order: "unknown_category", "missing_image", "corrupt_image", "invalid_pose" (ImageNet3D: a non-finite angle or
distance) / "invalid_keypoints" (Animal3D: not 26x3 with some visible), "keypoint_outside_image" (a visible
keypoint or click outside [0, width] x [0, height] by even a pixel: no clamping), "crowded" (not one object,
dense_no), "bad_status" (not status_good), "too_small" (box under `min_bbox_fraction` of the image)."""

from __future__ import annotations

import io
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd
from PIL import Image

from soco_pipeline.schemas import ImageSchema, RejectedImageSchema, validate
from soco_pipeline.sources.config import CANDIDATE_COLUMNS, SourceConfig
from soco_pipeline.storage import read_bytes
from soco_pipeline.taxonomy import Taxonomy


def check_image(uri: str) -> tuple[str, int, int]:
    """('' | 'missing_image' | 'corrupt_image', width, height) for one image file: PIL's verify() and then a
    reduced-scale decode, since verify() alone misses truncated data."""
    try:
        data = read_bytes(uri)
    except (FileNotFoundError, IsADirectoryError):
        return "missing_image", 0, 0
    try:
        with Image.open(io.BytesIO(data)) as im:
            im.verify()
        with Image.open(io.BytesIO(data)) as im:
            w, h = im.size
            im.draft("RGB", (max(1, w // 8), max(1, h // 8)))
            im.load()
    except Exception:  # PIL raises many types for broken files
        return "corrupt_image", 0, 0
    return "", w, h


def build_image_set(
    candidates: pd.DataFrame, cfg: SourceConfig, taxonomy: Taxonomy
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(image_set, rejected_images) of the candidates in `cfg.categories`; duplicate ids raise."""
    missing_cols = [c for c in CANDIDATE_COLUMNS if c not in candidates.columns]
    if missing_cols:
        raise ValueError(f"candidate table lacks columns {missing_cols}; build it with soco_pipeline.sources")
    df = candidates.reset_index(drop=True).copy()
    if cfg.categories is not None:
        df = df[df["category"].isin(cfg.categories)].reset_index(drop=True)
    dup = df["image_id"].duplicated(keep=False)
    if dup.any():
        ids = sorted(df.loc[dup, "image_id"].unique())[:10]
        raise ValueError(
            f"duplicate image ids among the candidates: {ids}; image ids must be unique across sources"
        )

    reason = pd.Series("", index=df.index, dtype=object)

    def mark(mask: pd.Series | np.ndarray, code: str) -> None:
        reason[(reason == "") & np.asarray(mask, dtype=bool)] = code

    mark(~df["category"].isin(taxonomy.categories), "unknown_category")
    todo = df.index[reason == ""]
    with ThreadPoolExecutor(max(1, cfg.check_workers)) as pool:
        checks = list(pool.map(check_image, df.loc[todo, "uri"]))
    status = pd.DataFrame(checks, index=todo, columns=["status", "w", "h"])
    mark(status["status"].reindex(df.index, fill_value="") == "missing_image", "missing_image")
    mark(status["status"].reindex(df.index, fill_value="") == "corrupt_image", "corrupt_image")
    for col, alt in (("width", "w"), ("height", "h")):
        vals = pd.to_numeric(df[col], errors="coerce")
        df[col] = vals.fillna(status[alt].reindex(df.index).astype(float))

    pose = df[["azimuth", "elevation", "theta", "distance"]].apply(pd.to_numeric, errors="coerce")
    is_animal = (df["source"] == "animal3d").to_numpy()
    is_rigid = (df["source"] == "imagenet3d").to_numpy()
    mark(is_rigid & ~np.isfinite(pose.to_numpy(dtype=float)).all(axis=1), "invalid_pose")
    mark(is_animal & ~df["keypoints_valid"].fillna(False).astype(bool).to_numpy(), "invalid_keypoints")
    ext = df[["kp_x_min", "kp_x_max", "kp_y_min", "kp_y_max"]].apply(pd.to_numeric, errors="coerce")
    w, h = df["width"].astype(float), df["height"].astype(float)
    outside = (ext.kp_x_min < 0) | (ext.kp_y_min < 0) | (ext.kp_x_max > w) | (ext.kp_y_max > h)
    # Animal3D keypoints and ImageNet3D clicks alike (NaN extents, no keypoints yet, compare False).
    mark(outside.to_numpy(), "keypoint_outside_image")
    mark((df["n_objects"] != 1) | (df["dense"] != "dense_no"), "crowded")
    mark(df["object_status"] != "status_good", "bad_status")

    box = df[["bbox_l", "bbox_t", "bbox_r", "bbox_b"]].apply(pd.to_numeric, errors="coerce")
    # Clip boxes into the image (real annotations overshoot by a pixel at times).
    box[["bbox_l", "bbox_t"]] = box[["bbox_l", "bbox_t"]].clip(lower=0)
    box["bbox_r"], box["bbox_b"] = np.minimum(box["bbox_r"], w), np.minimum(box["bbox_b"], h)
    area = (box["bbox_r"] - box["bbox_l"]).clip(lower=0) * (box["bbox_b"] - box["bbox_t"]).clip(lower=0)
    frac = (area / (w * h)).fillna(0.0)
    mark(frac < cfg.min_bbox_fraction, "too_small")
    df[box.columns] = box

    kept = df[reason == ""].copy()
    kept["supercategory"] = kept["category"].map(taxonomy.supercategory)
    kept[["width", "height"]] = kept[["width", "height"]].round().astype(int)
    image_set = validate(kept, ImageSchema, "image_set").reset_index(drop=True)
    rejected = df.loc[reason != "", ["image_id", "category", "source", "uri"]].assign(
        reason=reason[reason != ""]
    )
    rejected = validate(rejected, RejectedImageSchema, "rejected_images").reset_index(drop=True)
    return image_set, rejected
