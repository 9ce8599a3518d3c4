"""The published layouts, in and out: MMVMEvalKit / CoLVA `match_bench/` + its TSV, and VLMEvalKit's
`MMVMBench.tsv` (docs/mmvm.md, "Official formats"); our extra JSON keys let an import restore our items."""

from __future__ import annotations

import ast
import base64
import io
import json
import re
from pathlib import Path

import cv2
import numpy as np
import pandas as pd
from PIL import Image

from soco_pipeline.storage import join, read_bytes, write_bytes_atomic
from soco_pipeline.synth.writer import png_bytes
from soco_pipeline.tasks.mmvm.cues import parse_match_type
from soco_pipeline.tasks.mmvm.prompt import LETTERS, QUESTION, option_map, options_of, read_labels

FILES = (
    "FRAME00.jpg",
    "FRAME00_ORI.jpg",
    "FRAME00.json",
    "FRAME01_CAND.jpg",
    "FRAME01_ORI.jpg",
    "FRAME01_CAND.json",
)
TSV_NAME = "mllm_match_eval_full.tsv"
EVAL_COLUMNS = [
    "index",
    "question",
    "image_path",
    "choices",
    "pure_question",
    "choices_head",
    "answer",
    "match_type",
    "image",
    "image_v3",
    "image_path_v3",
    "question_v3",
]
VLMEVALKIT_COLUMNS = ["index", "question", "answer", "match_type", "image"]


class MmvmFormatError(ValueError):
    """An official-format file is malformed; the message names the file, the row and the fix."""


# ---------------------------------------------------------------- masks <-> polygons


def mask_to_polygons(mask: np.ndarray) -> list[list[int]]:
    """COCO-style polygons of a mask: outer and hole contours (a hole's overlap clears it on import)."""
    contours, _ = cv2.findContours(mask.astype(np.uint8), cv2.RETR_CCOMP, cv2.CHAIN_APPROX_NONE)
    return [c.reshape(-1).astype(int).tolist() for c in contours if len(c) >= 3]


def polygons_to_mask(polygons, height: int, width: int, where: str = "") -> np.ndarray:
    """The mask of COCO polygons: the reference's rule (skip odd or short ones; >= 2 overlaps cleared)."""
    count = np.zeros((height, width), np.uint8)
    for k, poly in enumerate(polygons):
        if len(poly) % 2 or len(poly) < 6:
            continue
        pts = np.asarray(poly, dtype=np.float64).reshape(-1, 2)
        if not np.isfinite(pts).all():
            raise MmvmFormatError(f"{where}: polygon {k} holds non-numeric coordinates")
        bad = (pts[:, 0] < -0.5) | (pts[:, 1] < -0.5) | (pts[:, 0] > width + 0.5) | (pts[:, 1] > height + 0.5)
        if bad.any():
            x, y = pts[np.argmax(bad)]
            raise MmvmFormatError(
                f"{where}: polygon {k} has point ({x:g}, {y:g}) outside the {width}x{height} image; "
                f"fix the segmentation or the height/width of the entry"
            )
        one = np.zeros((height, width), np.uint8)
        cv2.fillPoly(one, [np.round(pts).astype(np.int32)], 1)
        count += one
    return count == 1


# ---------------------------------------------------------------- export


def _entry(mask: np.ndarray, oid: int, label: int, **extra) -> dict:
    h, w = mask.shape
    return {
        "id": int(oid),
        "height": int(h),
        "width": int(w),
        "segmentation": mask_to_polygons(mask),
        "label": int(label),
        **extra,
    }


