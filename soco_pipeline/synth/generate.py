"""generate_dataset: the embedded benchmark in the ImageNet3D / Animal3D layout (docs/contracts.md)."""

from __future__ import annotations

import math
import multiprocessing as mp
import zlib

import numpy as np
import pandas as pd

from .. import storage
from ..taxonomy import Taxonomy, load_taxonomy
from .annotators import ClickNoise, simulate_clicks
from .scene import ANIMAL_REJECTS, RIGID_REJECTS, Scene, make_scene
from .variants import build_instance
from .writer import jpeg_bytes, json_bytes, npz_bytes, object_array, png_bytes

GENERATOR_VERSION = "synth-1"
SIZES = {"demo": 24, "full": 40}
REJECT_FRACTION = 0.1
CLICK_NOISE = ClickNoise()
_OUTPUT_DIRS = ("imagenet3d", "animal3d", "clicks", "ground_truth")
CLICK_DTYPES = {
    "image_id": str,
    "keypoint": str,
    "annotator": "int64",
    "x": float,
    "y": float,
    "visible": bool,
}


def hand_modelled(tax: Taxonomy) -> list[str]:
    """The 16 categories whose family is themselves."""
    return [c for c in tax.categories if tax.family(c) == c]


def plan(categories: list[str], n_kept: int, seed: int, tax: Taxonomy) -> list[tuple[str, int, str]]:
    """(category, index, intended_reject) for every image: n_kept plus ~10% seeded rejects."""
    n_rej = math.ceil(REJECT_FRACTION * n_kept)
    out = []
    for cat in categories:
        reasons = ANIMAL_REJECTS if tax.supercategory(cat) == "animals" else RIGID_REJECTS
        crc = zlib.crc32(cat.encode())
        rng = np.random.default_rng([int(seed), crc, 0x4E7])
        rej_idx = sorted(rng.choice(n_kept + n_rej, n_rej, replace=False).tolist())
        label = {i: reasons[(crc + j) % len(reasons)] for j, i in enumerate(rej_idx)}
        out.extend((cat, i, label.get(i, "")) for i in range(n_kept + n_rej))
    return out


def _pose(cam) -> dict[str, float]:
    return {k: float(getattr(cam, k)) for k in ("azimuth", "elevation", "theta", "distance")}


def _imagenet3d_objects(scene: Scene, category: str, reject: str, rng: np.random.Generator) -> list[dict]:
    cad = 1 + zlib.crc32(repr(sorted(scene.model.shape_params.items())).encode()) % 10
    status = str(rng.choice(["bad", "barely"])) if reject == "bad_status" else "status_good"
    dense = "dense_yes" if reject == "crowded" else "dense_no"

    def obj(cam, bbox, status_):
        pose = _pose(cam)
        if reject == "invalid_pose":
            pose["azimuth"] = float("nan")
        return {
            **pose,
            "cad_index": int(cad),
            "bbox": [float(v) for v in bbox],
            "class": category,
            "px": float(cam.px),
            "py": float(cam.py),
            "object_status": status_,
            "dense": dense,
        }

    objs = [obj(scene.camera, scene.bbox, status)]
    objs += [obj(o["camera"], o["bbox"], "status_good") for o in scene.extra_objects]
    return objs


def _animal3d_record(scene: Scene, category: str, image_id: str, index: int, reject: str) -> dict:
    x1, y1, x2, y2 = scene.bbox
    kps = np.zeros((len(scene.model.kp_names), 3))
    vis = scene.kp_visible
    kps[vis, :2] = scene.kp_uv[vis]
    kps[vis, 2] = 1.0
    if reject == "invalid_keypoints":
        kps = kps[:, :] * [1, 1, 0] if index % 2 == 0 else kps[:-1]
    shape = [float(np.log(v)) for _, v in sorted(scene.model.shape_params.items()) if v > 0][:41]
    cam = scene.camera
    return {
        "img_path": f"images/{category}/{image_id}.JPEG",
        "bbox": [float(x1), float(y1), float(x2 - x1), float(y2 - y1)],
        "keypoint_2d": kps.tolist(),
        "height": scene.height,
        "width": scene.width,
        "pose": [float(cam.azimuth), float(cam.elevation), float(cam.theta)] + [0.0] * 102,
        "shape": shape + [0.0] * (41 - len(shape)),
        "category": category,
        "image_id": image_id,
        **_pose(cam),
    }


