"""The embedded fine-grained set (SIMULATED): rendered taxonomy categories in FG-BMK's machine-oriented
layout (docs/fgbmk.md, "The embedded set"); the same (config, seed) gives byte-identical files."""

from __future__ import annotations

import copy
import hashlib
import json
import multiprocessing as mp
import zlib

import numpy as np
import pandas as pd

from soco_pipeline import storage
from soco_pipeline.synth.backgrounds import background
from soco_pipeline.synth.render import keypoint_visibility, render
from soco_pipeline.synth.scene import frame_camera, sample_pose
from soco_pipeline.synth.variants import HAND_SHAPE_JITTER, build_instance, category_params, sample_colors
from soco_pipeline.synth.writer import jpeg_bytes
from soco_pipeline.tasks.fgbmk.config import LEVELS, EmbeddedConfig
from soco_pipeline.taxonomy import Taxonomy, load_taxonomy

EMBEDDED_VERSION = "fgbmk-embedded-2"
ITEM_COLUMNS = [
    "image_id",
    "uri",
    "path",
    "split",
    "width",
    "height",
    "category",
    "superclass",
    "class",
    "subclass",
    "superclass_id",
    "class_id",
    "subclass_id",
    "colour",
    "texture",
    "body_shape",
    "n_parts",
    "n_keypoints",
    "simulated",
]
# Named body colours (RGB in [0, 1]); an instance gets the nearest.
COLOUR_NAMES: dict[str, tuple[float, float, float]] = {
    "red": (0.8, 0.1, 0.1),
    "orange": (0.9, 0.5, 0.1),
    "yellow": (0.92, 0.8, 0.12),
    "green": (0.2, 0.55, 0.25),
    "blue": (0.12, 0.25, 0.65),
    "purple": (0.5, 0.15, 0.5),
    "pink": (0.95, 0.65, 0.7),
    "brown": (0.5, 0.32, 0.17),
    "black": (0.08, 0.08, 0.09),
    "white": (0.93, 0.93, 0.92),
    "grey": (0.5, 0.5, 0.52),
}
TEXTURES = ("plain", "mottled", "striped", "spotted")
SHAPES = ("elongated", "tall", "compact")
_TEXTURE_OF = {"noise": "mottled", "stripes": "striped", "spots": "spotted"}
_NO_JITTER = ("trunk", "horns", "tusks", "ear_up", "lid", "bulge")


def hierarchy(taxonomy: Taxonomy | None = None, subclasses: list[str] | None = None) -> pd.DataFrame:
    """superclass, class, subclass and their ids (0..n-1 per level), each parent's children contiguous."""
    tax = taxonomy or load_taxonomy()
    if subclasses is not None:
        unknown = sorted(set(subclasses) - set(tax.categories))
        if unknown:
            raise ValueError(f"fgbmk embedded set: unknown subclasses {unknown[:5]}; use taxonomy categories")
    keep = tax.categories if subclasses is None else [c for c in tax.categories if c in set(subclasses)]
    rows = [(tax.supercategory(c), tax.family(c), c) for c in keep]
    df = pd.DataFrame(sorted(rows), columns=["superclass", "class", "subclass"])
    for level in LEVELS:
        names = list(dict.fromkeys(df[level]))
        df[f"{level}_id"] = df[level].map({n: i for i, n in enumerate(names)}).astype("int64")
    return df


def display_name(name: str) -> str:
    """A class name as FG-BMK writes it in classes.txt and questions: lower case, spaces ("polar bear")."""
    return name.replace("_", " ").lower()


def colour_name(rgb: np.ndarray) -> str:
    """The nearest named colour of an RGB triple in [0, 1]."""
    names = list(COLOUR_NAMES)
    ref = np.array([COLOUR_NAMES[n] for n in names])
    return names[int(np.argmin(((ref - np.asarray(rgb)[None]) ** 2).sum(1)))]


