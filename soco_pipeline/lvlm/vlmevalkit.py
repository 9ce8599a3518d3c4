"""VLMEvalKit interop: items out as TSVs, the official SOCO-LVLM TSVs in, prediction workbooks scored."""

from __future__ import annotations

import ast
import base64
import hashlib
import io
from pathlib import Path

import numpy as np
import pandas as pd

from soco_pipeline.lvlm.parse import parse_answers
from soco_pipeline.storage import join, read_bytes, write_bytes_atomic

OFFICIAL_DATASETS = {"soco_lvlm_img": "vis", "soco_lvlm_imgtxt": "vis_desc", "soco_lvlm_txt": "desc"}
EXPORT_NAMES = {s: f"soco_pipeline_{s}" for s in OFFICIAL_DATASETS.values()}
TSV_COLUMNS = [
    "index",
    "g_index",
    "qid",
    "category",
    "question",
    *"ABCD",
    "answer",
    "image",
    "image_path",
]
_SHORT = 64  # VLMEvalKit: an `image` value this short is a reference to another row's index


class VlmEvalKitError(ValueError):
    """A TSV or workbook does not have the expected shape; the message names the file, row and fix."""


def export_tsv(items: pd.DataFrame, setting: str, path: str | Path) -> int:
    """Write one setting's items as a VLMEvalKit TSV (atomically); returns the row count."""
    rows = items[items["setting"] == setting].sort_values("index", ignore_index=True)
    if rows.empty:
        raise VlmEvalKitError(f"no items of setting {setting!r} to export: materialize lvlm_items first")
    paths = [
        [p for p in (s, t) if isinstance(p, str) and p]
        for s, t in zip(rows["src_render"], rows["trg_render"], strict=True)
    ]
    names = [[p.rsplit("/", 1)[-1] for p in ps] for ps in paths]
    key = pd.Series(["|".join(n) for n in names])
    # The first row holding the same images: later rows reference its index instead of repeating them.
    first = pd.Series(np.arange(len(rows))).groupby(key.to_numpy()).transform("min")
    own = first.to_numpy() == np.arange(len(rows))
    b64 = {}
    image = []
    for i, ps in enumerate(paths):  # per row: its images' bytes are the content of the file
        if not own[i]:
            image.append(str(int(rows["index"].iat[int(first.iat[i])])))
            continue
        encoded = [b64.setdefault(p, base64.b64encode(read_bytes(p)).decode("ascii")) for p in ps]
        image.append(encoded[0] if len(encoded) == 1 else repr(encoded))
    out = pd.DataFrame(
        {
            "index": rows["index"].astype(int),
            "g_index": rows["g_index"].astype(int),
            "qid": rows["qid"],
            "category": rows["pair_group"],
            "question": rows["question"],
            **{k: rows[k] for k in "ABCD"},
            "answer": rows["answer"],
            "image": image,
            "image_path": [n[0] if len(n) == 1 else repr(n) for n in names],
        }
    )
    buf = io.StringIO()
    out[TSV_COLUMNS].to_csv(buf, sep="\t", index=False)
    write_bytes_atomic(str(path), buf.getvalue().encode())
    return len(out)


def _as_list(value: str) -> list[str]:
    s = str(value).strip()
    if s.startswith("[") and s.endswith("]"):
        return [str(x) for x in ast.literal_eval(s)]
    return [s]


def setting_of(path: str | Path) -> str:
    """The setting a TSV's file name says (official soco_lvlm_{img,imgtxt,txt}[_c] or our export names)."""
    stem = Path(path).stem
    for prefix, setting in sorted(OFFICIAL_DATASETS.items(), key=lambda kv: -len(kv[0])):
        if stem == prefix or stem.startswith(prefix + "_"):
            return setting
    for setting, name in EXPORT_NAMES.items():
        if stem == name:
            return setting
    raise VlmEvalKitError(
        f"{path}: cannot tell the setting from the file name; name it soco_lvlm_img/imgtxt/txt"
        f"[_c].tsv or pass setting="
    )


