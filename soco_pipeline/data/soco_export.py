"""Export of the canonical tables in the official SOCO release layout, so others' tools run on our data.

Pair files: `PairAnnotations/{intra,cross,trainsplits/<split>}/<pair_group>/<n>-<src>-<trg>.json`, n (their
`pair_id`, as the official loader expects) the 1-based rank of our pair id (`pair_key`) in folder and group.
`sources.soco_release.read_soco_release` reads back every column but the images' source, uri and pose."""

from __future__ import annotations

import json
import uuid
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd

from soco_pipeline.schemas import CorrespondenceSchema, ImagePairSchema, ImageSchema, KeypointSchema, validate
from soco_pipeline.sources.soco_release import concept_ids, image_file_name, pair_file_name
from soco_pipeline.storage import filesystem, join, read_bytes, write_bytes_atomic
from soco_pipeline.taxonomy import Taxonomy


def _dump(doc: object) -> bytes:
    return json.dumps(doc, sort_keys=True, allow_nan=False).encode()


def _num(v: float) -> float | int:
    f = float(v)
    return int(f) if f.is_integer() else f


def _keypoint_entries(kp: pd.DataFrame, ids: dict, cids: dict, full: bool) -> pd.Series:
    """Per image_id, the list of release keypoint dicts (visible only unless `full`)."""
    kp = kp if full else kp[kp["visible"]]
    kp = kp.assign(
        _id=[ids.get((c, k), 0) for c, k in zip(kp["category"], kp["keypoint"], strict=True)]
    ).sort_values(["image_id", "_id", "keypoint"])
    entries = [
        {
            "id": int(i),
            "name": k,
            "pos": [float(x), float(y)] if v else None,
            "concept_id": cids.get(c),
            "concept_name": c,
            **(
                {"visible": bool(v), "n_annotators": int(n), "spread": None if np.isnan(s) else float(s)}
                if full
                else {}
            ),
        }
        for i, k, x, y, v, c, n, s in kp[
            ["_id", "keypoint", "x", "y", "visible", "concept", "n_annotators", "spread"]
        ].itertuples(index=False, name=None)
    ]
    return (
        pd.Series(entries, index=kp.index, dtype=object)
        .groupby(kp["image_id"].to_numpy(), sort=False)
        .agg(list)
    )


def release_metadata(taxonomy: Taxonomy, categories: list[str], supercategory: dict[str, str]) -> dict:
    """Metadata/keypoint_taxonomy.json of a release of `categories` (`sources.release_taxonomy` reads it)."""
    from soco_pipeline.data.descriptions import load_templates, template_for

    cids = concept_ids(taxonomy)
    known = [c for c in categories if c in taxonomy.nodes]
    templates = load_templates()
    meta_cats = {
        c: {
            "supercategory": supercategory[c],
            "parent": taxonomy.nodes[c].parent if c in taxonomy.nodes else None,
            "keypoints": taxonomy.category_keypoints(c) if c in taxonomy.nodes else [],
        }
        for c in categories
    }
    ancestors = {a for c in known for a in taxonomy.ancestors(c)[1:]}
    nodes = {
        n: {"parent": taxonomy.nodes[n].parent, "supercategory": taxonomy.nodes[n].supercategory}
        for n in taxonomy.nodes
        if n in ancestors
    }
    used = {k for c in known for k in taxonomy.category_keypoints(c)}
    meta_kps = {
        k: {
            "concept_name": d.concept,
            "concept_id": cids[d.concept],
            "node": d.node,
            "part": d.part,
            "where": d.where,
            "at": d.at,
            "template": d.template or template_for(k, taxonomy, templates),
        }
        for k, d in taxonomy.keypoints.items()
        if k in used
    }
    return {
        "supercategories": list(taxonomy.supercategories),
        "categories": meta_cats,
        "nodes": nodes,
        "keypoints": meta_kps,
        "concepts": {c: {"id": cids[c], **dict(v or {})} for c, v in taxonomy.concepts.items()},
        "templates": templates,
    }