def _one_image(task: tuple[str, str, int, str, int]) -> dict:
    """Generate, write and describe one image (runs in worker processes)."""
    root, category, index, reject, seed = task
    tax = load_taxonomy()
    image_id = f"{category}_{index:04d}"
    source = "animal3d" if tax.supercategory(category) == "animals" else "imagenet3d"
    scene = make_scene(category, index, seed, reject, tax)
    rng = np.random.default_rng([int(seed), zlib.crc32(category.encode()), int(index), 1])
    rel_img = f"{source}/images/{category}/{image_id}.JPEG"
    storage.write_bytes_atomic(storage.join(root, rel_img), jpeg_bytes(scene.image))
    storage.write_bytes_atomic(
        storage.join(root, f"ground_truth/parts/{category}/{image_id}.png"), png_bytes(scene.part)
    )
    out: dict = {"clicks": None, "animal": None}
    if source == "imagenet3d":
        objs = _imagenet3d_objects(scene, category, reject, rng)
        data = {
            "annotations": object_array(objs),
            "height": np.int64(scene.height),
            "width": np.int64(scene.width),
        }
        storage.write_bytes_atomic(
            storage.join(root, f"imagenet3d/annotations/{category}/{image_id}.npz"), npz_bytes(data)
        )
        out["clicks"] = simulate_clicks(
            image_id,
            scene.model.kp_names,
            scene.kp_uv,
            scene.kp_visible,
            scene.width,
            scene.height,
            rng,
            CLICK_NOISE,
        )
    else:
        out["animal"] = _animal3d_record(scene, category, image_id, index, reject)
    x1, y1, x2, y2 = scene.bbox
    out["image"] = {
        "image_id": image_id,
        "category": category,
        "supercategory": tax.supercategory(category),
        "family": tax.family(category),
        "source": source,
        "uri": rel_img,
        "width": scene.width,
        "height": scene.height,
        "bbox_l": float(x1),
        "bbox_t": float(y1),
        "bbox_r": float(x2),
        "bbox_b": float(y2),
        **_pose(scene.camera),
        "focal": float(scene.camera.focal),
        "px": float(scene.camera.px),
        "py": float(scene.camera.py),
        "intended_reject": reject,
    }
    k = len(scene.model.kp_names)
    out["keypoints"] = pd.DataFrame(
        {
            "image_id": [image_id] * k,
            "category": [category] * k,
            "keypoint": scene.model.kp_names,
            "x": scene.kp_uv[:, 0],
            "y": scene.kp_uv[:, 1],
            "visible": scene.kp_visible,
            "part_id": scene.model.kp_part_ids.astype(np.int64),
        }
    )
    return out


def part_legend(categories: list[str], tax: Taxonomy) -> dict[str, dict[str, int]]:
    """{category: {part_instance_name: part_id}} (the same for every instance of a category)."""
    legend = {}
    for cat in categories:
        model = build_instance(cat, np.random.default_rng(0), tax)
        legend[cat] = {name: i + 1 for i, name in enumerate(model.part_names)}
        if len(model.part_names) > 255:
            raise ValueError(f"category {cat!r} has more than 255 parts; the part map is uint8")
    return legend


