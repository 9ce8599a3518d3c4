"""Import of the official SOCO release layout into the canonical tables (docs/official-data.md)."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pandas as pd

from soco_pipeline.schemas import (
    CorrespondenceSchema,
    ImagePairSchema,
    ImageSchema,
    KeypointSchema,
    validate,
)
from soco_pipeline.sources.config import glob_paths
from soco_pipeline.sources.release_taxonomy import (
    ENTRY_COLUMNS,
    build_release_taxonomy,
    check_keypoint_concepts,
)
from soco_pipeline.storage import exists, join, read_bytes
from soco_pipeline.taxonomy import Taxonomy

PAIR_FIELDS = (
    "pair_id",
    "src_image",
    "trg_image",
    "src_imsize",
    "trg_imsize",
    "src_bndbox",
    "trg_bndbox",
    "src_keypoints",
    "trg_keypoints",
    "semantic_overlap",
    "concept_matches",
)
KEYPOINT_FIELDS = ("name", "pos", "concept_name")
SPLITS = ("train", "test")  # PairAnnotations/trainsplits/<split>/<category>/*.json
GROUP_FIELDS = ("concept_name", "src_keypoints", "trg_keypoints")


@dataclass(frozen=True)
class SocoRelease:
    """The canonical tables read from a SOCO release."""

    images: pd.DataFrame
    keypoints: pd.DataFrame
    image_pairs: pd.DataFrame
    correspondences: pd.DataFrame
    taxonomy: Taxonomy


def image_file_name(image_id: str) -> str:
    """The release file name of an image."""
    return f"{image_id}.JPEG"


def pair_file_name(n: int, src_image: str, trg_image: str) -> str:
    """The release file name of the n-th pair (1-based) of a group."""
    return f"{n:05d}-{src_image}-{trg_image}.json"


def concept_ids(taxonomy: Taxonomy) -> dict[str, int]:
    """Integer concept ids (1-based, taxonomy file order) used in the release's `concept_id`."""
    return {c: i + 1 for i, c in enumerate(taxonomy.concepts)}


def _stem(file_name: str) -> str:
    return str(file_name).rsplit("/", 1)[-1].rsplit(".", 1)[0]


def _load_json(path: str) -> object:
    try:
        return json.loads(read_bytes(path))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not valid JSON ({e}); re-download or re-export the release") from None


def _require(doc: dict, fields, path: str, where: str = "") -> None:
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: {where or 'top level'} is {type(doc).__name__}, expected a JSON object")
    for f in fields:
        if f not in doc:
            raise ValueError(
                f"{path}: {where + ' ' if where else ''}missing field {f!r}; a SOCO pair file needs {list(fields)}"
            )


def _parse_pair(path: str, doc: object, level: str | None, group_dir: str, split: str = "") -> dict:
    _require(doc, PAIR_FIELDS, path)
    src_cat = doc.get("src_category") or doc.get("category")
    trg_cat = doc.get("trg_category") or doc.get("category")
    if not src_cat or not trg_cat:
        raise ValueError(f"{path}: missing field 'src_category'/'trg_category' (or 'category')")
    if level is None:  # a train/test split file: its level from its categories
        level = str(doc.get("level") or ("intra" if src_cat == trg_cat else "cross"))
    for side in ("src", "trg"):
        for i, kp in enumerate(doc[f"{side}_keypoints"]):
            _require(kp, KEYPOINT_FIELDS, path, f"{side}_keypoints[{i}]")
    for i, grp in enumerate(doc["concept_matches"]):
        _require(grp, GROUP_FIELDS, path, f"concept_matches[{i}]")
    src_names = {kp["name"] for kp in doc["src_keypoints"]}
    trg_names = {kp["name"] for kp in doc["trg_keypoints"]}
    for name in doc["semantic_overlap"]:
        if name not in src_names or name not in trg_names:
            raise ValueError(
                f"{path}: semantic_overlap name {name!r} is not in both src_keypoints and trg_keypoints"
            )
    for grp in doc["concept_matches"]:
        bad = [n for n in grp["src_keypoints"] if n not in src_names] + [
            n for n in grp["trg_keypoints"] if n not in trg_names
        ]
        if bad:
            raise ValueError(f"{path}: concept_matches {grp['concept_name']!r} names unknown keypoints {bad}")
    src, trg = _stem(doc["src_image"]), _stem(doc["trg_image"])
    return {
        "path": path,
        "pair_id": str(doc.get("pair_key") or f"{level}:{src}:{trg}"),
        "level": level,
        "pair_group": str(doc.get("pair_group") or group_dir),
        "src_image": src,
        "trg_image": trg,
        "src_category": str(src_cat),
        "trg_category": str(trg_cat),
        "src_file": str(doc["src_image"]),
        "trg_file": str(doc["trg_image"]),
        "ancestor": doc.get("ancestor"),
        "split": split,
        "evaluated": not split,
        "doc": doc,
    }


