"""Reader for the ImageNet3D layout: images/<cat>/<id>.JPEG + annotations/<cat>/<id>.npz (theta in rad)."""

from __future__ import annotations

import io
import threading
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd

from soco_pipeline.sources.config import CANDIDATE_COLUMNS, glob_paths
from soco_pipeline.storage import join, read_bytes

IMAGE_SUFFIXES = (".JPEG", ".jpeg", ".jpg", ".JPG", ".png", ".PNG")
POSE_FIELDS = ("azimuth", "elevation", "theta", "distance")


def _stem_and_category(path: str) -> tuple[str, str]:
    parts = path.rstrip("/").split("/")
    return parts[-1].rsplit(".", 1)[0], parts[-2]


def _as_float(value) -> float:
    try:
        return float(np.asarray(value, dtype=np.float64).reshape(-1)[0])
    except (TypeError, ValueError, IndexError):
        return float("nan")


# numpy parses npz headers with ast.literal_eval, not thread-safe in CPython 3.11 (python/cpython#106905).
_NPZ_PARSE = threading.Lock()


def _summarise_npz(path: str) -> dict:
    """One candidate dict from an annotation file; the salient object is the largest box."""
    try:
        data = read_bytes(path)
        with _NPZ_PARSE:
            npz = np.load(io.BytesIO(data), allow_pickle=True)
            files = set(npz.files)
            objects = list(np.atleast_1d(npz["annotations"])) if "annotations" in files else None
            height = _as_float(npz["height"]) if "height" in files else float("nan")
            width = _as_float(npz["width"]) if "width" in files else float("nan")
    except Exception as e:  # a truncated zip, a non-npz file, an unpicklable entry ...
        raise ValueError(f"{path}: not a readable npz file ({e}); regenerate or re-download it") from None
    if objects is None:
        raise ValueError(
            f"{path}: ImageNet3D annotation file without an `annotations` entry (found {sorted(files)}); "
            "write the list of objects under the key 'annotations'"
        )
    for i, obj in enumerate(objects):
        if not isinstance(obj, dict):
            raise ValueError(f"{path}: annotations[{i}] is {type(obj).__name__}, expected a dict per object")
    row: dict = {"n_objects": len(objects), "width": width, "height": height}
    if not objects:
        return row | {"dense": "", "object_status": ""}
    boxes = np.array([np.asarray(o.get("bbox", [np.nan] * 4), dtype=np.float64).reshape(4) for o in objects])
    areas = np.nan_to_num((boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1]), nan=-1.0)
    main = objects[int(np.argmax(areas))]
    row |= {f: _as_float(main.get(f, np.nan)) for f in POSE_FIELDS}
    row |= dict(
        zip(("bbox_l", "bbox_t", "bbox_r", "bbox_b"), boxes[int(np.argmax(areas))].tolist(), strict=True)
    )
    # Any object flagged dense makes the image crowded.
    dense = [str(o.get("dense", "")) for o in objects]
    row["dense"] = "dense_yes" if "dense_yes" in dense else dense[0]
    row["object_status"] = str(main.get("object_status", ""))
    return row


def imagenet3d_image_ids(root: str) -> set[str]:
    """Every image id of an ImageNet3D-layout root, any category: the stems under images/ and annotations/."""
    paths = glob_paths(join(root, "annotations"), "*/*.npz")
    paths += [p for p in glob_paths(join(root, "images"), "*/*") if p.endswith(IMAGE_SUFFIXES)]
    return {_stem_and_category(p)[0] for p in paths}


def read_imagenet3d(root: str, categories: Iterable[str] | None = None, workers: int = 8) -> pd.DataFrame:
    """One candidate row per image of an ImageNet3D-layout root; a malformed npz is a ValueError."""
    wanted = set(categories) if categories is not None else None
    ann_paths = glob_paths(join(root, "annotations"), "*/*.npz")
    img_paths = [p for p in glob_paths(join(root, "images"), "*/*") if p.endswith(IMAGE_SUFFIXES)]
    anns = {_stem_and_category(p): p for p in ann_paths}
    imgs = {_stem_and_category(p): p for p in img_paths}
    keys = sorted(k for k in set(anns) | set(imgs) if wanted is None or k[1] in wanted)
    with ThreadPoolExecutor(max(1, workers)) as pool:
        summaries = list(pool.map(lambda k: _summarise_npz(anns[k]) if k in anns else {}, keys))
    rows = []
    for (image_id, category), summary in zip(keys, summaries, strict=True):
        uri = imgs.get((image_id, category), join(root, "images", category, f"{image_id}.JPEG"))
        rows.append(
            {
                "image_id": image_id,
                "category": category,
                "source": "imagenet3d",
                "uri": uri,
                "annotation_uri": anns.get((image_id, category), ""),
                **summary,
            }
        )
    df = pd.DataFrame(rows, columns=list(CANDIDATE_COLUMNS))
    df["n_objects"] = df["n_objects"].fillna(0).astype(int)
    df[["dense", "object_status"]] = df[["dense", "object_status"]].fillna("")
    df["keypoints_valid"] = pd.array([pd.NA] * len(df), dtype="boolean")
    float_cols = ["width", "height", "bbox_l", "bbox_t", "bbox_r", "bbox_b", *POSE_FIELDS]
    float_cols += ["kp_x_min", "kp_x_max", "kp_y_min", "kp_y_max"]  # from the clicks (read_candidates)
    df[float_cols] = df[float_cols].astype(float)
    return df