def generate_dataset(
    root: str,
    size: str = "demo",
    seed: int = 0,
    categories: list[str] | None = None,
    images_per_category: int | None = None,
    workers: int | None = None,
) -> dict:
    """Generate the embedded benchmark under `root` and return its manifest; the same seed, the same bytes."""
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}: use one of {sorted(SIZES)}")
    tax = load_taxonomy()
    cats = (
        list(categories)
        if categories is not None
        else (hand_modelled(tax) if size == "demo" else list(tax.categories))
    )
    for c in cats:
        tax.category(c)
    n_kept = images_per_category if images_per_category is not None else SIZES[size]
    if n_kept < 1:
        raise ValueError(f"images_per_category must be >= 1, got {n_kept}")
    root = str(root).rstrip("/")
    _clear_previous(root)
    tasks = [(root, cat, idx, rej, int(seed)) for cat, idx, rej in plan(cats, n_kept, seed, tax)]
    legend = part_legend(cats, tax)
    n_workers = workers if workers is not None else (2 if len(tasks) > 64 else 1)
    if n_workers > 1:
        pool = mp.get_context("spawn").Pool(n_workers)
        try:
            results = list(pool.imap(_one_image, tasks, chunksize=8))
        except BaseException:
            pool.terminate()
            raise
        else:
            pool.close()
        finally:
            pool.join()
    else:
        results = [_one_image(t) for t in tasks]

    images = pd.DataFrame([r["image"] for r in results])
    keypoints = pd.concat([r["keypoints"] for r in results], ignore_index=True)
    clicks = [r["clicks"] for r in results if r["clicks"] is not None]
    no_clicks = pd.DataFrame({c: pd.Series(dtype=t) for c, t in CLICK_DTYPES.items()})
    clicks_df = pd.concat(clicks, ignore_index=True) if clicks else no_clicks
    animals = [r["animal"] for r in results if r["animal"] is not None]
    storage.write_parquet_atomic(images, storage.join(root, "ground_truth/images.parquet"))
    storage.write_parquet_atomic(keypoints, storage.join(root, "ground_truth/keypoints.parquet"))
    storage.write_parquet_atomic(clicks_df, storage.join(root, "clicks/clicks.parquet"))
    storage.write_bytes_atomic(storage.join(root, "ground_truth/parts.json"), json_bytes(legend))
    # Written even without animal categories ({"data": []}) so that the layout is always complete.
    storage.write_bytes_atomic(storage.join(root, "animal3d/annotations.json"), json_bytes({"data": animals}))
    kept = images.intended_reject == ""
    manifest = {
        "size": size,
        "seed": int(seed),
        "categories": cats,
        "generator_version": GENERATOR_VERSION,
        "counts": {
            "images": int(len(images)),
            "kept": int(kept.sum()),
            "rejected": int((~kept).sum()),
            "keypoints": int(len(keypoints)),
            "clicks": int(len(clicks_df)),
            "by_category": {
                c: {
                    "kept": int((kept & (images.category == c)).sum()),
                    "rejected": int((~kept & (images.category == c)).sum()),
                }
                for c in cats
            },
            "by_reject_reason": {
                k: int(v) for k, v in images.intended_reject[~kept].value_counts().sort_index().items()
            },
        },
        "click_noise": CLICK_NOISE.to_dict(),
        "keep_rules": {"min_bbox_area_frac": 0.12, "too_small_max_bbox_area_frac": 0.02},
    }
    storage.write_bytes_atomic(storage.join(root, "manifest.json"), json_bytes(manifest))
    return manifest


def _clear_previous(root: str) -> None:
    """Remove a previous generator output under root (only when its manifest says it is ours)."""
    fs, p = storage.filesystem(root)
    man = f"{p}/manifest.json"
    if not fs.exists(man):
        return
    import json

    with fs.open(man, "rb") as f:
        try:
            prev = json.load(f)
        except ValueError:
            return
    if not str(prev.get("generator_version", "")).startswith("synth-"):
        return
    for d in _OUTPUT_DIRS:
        if fs.exists(f"{p}/{d}"):
            fs.rm(f"{p}/{d}", recursive=True)
    fs.rm(man)
