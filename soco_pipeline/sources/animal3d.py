"""Reader for the Animal3D layout: annotations.json {"data": [record]} + images."""

from __future__ import annotations

import json
from collections.abc import Iterable

import numpy as np
import pandas as pd

from soco_pipeline.sources.config import CANDIDATE_COLUMNS
from soco_pipeline.storage import join, read_bytes
from soco_pipeline.taxonomy import Taxonomy, load_taxonomy

ANIMAL3D_KEYPOINTS = (
    "left_eye",
    "right_eye",
    "mouth_mid",
    "left_front_paw",
    "right_front_paw",
    "left_back_paw",
    "right_back_paw",
    "tail_base",
    "left_front_thigh",
    "right_front_thigh",
    "left_back_thigh",
    "right_back_thigh",
    "left_shoulder",
    "right_shoulder",
    "left_front_knee",
    "right_front_knee",
    "left_back_knee",
    "right_back_knee",
    "neck",
    "tail_end",
    "left_ear",
    "right_ear",
    "left_mouth",
    "right_mouth",
    "nose",
    "tail_mid",
)
POSE_FIELDS = ("azimuth", "elevation", "theta", "distance")


def animal_keypoint_names(taxonomy: Taxonomy, category: str = "dog") -> list[str]:
    """Taxonomy keypoint names in Animal3D order (`animal_<animal3d name>`), checked against the taxonomy."""
    names = [k for k in taxonomy.category_keypoints(category) if k.startswith("animal_")]
    expected = [f"animal_{n}" for n in ANIMAL3D_KEYPOINTS]
    if names != expected:
        raise ValueError(
            f"the taxonomy's animal keypoints of {category!r} {names} do not match Animal3D's 26 keypoints "
            f"in order {expected}; fix the `animal` node in assets/taxonomy.yaml"
        )
    return names


def _record_fields(i: int, rec: dict, path: str) -> dict:
    if not isinstance(rec, dict) or "img_path" not in rec:
        raise ValueError(f"{path}: data[{i}] has no `img_path`; every Animal3D record needs one")
    img_path = str(rec["img_path"])
    parts = img_path.strip("/").split("/")
    category = str(rec.get("category") or (parts[-2] if len(parts) > 1 else ""))
    image_id = str(rec.get("image_id") or parts[-1].rsplit(".", 1)[0])
    try:
        x, y, w, h = (float(v) for v in np.asarray(rec.get("bbox"), dtype=np.float64).reshape(4))
    except (TypeError, ValueError):
        raise ValueError(
            f"{path}: data[{i}] (image {image_id!r}) has bbox {rec.get('bbox')!r}; expected [x, y, w, h]"
        ) from None
    try:
        kp = np.asarray(rec.get("keypoint_2d"), dtype=np.float64)
    except (TypeError, ValueError):
        kp = np.empty((0,))
    valid = (
        kp.shape == (len(ANIMAL3D_KEYPOINTS), 3)
        and bool(np.isfinite(kp).all())
        and bool((kp[:, 2] > 0).any())
    )
    vis = kp[kp[:, 2] > 0, :2] if valid else np.full((1, 2), np.nan)
    return {
        "image_id": image_id,
        "category": category,
        "source": "animal3d",
        "img_path": img_path,
        "width": float(rec.get("width", np.nan)),
        "height": float(rec.get("height", np.nan)),
        "bbox_l": x,
        "bbox_t": y,
        "bbox_r": x + w,
        "bbox_b": y + h,
        **{f: float(rec.get(f, np.nan)) for f in POSE_FIELDS},
        "n_objects": 1,
        "dense": "dense_no",
        "object_status": "status_good",
        "keypoints_valid": valid,
        "kp_x_min": float(vis[:, 0].min()),
        "kp_x_max": float(vis[:, 0].max()),
        "kp_y_min": float(vis[:, 1].min()),
        "kp_y_max": float(vis[:, 1].max()),
        "_kp": kp if valid else None,
    }


def read_animal3d(
    root: str, taxonomy: Taxonomy | None = None, categories: Iterable[str] | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Candidate image rows and raw keypoint rows of an Animal3D root (bad keypoints: not valid)."""
    taxonomy = taxonomy or load_taxonomy()
    names = np.array(animal_keypoint_names(taxonomy))
    path = join(root, "annotations.json")
    try:
        doc = json.loads(read_bytes(path))
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{path} does not exist: point SourceConfig.animal3d at an Animal3D root"
        ) from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), list):
        raise ValueError(f'{path}: expected {{"data": [record, ...]}} at the top level')
    wanted = set(categories) if categories is not None else None
    recs = [_record_fields(i, r, path) for i, r in enumerate(doc["data"])]
    recs = [r for r in recs if wanted is None or r["category"] in wanted]
    images = pd.DataFrame(recs, columns=[*CANDIDATE_COLUMNS, "img_path", "_kp"])
    images["uri"] = [join(root, p) for p in images["img_path"]]
    images["annotation_uri"] = path
    images["n_objects"] = images["n_objects"].astype(int)
    images["keypoints_valid"] = images["keypoints_valid"].astype("boolean")

    valid = images[images["_kp"].notna()]
    n_kp = len(names)
    if len(valid):
        arr = np.stack(valid["_kp"].to_numpy())  # (n_images, 26, 3)
        keypoints = pd.DataFrame(
            {
                "image_id": np.repeat(valid["image_id"].to_numpy(), n_kp),
                "category": np.repeat(valid["category"].to_numpy(), n_kp),
                "keypoint": np.tile(names, len(valid)),
                "x": arr[:, :, 0].reshape(-1),
                "y": arr[:, :, 1].reshape(-1),
                "visible": arr[:, :, 2].reshape(-1) > 0,
            }
        )
    else:
        keypoints = pd.DataFrame(
            {"image_id": [], "category": [], "keypoint": [], "x": [], "y": [], "visible": []}
        ).astype({"x": float, "y": float, "visible": bool})
    return images[list(CANDIDATE_COLUMNS)].reset_index(drop=True), keypoints