def export_match_bench(
    items: pd.DataFrame, cases: pd.DataFrame, objects: pd.DataFrame, images: pd.DataFrame, out_root: str
) -> pd.DataFrame:
    """Write items as `match_bench/case_xxxxx/` folders plus the TSV under `out_root`; returns the TSV."""
    img = images.set_index("image_id")
    frames = cases.set_index("case_id")
    q = objects[(objects["frame"] == 0) & (objects["role"] == "query")].set_index("case_id")["label"]
    rows = []
    for i, it in enumerate(items.itertuples(index=False)):  # per item: one folder of six files
        folder = f"match_bench/case_{i:05d}"
        c = frames.loc[it.case_id]
        f0, f1 = img.loc[c["frame0"]], img.loc[c["frame1"]]
        lab0, lab1 = read_labels(f0["labels_uri"]), read_labels(f1["labels_uri"])
        ql = int(q.loc[it.case_id])
        files = {
            "FRAME00.jpg": read_bytes(it.frame0_marked),
            "FRAME00_ORI.jpg": read_bytes(f0["uri"]),
            "FRAME01_CAND.jpg": read_bytes(it.frame1_marked),
            "FRAME01_ORI.jpg": read_bytes(f1["uri"]),
            "FRAME00.json": json.dumps(
                [_entry(lab0 == ql, 0, ql, mmvm_item_id=it.item_id, mmvm_case_id=it.case_id)]
            ).encode(),
            "FRAME01_CAND.json": json.dumps(
                [
                    _entry(lab1 == lb, oid, lb)
                    for lb, oid in zip(json.loads(it.labels), json.loads(it.ids), strict=True)
                ]
            ).encode(),
        }
        for name, data in files.items():
            write_bytes_atomic(join(out_root, folder, name), data)
        letters = list(option_map(it.options))
        paths = [f"{folder}/FRAME00.jpg", f"{folder}/FRAME01_CAND.jpg"]
        rows.append(
            {
                "index": i,
                "question": it.question,
                "image_path": repr(paths),
                "choices": it.options,
                "pure_question": QUESTION,
                "choices_head": ", ".join(letters),
                "answer": it.answer,
                "match_type": it.match_type,
                "image": str(i),
                "image_v3": str(i),
                "image_path_v3": repr(paths),
                "question_v3": it.question,
            }
        )
    table = pd.DataFrame(rows, columns=EVAL_COLUMNS)
    write_bytes_atomic(join(out_root, TSV_NAME), table.to_csv(sep="\t", index=False).encode())
    return table


def export_vlmevalkit(items: pd.DataFrame, path: str) -> pd.DataFrame:
    """Write items as VLMEvalKit's MMVMBench.tsv (index, question, answer, match_type, image)."""
    image = [
        repr(
            [base64.b64encode(read_bytes(a)).decode("ascii"), base64.b64encode(read_bytes(b)).decode("ascii")]
        )
        for a, b in zip(items["frame0_marked"], items["frame1_marked"], strict=True)
    ]
    table = pd.DataFrame(
        {
            "index": np.arange(len(items)),
            "question": items["question"].to_numpy(),
            "answer": items["answer"].to_numpy(),
            "match_type": items["match_type"].to_numpy(),
            "image": image,
        }
    )
    write_bytes_atomic(str(path), table.to_csv(sep="\t", index=False).encode())
    return table


# ---------------------------------------------------------------- import


def _read_tsv(path: str, required: set[str]) -> pd.DataFrame:
    try:
        df = pd.read_csv(io.BytesIO(read_bytes(str(path))), sep="\t", dtype=str, keep_default_na=False)
    except FileNotFoundError:
        raise MmvmFormatError(f"{path}: file not found") from None
    missing = sorted(required - set(df.columns))
    if missing:
        raise MmvmFormatError(f"{path}: missing column(s) {missing}; an MMVM TSV has {sorted(required)}")
    refuse_duplicate_index(df, str(path))
    return df


def refuse_duplicate_index(df: pd.DataFrame, path: str) -> None:
    """Refuse a repeated `index` (naming its file lines): frames and answers are keyed by it."""
    key = df["index"].astype(str).str.strip()
    dup = key.duplicated(keep=False).to_numpy()
    if dup.any():
        first = key[dup].iat[0]
        lines = [int(k) + 2 for k in np.flatnonzero((key == first).to_numpy())]
        raise MmvmFormatError(
            f"{path}: index {first!r} occurs on rows {lines} (file lines, the header is line 1); "
            f"{int(key[dup].nunique())} index value(s) repeat. Every row needs its own index: renumber or "
            f"remove the repeated rows"
        )


def check_image(data: bytes, where: str) -> tuple[int, int]:
    """(width, height) of an encoded image, decoded in full; MmvmFormatError naming `where` if not one."""
    try:
        with Image.open(io.BytesIO(data)) as im:
            im.load()
            return im.size
    except Exception as e:  # PIL raises UnidentifiedImageError, OSError, SyntaxError, ValueError ...
        raise MmvmFormatError(
            f"{where}: not a readable image ({type(e).__name__}: {e}); {len(data)} bytes starting "
            f"{data[:16]!r}. Replace it with the JPEG/PNG frame"
        ) from None