def _image_row(
    image_id: str, category: str, file: str, doc: dict, prefix: str, root: str, where: str
) -> dict:
    """An image's row from the `<prefix>imsize` and `<prefix>bndbox` of a keypoint or pair file."""
    imsize, bndbox = doc[f"{prefix}imsize"], doc[f"{prefix}bndbox"]
    try:
        w, h = (int(v) for v in imsize)
        bl, bt, br, bb = (float(v) for v in bndbox)
    except (TypeError, ValueError):
        raise ValueError(
            f"{where}: image {image_id!r} has imsize {imsize!r} / bndbox {bndbox!r}; "
            "expected [W, H] and [l, t, r, b]"
        ) from None
    return {
        "image_id": image_id,
        "category": category,
        "source": "soco",
        "uri": join(root, "Images", category, file),
        "width": w,
        "height": h,
        "bbox_l": bl,
        "bbox_t": bt,
        "bbox_r": br,
        "bbox_b": bb,
    }


def _keypoint_rows(image_id: str, category: str, items: list, path: str, default_visible: bool) -> list[dict]:
    rows = []
    for i, kp in enumerate(items):
        _require(kp, ("name",), path, f"keypoints[{i}]")
        visible = bool(kp.get("visible", default_visible))
        pos = kp.get("pos")
        if visible and (pos is None or len(pos) != 2):
            raise ValueError(
                f"{path}: keypoint {kp['name']!r} of {image_id!r} is visible but has pos {pos!r}"
            )
        if "concept_name" not in kp:
            raise ValueError(f"{path}: keypoint {kp['name']!r} of {image_id!r}: missing field 'concept_name'")
        x, y = (float(pos[0]), float(pos[1])) if pos is not None else (np.nan, np.nan)
        spread = kp.get("spread")
        rows.append(
            {
                "image_id": image_id,
                "category": category,
                "keypoint": str(kp["name"]),
                "concept": str(kp["concept_name"]),
                "x": x,
                "y": y,
                "visible": visible,
                "n_annotators": int(kp.get("n_annotators", 0) or 0),
                "spread": float(spread) if spread is not None else np.nan,
            }
        )
    return rows


def _metadata(root: str) -> tuple[dict | None, str]:
    """The parsed Metadata/keypoint_taxonomy.json (None when absent) and its path; ValueError if malformed."""
    path = join(root, "Metadata", "keypoint_taxonomy.json")
    if not exists(path):
        return None, path
    doc = _load_json(path)
    if not isinstance(doc, dict):
        raise ValueError(
            f"{path}: malformed: the top level is a JSON {type(doc).__name__}, expected an object "
            "(categories, keypoints, concepts, templates); fix the file or remove it to import without it"
        )
    return doc, path


def _entries(pairs: list[dict], ann_paths: list[str], anns: list) -> pd.DataFrame:
    """Every keypoint entry of the pair files (visible points) and keypoint files (ENTRY_COLUMNS)."""

    def entry(kp: dict) -> tuple:
        return str(kp["name"]), kp.get("id"), str(kp["concept_name"]), kp.get("concept_id")

    rows = [
        (pr["path"], pr[f"{side}_image"], pr[f"{side}_category"], *entry(kp))
        for pr in pairs
        for side in ("src", "trg")
        for kp in pr["doc"][f"{side}_keypoints"]
    ]
    rows += [
        (
            path,
            str(doc.get("image_id") or _stem(doc["image"])),
            str(doc.get("category") or path.split("/")[-2]),
        )
        + entry(kp)
        for path, doc in zip(ann_paths, anns, strict=True)
        for kp in doc["keypoints"]
    ]
    return pd.DataFrame(rows, columns=ENTRY_COLUMNS)


def _check_pairs_against_annotations(entries: pd.DataFrame, ann_paths: list[str]) -> None:
    """ValueError naming the pair file that lists a keypoint its image's KeypointAnnotations file lacks."""
    from_ann = entries["file"].isin(set(ann_paths))
    ann = entries[from_ann]
    pair = entries[~from_ann & entries["image_id"].isin(set(ann["image_id"]))]
    m = pair.merge(
        ann[["image_id", "keypoint", "file"]],
        on=["image_id", "keypoint"],
        how="left",
        suffixes=("", "_ann"),
        indicator=True,
    )
    bad = m[m["_merge"] == "left_only"]
    if len(bad):
        r = bad.iloc[0]
        ann_file = ann.loc[ann["image_id"] == r.image_id, "file"].iloc[0]
        raise ValueError(
            f"{r.file}: names keypoint {r.keypoint!r} of image {r.image_id!r}, which its annotation "
            f"{ann_file} lacks; fix the pair file or add the keypoint to the annotation"
        )