def shape_name(extent: np.ndarray) -> str:
    """elongated (length >= 1.6 x the other sides), tall (height >= 1.3 x length and width), else compact."""
    length, width, height = (float(v) for v in extent)
    if length >= 1.6 * max(width, height):
        return "elongated"
    if height >= 1.3 * max(length, width):
        return "tall"
    return "compact"


def _instance_colours(category: str, rng: np.random.Generator, tax: Taxonomy) -> dict:
    """The colours build_instance draws from `rng` (a copy of its state), for the attributes."""
    family, params, traits = category_params(category, tax)
    rng.normal(0, HAND_SHAPE_JITTER, size=sum(k not in _NO_JITTER for k in params))  # the shape jitter draws
    return sample_colors(category, family, traits, tax.supercategory(category), rng)


def render_item(
    category: str, index: int, seed: int, size: int, area: tuple[float, float], tax: Taxonomy | None = None
) -> tuple[np.ndarray, dict, pd.DataFrame]:
    """One image (size x size RGB) of a category, its attributes and projected keypoints; deterministic."""
    tax = tax or load_taxonomy()
    rng = np.random.default_rng([int(seed), 0xF6B, zlib.crc32(category.encode()), int(index)])
    col = _instance_colours(category, copy.deepcopy(rng), tax)
    model = build_instance(category, rng, tax)
    az, el, th = sample_pose(tax.supercategory(category), rng)
    frac = float(rng.uniform(*area))
    focal = size * float(rng.uniform(1.2, 1.6))
    for _ in range(4):
        cam = frame_camera(model, az, el, th, size, size, frac, rng, focal)
        r = render(model, cam)
        if r.bbox() is not None:
            break
        frac *= 1.5
    else:
        raise RuntimeError(f"fgbmk image {category}_{index}: the object is not in view; check the framing")
    img = background(size, size, rng).copy()
    img[r.mask] = (r.color[r.mask] * 255 + 0.5).astype(np.uint8)
    uv, vis = keypoint_visibility(model, cam, r.depth)
    pts = model.outline()
    tex = col.get("texture")
    attrs = {
        "colour": colour_name(col["main"]),
        "texture": _TEXTURE_OF.get(tex[0], "plain") if tex else "plain",
        "body_shape": shape_name(pts.max(0) - pts.min(0)),
        "n_parts": len(model.part_names),
        "n_keypoints": len(model.kp_names),
    }
    kps = pd.DataFrame(
        {"keypoint": model.kp_names, "x": uv[:, 0], "y": uv[:, 1], "visible": vis.astype(bool)}
    )
    return img, attrs, kps


def _one(task: tuple) -> tuple[bytes, dict, pd.DataFrame]:
    category, index, seed, size, area = task
    img, attrs, kps = render_item(category, index, seed, size, area)
    return jpeg_bytes(img), attrs, kps


def request_of(config: EmbeddedConfig, seed: int, subclasses: list[str] | None) -> dict:
    """What identifies a generated set (its manifest must match it to be reused)."""
    return {
        "version": EMBEDDED_VERSION,
        "seed": int(seed),
        "image_size": config.image_size,
        "object_area": list(config.object_area),
        "train": config.images_per_subclass.train,
        "test": config.images_per_subclass.test,
        "subclasses": subclasses,
        "per_class": config.subclasses_per_class,
    }


def ensure_embedded(
    root: str,
    config: EmbeddedConfig,
    seed: int = 0,
    subclasses: list[str] | None = None,
    workers: int | None = None,
) -> pd.DataFrame:
    """The items table of the embedded set at `root`, generated if absent or made for another request."""
    root = str(root).rstrip("/")
    req = request_of(config, seed, subclasses)
    man = storage.join(root, "manifest.json")
    if storage.exists(man) and storage.exists(storage.join(root, "items.parquet")):
        try:
            if json.loads(storage.read_bytes(man)).get("request") == req:
                items = storage.read_parquet(storage.join(root, "items.parquet"))
                # this root's images, also from a file written before paths were stored relative
                return items.assign(uri=[storage.join(root, p) for p in items.path])
        except ValueError:
            pass
    return generate_embedded(root, config, seed, subclasses, workers)