def _letter(answer: str, where: str) -> str:
    m = re.match(r"^\s*\(?([A-Z])(?:[.):\s]|$)", str(answer))
    if not m:
        raise MmvmFormatError(f"{where}: answer {answer!r} does not start with an option letter (A-Z)")
    return m.group(1)


def _load_json(path: str, where: str) -> list:
    try:
        doc = json.loads(read_bytes(path))
    except FileNotFoundError:
        raise MmvmFormatError(f"{where}: {path} is missing; a case folder holds {', '.join(FILES)}") from None
    except ValueError as e:
        raise MmvmFormatError(f"{where}: {path} is not valid JSON ({e})") from None
    if not isinstance(doc, list) or not doc:
        raise MmvmFormatError(f"{where}: {path} must be a non-empty list of annotations")
    for k, e in enumerate(doc):
        if not isinstance(e, dict) or not {"height", "width", "segmentation"} <= set(e):
            raise MmvmFormatError(f"{where}: {path} entry {k} lacks height, width or segmentation")
    return doc


def import_match_bench(root: str, work_root: str, tsv: str | None = None) -> dict[str, pd.DataFrame]:
    """Read `match_bench/` and its TSV under `root` into cases/images/objects/items (label maps under
    `work_root`); bad input raises MmvmFormatError naming the file and the row."""
    tsv = tsv or join(root, TSV_NAME)
    df = _read_tsv(tsv, {"index", "question", "image_path", "answer", "match_type"})
    cases, images, objects, items = {}, [], [], []
    for r, row in enumerate(df.itertuples(index=False), start=2):  # per row: its case folder's files
        where = f"{tsv} row {r} (index {row.index})"
        try:
            paths = ast.literal_eval(row.image_path)
            assert isinstance(paths, list) and len(paths) == 2
        except (ValueError, SyntaxError, AssertionError):
            raise MmvmFormatError(
                f"{where}: image_path {row.image_path!r} must be a list of the two marked "
                f"frames [.../FRAME00.jpg, .../FRAME01_CAND.jpg]"
            ) from None
        folder = str(paths[0]).rsplit("/", 1)[0]
        for name in FILES:
            p = join(root, folder, name)
            try:
                data = read_bytes(p)
            except FileNotFoundError:
                raise MmvmFormatError(
                    f"{where}: case folder {folder} misses {name} ({p}); a case holds {', '.join(FILES)}"
                ) from None
            if name.endswith(".jpg"):
                check_image(data, f"{where}: {folder}/{name}")
        q_doc = _load_json(join(root, folder, "FRAME00.json"), where)
        c_doc = _load_json(join(root, folder, "FRAME01_CAND.json"), where)
        case_id = str(q_doc[0].get("mmvm_case_id") or folder.rsplit("/", 1)[-1])
        item_id = str(q_doc[0].get("mmvm_item_id") or f"{case_id}/{row.index}")
        parsed = parse_match_type(row.match_type)
        options = row.choices if "choices" in df.columns and row.choices else options_of(row.question)
        opts = option_map(options)
        answer = _letter(row.answer, where)
        if answer not in opts:
            raise MmvmFormatError(f"{where}: answer {answer!r} is not one of the options {sorted(opts)}")
        none_letter = LETTERS[len(opts) - 1]
        labels, ids = [], []
        frame_ids = []
        for f, doc, name in ((0, q_doc[:1], "FRAME00"), (1, c_doc, "FRAME01_CAND")):
            h, w = int(doc[0]["height"]), int(doc[0]["width"])
            lab = np.zeros((h, w), np.uint8)
            for k, e in enumerate(doc, start=1):
                m = polygons_to_mask(
                    e["segmentation"], h, w, where=f"{where}: {folder}/{name}.json entry {k - 1}"
                )
                lb = int(e.get("label", k)) if f == 1 else int(e.get("label", 1))
                lab[m] = lb
                if f == 1:
                    labels.append(lb)
                    ids.append(int(e["id"]))
                objects.append(
                    {
                        "case_id": case_id,
                        "frame": f,
                        "label": lb,
                        "role": "query" if f == 0 else "candidate",
                        "candidate": f == 1,
                        "id": int(e.get("id", 0)),
                        "area_px": int(m.sum()),
                    }
                )
            image_id = f"mmvm/imported/{case_id}/frame{f}"
            frame_ids.append(image_id)
            if image_id not in {i["image_id"] for i in images}:
                labels_uri = join(work_root, "labels", case_id, f"frame{f}.png")
                write_bytes_atomic(labels_uri, png_bytes(lab))
                ori = join(root, folder, "FRAME00_ORI.jpg" if f == 0 else "FRAME01_ORI.jpg")
                images.append(
                    {
                        "image_id": image_id,
                        "uri": ori,
                        "width": w,
                        "height": h,
                        "category": "mmvm",
                        "case_id": case_id,
                        "frame": f,
                        "labels_uri": labels_uri,
                        "data_source": f"imported: {root}",
                    }
                )
        shown = sorted(ids)[:25]
        answer_id = -1 if answer == none_letter else int(opts[answer])
        cases.setdefault(
            case_id,
            {
                "case_id": case_id,
                "split": "test",
                "index": len(cases),
                "match_type": row.match_type,
                "query_absent": answer == none_letter,
                "n_total": len(labels),
                "family": "",
                "frame0": frame_ids[0],
                "frame1": frame_ids[1],
                "match_attributes": "{}",
                "data_source": f"imported: {root}",
            },
        )
        items.append(
            {
                "item_id": item_id,
                "case_id": case_id,
                "split": "test",
                "n_candidates": len(labels),
                "count_label": item_id.rsplit("/", 1)[-1] if "mmvm_item_id" in q_doc[0] else str(len(labels)),
                "match_type": row.match_type,
                "match_type_fallback": parsed.fallback,
                "query_absent": answer == none_letter,
                "labels": json.dumps(labels),
                "ids": json.dumps(ids),
                "shown_ids": json.dumps(shown),
                "options": options,
                "question": row.question,
                "answer": answer,
                "answer_id": answer_id,
                "none_letter": none_letter,
                "frame0_marked": join(root, folder, "FRAME00.jpg"),
                "frame1_marked": join(root, folder, "FRAME01_CAND.jpg"),
                "data_source": f"imported: {root}",
            }
        )
    obj = pd.DataFrame(objects).drop_duplicates(["case_id", "frame", "label"], ignore_index=True)
    # identities: the candidate whose shown ID is the answer is the query's instance
    ident = obj["case_id"] + "/f" + obj["frame"].astype(str) + "/" + obj["label"].astype(str)
    obj["identity"] = ident
    it = pd.DataFrame(items)
    for row in it[~it["query_absent"]].itertuples(index=False):
        ids, labels = json.loads(row.ids), json.loads(row.labels)
        lb = labels[ids.index(row.answer_id)]
        sel = (obj["case_id"] == row.case_id) & (obj["frame"] == 1) & (obj["label"] == lb)
        obj.loc[sel, "identity"] = obj.loc[
            (obj["case_id"] == row.case_id) & (obj["frame"] == 0), "identity"
        ].iat[0]
    obj["role"] = np.where(obj["frame"] == 0, "query", "distractor")
    obj["image_id"] = "mmvm/imported/" + obj["case_id"] + "/frame" + obj["frame"].astype(str)
    return {
        "cases": pd.DataFrame(list(cases.values())),
        "images": pd.DataFrame(images),
        "objects": obj,
        "items": it,
    }