def import_tsv(path: str | Path, image_root: str, setting: str | None = None) -> pd.DataFrame:
    """Read a SOCO-LVLM / VLMEvalKit TSV as LVLM items (images decoded into image_root by content hash)."""
    setting = setting or setting_of(path)
    df = pd.read_csv(path, sep="\t", dtype={"index": str, "image": str}, keep_default_na=False)
    missing = {"index", "g_index", "question", "A", "B", "C", "D", "answer", "image"} - set(df.columns)
    if missing:
        raise VlmEvalKitError(f"{path}: missing column(s) {sorted(missing)} of a VLMEvalKit MCQ TSV")
    full = dict(zip(df["index"], df["image"], strict=True))
    written: dict[str, str] = {}

    def store(b64: str) -> str:
        if b64 not in written:
            data = base64.b64decode(b64)
            digest = hashlib.sha256(data).hexdigest()
            p = join(image_root, digest[:2], f"{digest}.jpg")
            write_bytes_atomic(p, data)
            written[b64] = p
        return written[b64]

    src, trg = [], []
    for idx, value in zip(df["index"], df["image"], strict=True):  # per row: decode its image files
        if len(value) <= _SHORT:
            if value not in full or len(full[value]) <= _SHORT:
                raise VlmEvalKitError(
                    f"{path}: row index {idx} reuses the image of row {value!r}, which has none"
                )
            value = full[value]
        imgs = [store(v) for v in _as_list(value)]
        if len(imgs) > 2:
            raise VlmEvalKitError(
                f"{path}: row index {idx} has {len(imgs)} images; SOCO-LVLM rows have 1 or 2"
            )
        src.append(imgs[0] if len(imgs) == 2 else None)
        trg.append(imgs[-1])
    g = df["g_index"].astype(str).str.strip()
    return pd.DataFrame(
        {
            "setting": setting,
            "index": df["index"].astype(int),
            "g_index": pd.factorize(g)[0],
            "qid": df["qid"].astype(str) if "qid" in df else g,
            "rotation": df.groupby(g).cumcount(),
            "pair_id": df["qid"].astype(str) if "qid" in df else g,
            "level": "",
            "pair_group": df["category"].astype(str) if "category" in df else "",
            "supercategory": "",
            "src_keypoint": "",
            "src_image": "",
            "trg_image": "",
            "description": "",
            "question": df["question"],
            **{k: df[k].astype(str) for k in "ABCD"},
            "answer": df["answer"].astype(str).str.strip().str.upper(),
            "answer_option": -1,
            "src_render": src,
            "trg_render": trg,
        }
    )


def read_workbook(path: str | Path) -> pd.DataFrame:
    """A VLMEvalKit prediction workbook (xlsx, or tsv/csv) with empty cells as ""."""
    from soco_pipeline.sources.table_files import read_table_file

    # read by what its bytes are (an xlsx named .tsv, UTF-16); else UTF-8 or a clear error
    df = read_table_file(path)
    df.columns = [str(c).strip() for c in df.columns]
    return df.fillna("")


def score_workbook(path: str | Path) -> dict:
    """Average and circular accuracy (0-100) of a prediction workbook by the official parser."""
    df = read_workbook(path)
    missing = {"answer", "g_index", "prediction"} - set(df.columns)
    if missing:
        raise VlmEvalKitError(
            f"{path} misses required column(s) {sorted(missing)} (answer, g_index, prediction)"
        )
    answer = df["answer"].astype(str).str.strip().str.upper()
    parsed = parse_answers(df["prediction"].astype(str))
    correct = parsed == answer
    groups = correct.groupby(df["g_index"].astype(str).str.strip()).all()
    table = df.assign(parsed=parsed, correct=correct)
    return {
        "rows": len(df),
        "groups": len(groups),
        "average": 100 * float(correct.mean()) if len(df) else 0.0,
        "circular": 100 * float(groups.mean()) if len(groups) else 0.0,
        "table": table,
    }