def _merge_splits(pairs: list[dict]) -> list[dict]:
    """The evaluated pairs with their trainsplits/ split, then the pairs only a split lists."""
    split_of: dict[str, dict] = {}
    for pr in pairs:
        if pr["split"]:
            other = split_of.setdefault(pr["pair_id"], pr)
            if other["split"] != pr["split"]:
                raise ValueError(
                    f"{pr['path']}: pair {pr['pair_id']!r} is in the {pr['split']} split, but {other['path']} "
                    f"puts it in the {other['split']} split; a pair belongs to one split"
                )
    evaluated = [pr for pr in pairs if not pr["split"]]
    for pr in evaluated:
        if pr["pair_id"] in split_of:
            pr["split"] = split_of[pr["pair_id"]]["split"]
    seen = {pr["pair_id"] for pr in evaluated}
    return evaluated + [pr for pr in split_of.values() if pr["pair_id"] not in seen]


def read_soco_release(root: str, taxonomy: Taxonomy | None = None, workers: int = 8) -> SocoRelease:
    """Read a SOCO release into canonical tables; `taxonomy` None builds the release's own."""
    pair_paths = [
        (lvl, "", p)
        for lvl in ("intra", "cross")
        for p in glob_paths(join(root, "PairAnnotations", lvl), "*/*.json")
    ] + [
        (None, split, p)
        for split in SPLITS
        for p in glob_paths(join(root, "PairAnnotations", "trainsplits", split), "*/*.json")
    ]
    if not pair_paths and not exists(join(root, "PairAnnotations")):
        raise FileNotFoundError(
            f"{root}: no PairAnnotations/ folder; point SourceConfig.soco_release at a SOCO release root"
        )
    with ThreadPoolExecutor(max(1, workers)) as pool:
        docs = list(pool.map(lambda lp: _load_json(lp[2]), pair_paths))
    pairs = _merge_splits(
        [
            _parse_pair(p, d, lvl, p.rstrip("/").split("/")[-2], split)
            for (lvl, split, p), d in zip(pair_paths, docs, strict=True)
        ]
    )

    image_files = {tuple(p.split("/")[-2:]) for p in glob_paths(join(root, "Images"), "*/*")}
    for pr in pairs:
        for side in ("src", "trg"):
            if (pr[f"{side}_category"], pr[f"{side}_file"]) not in image_files:
                raise ValueError(
                    f"{pr['path']}: image Images/{pr[f'{side}_category']}/{pr[f'{side}_file']} "
                    "does not exist; the release is incomplete"
                )

    ann_paths = glob_paths(join(root, "KeypointAnnotations"), "*/*.json")
    with ThreadPoolExecutor(max(1, workers)) as pool:
        anns = list(pool.map(_load_json, ann_paths))
    for path, doc in zip(ann_paths, anns, strict=True):
        _require(doc, ("image", "imsize", "bndbox", "keypoints"), path)
        for i, kp in enumerate(doc["keypoints"]):
            _require(kp, ("name", "concept_name"), path, f"keypoints[{i}]")
    entries = _entries(pairs, ann_paths, anns)
    check_keypoint_concepts(entries)
    _check_pairs_against_annotations(entries, ann_paths)
    meta, meta_path = _metadata(root)
    if taxonomy is None:
        cross = pd.DataFrame(
            [
                (pr["src_category"], pr["trg_category"], pr["ancestor"])
                for pr in pairs
                if pr["level"] == "cross"
            ],
            columns=["src_category", "trg_category", "ancestor"],
        )
        taxonomy = build_release_taxonomy(
            entries, cross, meta, meta_path, source=f"the taxonomy of the release {root}"
        )

    # Images and keypoints: KeypointAnnotations first, pair files fill in what they lack.
    images: dict[str, dict] = {}
    kp_rows: list[dict] = []
    annotated: set[str] = set()
    for path, doc in zip(ann_paths, anns, strict=True):
        cat = path.split("/")[-2]
        image_id = str(doc.get("image_id") or _stem(doc["image"]))
        images[image_id] = _image_row(
            image_id, str(doc.get("category") or cat), str(doc["image"]), doc, "", root, path
        )
        kp_rows.extend(_keypoint_rows(image_id, images[image_id]["category"], doc["keypoints"], path, True))
        annotated.add(image_id)
    for pr in pairs:
        d = pr["doc"]
        for side in ("src", "trg"):
            image_id, cat = pr[f"{side}_image"], pr[f"{side}_category"]
            if image_id not in images:
                images[image_id] = _image_row(
                    image_id, cat, pr[f"{side}_file"], d, f"{side}_", root, pr["path"]
                )
            if image_id not in annotated:
                kp_rows.extend(_keypoint_rows(image_id, cat, d[f"{side}_keypoints"], pr["path"], True))
    kp = pd.DataFrame(kp_rows, columns=list(KeypointSchema.to_schema().columns))
    kp = kp.drop_duplicates(["image_id", "keypoint"]).reset_index(drop=True)

    known = set(taxonomy.categories)
    img = pd.DataFrame(list(images.values()))
    img["supercategory"] = [taxonomy.supercategory(c) if c in known else "unknown" for c in img["category"]]
    for c in ("azimuth", "elevation", "theta", "distance"):
        img[c] = np.nan

    def ancestor(pr: dict) -> str:
        if pr["ancestor"] is not None:
            return str(pr["ancestor"])
        if pr["src_category"] == pr["trg_category"]:
            return pr["src_category"]
        if pr["src_category"] in known and pr["trg_category"] in known:
            return taxonomy.lowest_common_ancestor(pr["src_category"], pr["trg_category"]) or ""
        return ""

    pair_cols = ["pair_id", "level", "pair_group", "src_image", "trg_image", "src_category", "trg_category"]
    ip = pd.DataFrame(
        [{c: pr[c] for c in [*pair_cols, "evaluated", "split"]} | {"ancestor": ancestor(pr)} for pr in pairs],
        columns=[*pair_cols, "ancestor", "evaluated", "split"],
    )
    dup = ip["pair_id"].duplicated(keep=False)
    if dup.any():
        paths = [pairs[i]["path"] for i in np.flatnonzero(dup.to_numpy())[:4]]
        raise ValueError(f"duplicate pair ids {sorted(ip.loc[dup, 'pair_id'].unique())[:4]} in {paths}")

    corr = _correspondences(pairs)
    return SocoRelease(
        images=validate(img, ImageSchema, "soco images").reset_index(drop=True),
        keypoints=validate(kp, KeypointSchema, "soco keypoints"),
        image_pairs=validate(ip, ImagePairSchema, "soco image_pairs"),
        correspondences=validate(corr, CorrespondenceSchema, "soco correspondences").reset_index(drop=True),
        taxonomy=taxonomy,
    )