def _image_lists(df: pd.DataFrame, path: str) -> tuple[pd.Series, list[str]]:
    """Each kept row's image cell and the skipped rows, by VLMEvalKit's ImageBaseDataset rules: an empty cell
    is skipped (`skip_noimg`); a cell of at most 64 characters names the row whose images it shares."""
    cell = df["image"].astype(str)
    empty = cell.str.strip() == ""
    skipped = [f"row {k + 2} (index {df['index'].iat[k]}): empty image cell" for k in np.flatnonzero(empty)]
    kept = df.index[~empty]
    by_index = dict(zip(df["index"].astype(str), cell, strict=True))
    out = {}
    for k in kept:  # per row: resolve a reference to another row's images
        value = cell.at[k]
        if len(value) <= 64:
            target = by_index.get(value)
            if target is None or len(target) <= 64:
                raise MmvmFormatError(
                    f"{path} row {k + 2} (index {df.at[k, 'index']}): image {value!r} is neither base64 "
                    f"images nor the index of a row that holds them"
                )
            value = target
        out[k] = value
    return pd.Series(out, dtype=object), skipped


def import_vlmevalkit(path: str, image_root: str, skipped: list[str] | None = None) -> pd.DataFrame:
    """VLMEvalKit's MMVMBench.tsv as LVLM items (frames decoded under image_root; no masks), read as
    VLMEvalKit reads it (skipped rows appended to `skipped`); bad rows raise MmvmFormatError."""
    df = _read_tsv(path, set(VLMEVALKIT_COLUMNS))
    images, skip = _image_lists(df, str(path))
    if skipped is not None:
        skipped.extend(f"{path} {s}" for s in skip)
    rows = []
    for k, value in images.items():  # per kept row: decode its two images
        row = df.loc[k]
        where = f"{path} row {k + 2} (index {row['index']})"
        try:
            imgs = ast.literal_eval(value) if value.startswith("[") else [value]
            data = [base64.b64decode(b, validate=True) for b in imgs]
        except (ValueError, SyntaxError, TypeError) as e:
            raise MmvmFormatError(f"{where}: image is not a base64 JPEG or a list of them ({e})") from None
        if len(data) != 2:
            raise MmvmFormatError(
                f"{where}: image holds {len(data)} images; an MMVM row holds the two frames"
            )
        for j, b in enumerate(data):
            check_image(b, f"{where}: frame {j + 1}")
        uris = [join(image_root, f"{row['index']}_{j}.jpg") for j in range(len(data))]
        for u, b in zip(uris, data, strict=True):
            write_bytes_atomic(u, b)
        options = options_of(row["question"])
        opts = option_map(options)
        if len(opts) < 2:
            raise MmvmFormatError(
                f"{where}: the question lists {len(opts)} option(s); an MMVM question ends with lines "
                f"'A. <id>' ... and '<letter>. None of the above choices are correct'"
            )
        answer = _letter(row["answer"], where)
        if answer not in opts:
            raise MmvmFormatError(f"{where}: answer {answer!r} is not one of the options {sorted(opts)}")
        n = len(opts) - 1
        none_letter = LETTERS[n]
        shown = [int(v) for k2, v in opts.items() if k2 != none_letter and v.isdigit()]
        rows.append(
            {
                "item_id": f"vlmevalkit/{row['index']}",
                "case_id": f"vlmevalkit/{row['index']}",
                "split": "test",
                "n_candidates": n,
                "count_label": str(n),
                "match_type": row["match_type"],
                "match_type_fallback": parse_match_type(row["match_type"]).fallback,
                "query_absent": answer == none_letter,
                "labels": "[]",
                "ids": "[]",
                "shown_ids": json.dumps(shown),
                "options": options,
                "question": row["question"],
                "answer": answer,
                "answer_id": -1 if answer == none_letter else int(opts.get(answer, -1)),
                "none_letter": none_letter,
                "frame0_marked": uris[0],
                "frame1_marked": uris[1],
                "data_source": f"imported: {path}",
            }
        )
    return pd.DataFrame(rows)


def read_prediction_workbook(path: str | Path) -> pd.DataFrame:
    """A prediction workbook for MMVMBench (xlsx, tsv or csv, read by its bytes) as VLMEvalKit loads it: an
    empty `prediction` cell is NaN (no prediction), other columns text; a repeated `index` is refused."""
    from soco_pipeline.sources.table_files import read_table_file

    path = Path(path)
    try:
        df = read_table_file(path, dtype=str)
    except FileNotFoundError:
        raise MmvmFormatError(f"{path}: file not found") from None
    df.columns = [str(c).strip() for c in df.columns]
    missing = sorted({"index", "question", "answer", "match_type", "prediction"} - set(df.columns))
    if missing:
        raise MmvmFormatError(
            f"{path}: missing column(s) {missing}; a VLMEvalKit MMVMBench workbook has "
            f"index, question, answer, match_type and prediction"
        )
    refuse_duplicate_index(df, str(path))
    rest = [c for c in df.columns if c not in ("prediction", "match_type")]
    df[rest] = df[rest].fillna("")
    return df