def generate_embedded(
    root: str,
    config: EmbeddedConfig,
    seed: int = 0,
    subclasses: list[str] | None = None,
    workers: int | None = None,
) -> pd.DataFrame:
    """Render the set under `root` and write its FG-BMK layout; return the items table."""
    tax = load_taxonomy()
    h = hierarchy(tax, subclasses)
    if config.subclasses_per_class and subclasses is None:  # an explicit list is kept whole
        keep = h.groupby("class", sort=False).head(config.subclasses_per_class).subclass
        h = hierarchy(tax, list(keep))
    n_train, n_test = config.images_per_subclass.train, config.images_per_subclass.test
    plan = [(r, i) for r in h.itertuples(index=False) for i in range(n_train + n_test)]
    tasks = [(r.subclass, i, seed, config.image_size, tuple(config.object_area)) for r, i in plan]
    n_workers = workers if workers is not None else config.workers
    if n_workers > 1 and len(tasks) > 32:
        with mp.get_context("spawn").Pool(n_workers) as pool:
            results = pool.map(_one, tasks, chunksize=8)
    else:
        results = [_one(t) for t in tasks]
    rows, keypoints = [], []
    for (r, i), (data, attrs, kps) in zip(plan, results, strict=True):
        rel = f"images/{r.superclass}/{r._1}/{r.subclass}/{r.subclass}_{i:03d}.jpg"
        storage.write_bytes_atomic(storage.join(root, rel), data)
        rows.append(
            {
                "image_id": f"fgbmk/{r.subclass}_{i:03d}",
                "uri": storage.join(root, rel),
                "path": rel,
                "split": "train" if i < n_train else "test",
                "width": config.image_size,
                "height": config.image_size,
                "category": r.subclass,
                "superclass": r.superclass,
                "class": r._1,
                "subclass": r.subclass,
                "superclass_id": r.superclass_id,
                "class_id": r.class_id,
                "subclass_id": r.subclass_id,
                **attrs,
                "simulated": True,
            }
        )
        keypoints.append(kps.assign(image_id=rows[-1]["image_id"]))
    items = pd.DataFrame(rows, columns=ITEM_COLUMNS)
    write_layout(root, items)
    # The SOCO oracles' ground truth (backbones/oracle.py reads it under the data root).
    storage.write_parquet_atomic(
        pd.concat(keypoints, ignore_index=True)[["image_id", "keypoint", "x", "y", "visible"]],
        storage.join(root, "ground_truth/keypoints.parquet"),
    )
    # uri relative to the root: a copied storage root reuses the set with its own images
    storage.write_parquet_atomic(items, storage.join(root, "items.parquet"), storage_root=root)
    manifest = {
        "request": request_of(config, seed, subclasses),
        "simulated": True,
        "images": len(items),
        "digest": hashlib.sha256(pd.util.hash_pandas_object(items[["image_id", "path"]]).values).hexdigest(),
    }
    storage.write_bytes_atomic(storage.join(root, "manifest.json"), json.dumps(manifest, indent=1).encode())
    return items


def write_layout(root: str, items: pd.DataFrame) -> None:
    """train.csv / test.csv / classes.txt at the subclass level (the root) and per level under levels/."""
    for level in LEVELS:
        lines = [
            display_name(n) for n in items.drop_duplicates(f"{level}_id").sort_values(f"{level}_id")[level]
        ]
        folders = [storage.join(root, "levels", level)] + ([root] if level == "subclass" else [])
        for folder in folders:
            storage.write_bytes_atomic(
                storage.join(folder, "classes.txt"), ("\n".join(lines) + "\n").encode()
            )
            for split in ("train", "test"):
                part = items[items.split == split]
                text = "".join(
                    f"{p},{int(lab)}\n" for p, lab in zip(part.path, part[f"{level}_id"], strict=True)
                )
                storage.write_bytes_atomic(storage.join(folder, f"{split}.csv"), text.encode())