def _correspondences(pairs: list[dict]) -> pd.DataFrame:
    """SOC and CC rows of all pairs, built by exploding the JSON lists (no loop per keypoint)."""
    groups = pd.DataFrame(
        [
            (
                pr["pair_id"],
                pr["level"],
                g["concept_name"],
                list(g["src_keypoints"]),
                list(g["trg_keypoints"]),
            )
            for pr in pairs
            for g in pr["doc"]["concept_matches"]
        ],
        columns=["pair_id", "level", "concept", "src", "trg"],
    )
    groups["n_candidates"] = groups["trg"].map(len)
    cc = groups.explode("src").explode("trg").dropna(subset=["src", "trg"])
    cc = cc.rename(columns={"src": "src_keypoint", "trg": "trg_keypoint"}).assign(kind="cc")

    soc = (
        pd.DataFrame(
            [(pr["pair_id"], pr["level"], list(pr["doc"]["semantic_overlap"])) for pr in pairs],
            columns=["pair_id", "level", "name"],
        )
        .explode("name")
        .dropna(subset=["name"])
    )
    trg_concepts = pd.DataFrame(
        [
            (pr["pair_id"], kp["name"], kp["concept_name"])
            for pr in pairs
            for kp in pr["doc"]["trg_keypoints"]
        ],
        columns=["pair_id", "name", "concept"],
    ).drop_duplicates(["pair_id", "name"])
    soc = soc.merge(trg_concepts, on=["pair_id", "name"], how="left")
    # n_candidates: the target side of the concept's CC group, else the pair's visible targets of the concept
    from_groups = groups[["pair_id", "concept", "n_candidates"]].drop_duplicates(["pair_id", "concept"])
    from_trg = trg_concepts.groupby(["pair_id", "concept"]).size().rename("n_trg").reset_index()
    soc = soc.merge(from_groups, on=["pair_id", "concept"], how="left").merge(
        from_trg, on=["pair_id", "concept"], how="left"
    )
    soc["n_candidates"] = soc["n_candidates"].fillna(soc["n_trg"])
    soc = soc.assign(kind="soc", src_keypoint=soc["name"], trg_keypoint=soc["name"])

    cols = ["pair_id", "level", "kind", "src_keypoint", "trg_keypoint", "concept", "n_candidates"]
    out = pd.concat([soc[cols], cc[cols]], ignore_index=True)
    out["n_candidates"] = out["n_candidates"].astype(int)
    out["geo"] = out["n_candidates"] >= 2
    return out[["pair_id", "level", "kind", "src_keypoint", "trg_keypoint", "concept", "geo", "n_candidates"]]