def export_soco_release(
    images: pd.DataFrame,
    keypoints: pd.DataFrame,
    image_pairs: pd.DataFrame,
    correspondences: pd.DataFrame,
    out_root: str,
    taxonomy: Taxonomy,
    overwrite: bool = False,
    workers: int = 8,
) -> dict:
    """Write the SOCO release layout to `out_root` atomically; counts of what was written. FileExistsError
    when `out_root` exists (unless overwrite), ValueError for pairs the tables cannot back."""
    images = validate(images, ImageSchema, "images")
    keypoints = validate(keypoints, KeypointSchema, "keypoints")
    image_pairs = validate(image_pairs, ImagePairSchema, "image_pairs")
    correspondences = validate(correspondences, CorrespondenceSchema, "correspondences")
    fs, out_path = filesystem(out_root)
    if fs.exists(out_path) and not overwrite:
        raise FileExistsError(f"{out_root} exists; pass overwrite=True or choose another folder")

    # The evaluated pairs go to PairAnnotations/{intra,cross}/, the pairs of a train/test split (if the
    # table has a `split` column) to PairAnnotations/trainsplits/{train,test}/ as well.
    split = image_pairs["split"] if "split" in image_pairs.columns else pd.Series("", index=image_pairs.index)
    evaluated = image_pairs[image_pairs["evaluated"]].assign(folder=lambda d: d["level"])
    in_split = image_pairs[split.isin(["train", "test"])]
    in_split = in_split.assign(folder="trainsplits/" + split[in_split.index])
    pairs = pd.concat([evaluated, in_split]).sort_values(["folder", "pair_group", "pair_id"])
    known = set(images["image_id"])
    missing = sorted((set(pairs["src_image"]) | set(pairs["trg_image"])) - known)
    if missing:
        raise ValueError(f"evaluated or split pairs refer to images not in the images table: {missing[:5]}")
    pairs["n"] = pairs.groupby(["folder", "pair_group"]).cumcount() + 1

    cids = concept_ids(taxonomy)
    cats = sorted(images["category"].unique())
    ids = {
        (c, k): i + 1
        for c in cats
        if c in taxonomy.nodes
        for i, k in enumerate(taxonomy.category_keypoints(c))
    }
    full_entries = _keypoint_entries(keypoints, ids, cids, full=True)
    vis_entries = _keypoint_entries(keypoints, ids, cids, full=False)
    img = images.set_index("image_id")

    tmp_root = f"{out_root.rstrip('/')}.tmp-{uuid.uuid4().hex[:8]}"
    files: list[tuple[str, bytes | str]] = []  # (path, bytes or source uri to copy)

    mapping: dict[str, dict] = {}  # Metadata/filename_mapping.json: category -> file name -> origin
    for image_id, r in img.iterrows():
        name = image_file_name(image_id)
        files.append((join(tmp_root, "Images", r["category"], name), r["uri"]))
        mapping.setdefault(r["category"], {})[name] = {
            "image_id": image_id,
            "source": r["source"],
            "uri": r["uri"],
        }
        doc = {
            "image": name,
            "image_id": image_id,
            "category": r["category"],
            "imsize": [int(r["width"]), int(r["height"])],
            "bndbox": [_num(r[c]) for c in ("bbox_l", "bbox_t", "bbox_r", "bbox_b")],
            "keypoints": full_entries.get(image_id, []),
        }
        files.append((join(tmp_root, "KeypointAnnotations", r["category"], f"{image_id}.json"), _dump(doc)))

    corr = correspondences[correspondences["pair_id"].isin(pairs["pair_id"])]
    soc_rows = corr[corr["kind"] == "soc"].sort_values(["pair_id", "src_keypoint"])
    soc = soc_rows.groupby("pair_id")["src_keypoint"].agg(list)
    cc = corr[corr["kind"] == "cc"]
    by = ["pair_id", "concept"]
    cc_src = cc.drop_duplicates([*by, "src_keypoint"]).sort_values("src_keypoint")
    cc_trg = cc.drop_duplicates([*by, "trg_keypoint"]).sort_values("trg_keypoint")
    src_lists = cc_src.groupby(by)["src_keypoint"].agg(list).rename("src")
    trg_lists = cc_trg.groupby(by)["trg_keypoint"].agg(list).rename("trg")
    groups = src_lists.to_frame().join(trg_lists).reset_index()
    group_docs = groups.groupby("pair_id").apply(
        lambda g: [
            {"concept_name": c, "src_keypoints": s, "trg_keypoints": t}
            for c, s, t in zip(g["concept"], g["src"], g["trg"], strict=True)
        ],
        include_groups=False,
    )

    for p in pairs.itertuples(index=False):
        src, trg = img.loc[p.src_image], img.loc[p.trg_image]
        doc = {
            "pair_id": int(p.n),
            "pair_key": p.pair_id,
            "level": p.level,
            "category": p.pair_group,
            "pair_group": p.pair_group,
            "ancestor": p.ancestor,
            "src_category": p.src_category,
            "trg_category": p.trg_category,
            "src_image": image_file_name(p.src_image),
            "trg_image": image_file_name(p.trg_image),
            "src_imsize": [int(src["width"]), int(src["height"])],
            "trg_imsize": [int(trg["width"]), int(trg["height"])],
            "src_bndbox": [_num(src[c]) for c in ("bbox_l", "bbox_t", "bbox_r", "bbox_b")],
            "trg_bndbox": [_num(trg[c]) for c in ("bbox_l", "bbox_t", "bbox_r", "bbox_b")],
            "src_keypoints": vis_entries.get(p.src_image, []),
            "trg_keypoints": vis_entries.get(p.trg_image, []),
            "semantic_overlap": soc.get(p.pair_id, []),
            "concept_matches": group_docs.get(p.pair_id, []),
        }
        name = pair_file_name(int(p.n), p.src_image, p.trg_image)
        files.append(
            (join(tmp_root, "PairAnnotations", *p.folder.split("/"), p.pair_group, name), _dump(doc))
        )

    meta = release_metadata(
        taxonomy, cats, {c: str(img.loc[img["category"] == c, "supercategory"].iloc[0]) for c in cats}
    )
    files.append((join(tmp_root, "Metadata", "keypoint_taxonomy.json"), _dump(meta)))
    files.append((join(tmp_root, "Metadata", "filename_mapping.json"), _dump(mapping)))

    def write(item: tuple[str, bytes | str]) -> None:
        path, data = item
        if isinstance(data, str):
            try:
                data = read_bytes(data)
            except FileNotFoundError:
                raise ValueError(f"image file {data} does not exist; cannot export it") from None
        write_bytes_atomic(path, data)

    tmp_path = filesystem(tmp_root)[1]
    try:
        with ThreadPoolExecutor(max(1, workers)) as pool:
            list(pool.map(write, files))
        if fs.exists(out_path):
            fs.rm(out_path, recursive=True)
        fs.mv(tmp_path, out_path, recursive=True)
    finally:
        if fs.exists(tmp_path):
            fs.rm(tmp_path, recursive=True)
    return {
        "images": int(len(img)),
        "pairs": int(pairs["pair_id"].nunique()),
        "correspondences": int(len(corr)),
        "files": len(files),
    }
