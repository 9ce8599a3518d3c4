"""Builders of tiny source data sets and canonical tables for the data-stage tests."""

from __future__ import annotations

import io
import itertools
import json

import numpy as np
import pandas as pd
from PIL import Image

from soco_pipeline.storage import join, write_bytes_atomic


def jpeg_bytes(w: int = 64, h: int = 48, color=(200, 40, 40)) -> bytes:
    """A small valid JPEG."""
    buf = io.BytesIO()
    Image.new("RGB", (w, h), color).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def obj(bbox=(10, 8, 50, 40), status="status_good", dense="dense_no", azimuth=0.3, cls="bus") -> dict:
    """One ImageNet3D object annotation."""
    return {
        "azimuth": azimuth,
        "elevation": 0.2,
        "theta": 0.05,
        "distance": 4.0,
        "cad_index": 1,
        "bbox": list(bbox),
        "class": cls,
        "px": 32.0,
        "py": 24.0,
        "object_status": status,
        "dense": dense,
    }


def npz_bytes(objects: list[dict] | None, w: int = 64, h: int = 48) -> bytes:
    """An ImageNet3D npz; objects=None leaves the `annotations` key out."""
    buf = io.BytesIO()
    arrays = {"height": np.array(h), "width": np.array(w)}
    if objects is not None:
        arr = np.empty(len(objects), dtype=object)
        arr[:] = objects
        arrays["annotations"] = arr
    np.savez(buf, **arrays)
    return buf.getvalue()


def write_imagenet3d(root: str, items: list[dict]) -> None:
    """items: {image_id, category, objects, w, h, image: 'ok' | 'missing' | 'corrupt'}."""
    for it in items:
        cat, iid, w, h = it["category"], it["image_id"], it.get("w", 64), it.get("h", 48)
        mode = it.get("image", "ok")
        if mode == "ok":
            write_bytes_atomic(join(root, "images", cat, f"{iid}.JPEG"), jpeg_bytes(w, h))
        elif mode == "corrupt":
            write_bytes_atomic(join(root, "images", cat, f"{iid}.JPEG"), jpeg_bytes(w, h)[:200])
        write_bytes_atomic(
            join(root, "annotations", cat, f"{iid}.npz"), npz_bytes(it.get("objects", [obj()]), w, h)
        )


def animal_record(
    image_id: str,
    category: str = "dog",
    w: int = 64,
    h: int = 48,
    seed: int = 0,
    bbox=(8, 6, 40, 30),
    keypoints=None,
) -> dict:
    """An Animal3D record with 26 keypoints inside the box (first 20 visible)."""
    rng = np.random.default_rng(seed)
    if keypoints is None:
        kp = np.zeros((26, 3))
        kp[:, 0] = rng.uniform(bbox[0], bbox[0] + bbox[2], 26)
        kp[:, 1] = rng.uniform(bbox[1], bbox[1] + bbox[3], 26)
        kp[:20, 2] = 1
        keypoints = kp.tolist()
    return {
        "img_path": f"images/{category}/{image_id}.JPEG",
        "bbox": list(bbox),
        "keypoint_2d": keypoints,
        "height": h,
        "width": w,
        "pose": [0.0] * 105,
        "shape": [0.0] * 41,
        "category": category,
        "image_id": image_id,
        "azimuth": 1.0,
        "elevation": 0.1,
        "theta": 0.0,
        "distance": 5.0,
    }


def write_animal3d(root: str, records: list[dict], write_images: bool = True) -> None:
    """annotations.json plus one JPEG per record."""
    for r in records:
        if write_images:
            write_bytes_atomic(join(root, r["img_path"]), jpeg_bytes(r["width"], r["height"], (40, 160, 40)))
    write_bytes_atomic(join(root, "annotations.json"), json.dumps({"data": records}).encode())


def clicks_for(truth: pd.DataFrame, sigma: float = 0.0, n_annotators: int = 3, seed: int = 0) -> pd.DataFrame:
    """RawClickSchema rows for exact keypoints `truth` (image_id, keypoint, x, y, visible, long_side)."""
    rng = np.random.default_rng(seed)
    rows = truth.loc[truth.index.repeat(n_annotators)].reset_index(drop=True)
    rows["annotator"] = np.tile(np.arange(n_annotators), len(truth))
    noise = rng.normal(0.0, sigma, (len(rows), 2)) * rows["long_side"].to_numpy()[:, None]
    rows["x"] = rows["x"] + noise[:, 0]
    rows["y"] = rows["y"] + noise[:, 1]
    rows.loc[~rows["visible"], ["x", "y"]] = np.nan
    return rows[["image_id", "keypoint", "annotator", "x", "y", "visible"]]


def image_row(
    image_id: str, category: str, supercategory: str, uri: str, w=64, h=48, source="imagenet3d"
) -> dict:
    """One ImageSchema row."""
    return {
        "image_id": image_id,
        "category": category,
        "supercategory": supercategory,
        "source": source,
        "uri": uri,
        "width": w,
        "height": h,
        "bbox_l": 4.0,
        "bbox_t": 3.0,
        "bbox_r": 60.0,
        "bbox_b": 45.5,
        "azimuth": 0.1,
        "elevation": 0.2,
        "theta": 0.0,
        "distance": 3.0,
    }


def canonical_tables(
    root: str, taxonomy, categories=("car", "bus", "dog"), per_category: int = 3, seed: int = 0
):
    """Small, self-consistent images/keypoints/image_pairs/correspondences with real JPEGs under root."""
    rng = np.random.default_rng(seed)
    images, kps = [], []
    for cat in categories:
        for i in range(per_category):
            iid = f"{cat}_{i:04d}"
            uri = join(root, "src", cat, f"{iid}.JPEG")
            write_bytes_atomic(uri, jpeg_bytes(64, 48))
            images.append(image_row(iid, cat, taxonomy.supercategory(cat), uri))
            for k in taxonomy.category_keypoints(cat):
                vis = bool(rng.random() < 0.7)
                kps.append(
                    {
                        "image_id": iid,
                        "category": cat,
                        "keypoint": k,
                        "concept": taxonomy.concept_of(k),
                        "x": float(rng.uniform(0, 64)) if vis else np.nan,
                        "y": float(rng.uniform(0, 48)) if vis else np.nan,
                        "visible": vis,
                        "n_annotators": 3 if vis else 2,
                        "spread": float(rng.uniform(0, 0.02)) if vis else np.nan,
                    }
                )
    images, kps = pd.DataFrame(images), pd.DataFrame(kps)
    pairs = []
    by_cat = images.groupby("category")["image_id"].agg(list)
    for cat in categories:
        for s, t in itertools.permutations(by_cat[cat], 2):
            pairs.append(("intra", cat, s, t, cat, cat, cat))
    for sc, tc in itertools.permutations(categories, 2):
        if taxonomy.shared_keypoints(sc, tc):
            for t in by_cat[tc]:
                pairs.append(("cross", tc, by_cat[sc][0], t, sc, tc, taxonomy.lowest_common_ancestor(sc, tc)))
    ip = pd.DataFrame(
        pairs,
        columns=["level", "pair_group", "src_image", "trg_image", "src_category", "trg_category", "ancestor"],
    )
    ip.insert(0, "pair_id", [f"{r.level}:{r.src_image}:{r.trg_image}" for r in ip.itertuples()])
    ip["evaluated"] = rng.random(len(ip)) < 0.8
    return images, kps, ip, reference_correspondences(ip, kps, taxonomy)


def reference_correspondences(ip: pd.DataFrame, kps: pd.DataFrame, taxonomy) -> pd.DataFrame:
    """Correspondences by the CorrespondenceSchema definition (plain loops; tiny tables only)."""
    vis = kps[kps["visible"]]
    per_image = {i: dict(zip(g["keypoint"], g["concept"], strict=True)) for i, g in vis.groupby("image_id")}
    rows = []
    for p in ip.itertuples():
        src, trg = per_image.get(p.src_image, {}), per_image.get(p.trg_image, {})
        if p.level == "cross":
            shared = set(taxonomy.shared_keypoints(p.src_category, p.trg_category))
            src = {k: c for k, c in src.items() if k in shared}
            trg = {k: c for k, c in trg.items() if k in shared}
        n_cand = {}
        for c in trg.values():
            n_cand[c] = n_cand.get(c, 0) + 1
        for k, c in src.items():
            if k in trg:
                rows.append((p.pair_id, p.level, "soc", k, k, c, n_cand[c] >= 2, n_cand[c]))
            for k2, c2 in trg.items():
                if c2 == c:
                    rows.append((p.pair_id, p.level, "cc", k, k2, c, n_cand[c] >= 2, n_cand[c]))
    return pd.DataFrame(
        rows,
        columns=[
            "pair_id",
            "level",
            "kind",
            "src_keypoint",
            "trg_keypoint",
            "concept",
            "geo",
            "n_candidates",
        ],
    )


def release_renaming(taxonomy) -> dict[str, str]:
    """A new name for every category, keypoint, concept and taxonomy node (super-categories keep theirs).

    The new names are hashes, so their sort order differs from the old names': an import that
    depended on name order would not give the same numbers.
    """
    import hashlib

    def new(prefix: str, name: str) -> str:
        return f"{prefix}_{hashlib.sha1(name.encode()).hexdigest()[:10]}"

    out = {}
    for prefix, names in (
        ("cat", taxonomy.categories),
        ("kp", list(taxonomy.keypoints)),
        ("concept", list(taxonomy.concepts)),
        ("node", [n for n, d in taxonomy.nodes.items() if not d.is_category]),
    ):
        out.update({n: new(prefix, n) for n in names if n not in taxonomy.supercategories})
    return out


def _rename_json(doc, mapping: dict[str, str]):
    if isinstance(doc, dict):
        return {mapping.get(k, k): _rename_json(v, mapping) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_rename_json(v, mapping) for v in doc]
    if isinstance(doc, str):
        return mapping.get(doc, doc)
    return doc


def rename_release(src: str, dst: str, mapping: dict[str, str]) -> None:
    """Copy the release at `src` to `dst`, renaming consistently every JSON string or key that is a name of
    `mapping` (pair, keypoint and Metadata files alike) and every folder named after a category."""
    from soco_pipeline.storage import filesystem, read_bytes

    fs, base = filesystem(src)
    base = base.rstrip("/")
    for path in fs.find(base):
        rel = path[len(base) + 1 :]
        parts = rel.split("/")
        new_rel = "/".join([mapping.get(p, p) for p in parts[:-1]] + parts[-1:])
        data = read_bytes(join(src, rel))
        if rel.endswith(".json"):
            data = json.dumps(_rename_json(json.loads(data), mapping)).encode()
        write_bytes_atomic(join(dst, new_rel), data)
