"""The published question and options (CoLVA `chat_with_colva.py`, MMVMEvalKit) and the items built from
generated cases, one per (case, candidate count) with its marked frames."""

from __future__ import annotations

import io
import json
import re
import string

import numpy as np
import pandas as pd
from PIL import Image

from soco_pipeline.storage import join, read_bytes, write_bytes_atomic
from soco_pipeline.synth.writer import jpeg_bytes
from soco_pipeline.tasks.mmvm.config import MAX_CANDIDATES, MmvmConfig
from soco_pipeline.tasks.mmvm.generator import case_rng
from soco_pipeline.tasks.mmvm.marks import draw_candidates, draw_query

QUESTION = (
    "Here are two images. In the second image, I have marked several "
    "visual objects with their contours in different colors, and each "
    "is identified by a white numeric ID against a background that "
    "matches the contour's color. Could you please tell me which of "
    "these marked objects is the same as the object marked with a cyan "
    "contour in the first image? Please make a choice from the following options: \n"
)
NONE_TEXT = "None of the above choices are correct"
LETTERS = string.ascii_uppercase
# The item columns every per-item result table (answers, predictions) carries first.
ITEM_KEYS = [
    "item_id",
    "case_id",
    "split",
    "n_candidates",
    "count_label",
    "match_type",
    "query_absent",
    "answer",
]
ITEM_COLUMNS = [
    "item_id",
    "case_id",
    "split",
    "n_candidates",
    "count_label",
    "match_type",
    "match_type_fallback",
    "query_absent",
    "labels",
    "ids",
    "shown_ids",
    "options",
    "question",
    "answer",
    "answer_id",
    "none_letter",
    "frame0_marked",
    "frame1_marked",
    "data_source",
]


def build_options(ids: list[int]) -> tuple[list[int], str, str]:
    """(shown IDs ascending, options text, None letter) of an ID permutation, as the reference builds them."""
    valid = min(len(ids), MAX_CANDIDATES)
    shown = sorted(int(i) for i in list(ids)[:valid])
    letters = LETTERS[: valid + 1]
    text = "".join(f"{c}. {i}\n" for c, i in zip(letters[:-1], shown, strict=True))
    return shown, text + f"{letters[-1]}. {NONE_TEXT}\n", letters[-1]


def build_question(options: str) -> str:
    """The whole text part: the published question followed by the options."""
    return QUESTION + options


def option_map(options: str) -> dict[str, str]:
    """{letter: option text} of an options block (MMVMEvalKit splits each line at its first '.')."""
    out = {}
    for line in options.split("\n"):
        line = line.strip()
        if not line:
            continue
        if "." not in line:
            raise ValueError(f"option line {line!r} has no '<letter>.' prefix")
        k, v = line.split(".", 1)
        out[k.strip()] = v.strip()
    return out


def options_of(question: str) -> str:
    """The options block of a question: the text after the published template, else its `X. ...` lines."""
    if question.startswith(QUESTION):
        return question[len(QUESTION) :]
    lines = [ln for ln in question.split("\n") if re.match(r"^\s*[A-Z]\.\s", ln)]
    return "".join(ln.strip() + "\n" for ln in lines)


def candidate_counts(n_total: int, counts) -> list[tuple[int, str]]:
    """The (count, label) variants of a case: each published count below its total, then "all"."""
    return [(int(k), str(k)) for k in counts if k < n_total] + [(int(n_total), "all")]


def read_labels(uri: str) -> np.ndarray:
    """A frame's label map (0 = background, k = the frame's k-th object)."""
    with Image.open(io.BytesIO(read_bytes(uri))) as im:
        return np.asarray(im)


def read_rgb(uri: str) -> np.ndarray:
    """An image file as H x W x 3 uint8 RGB."""
    with Image.open(io.BytesIO(read_bytes(uri))) as im:
        return np.asarray(im.convert("RGB"))


def build_items(
    cases: pd.DataFrame, objects: pd.DataFrame, images: pd.DataFrame, cfg: MmvmConfig, root: str
) -> pd.DataFrame:
    """Items (ITEM_COLUMNS) of every case and candidate count, marked frames written under `root`."""
    img = images.set_index("image_id")
    rows = []
    for case in cases.itertuples(index=False):  # per case: read its frames once, mark each variant
        objs = objects[objects["case_id"] == case.case_id]
        f0 = img.loc[case.frame0]
        f1 = img.loc[case.frame1]
        lab0, lab1 = read_labels(f0["labels_uri"]), read_labels(f1["labels_uri"])
        query = objs[(objs["frame"] == 0) & (objs["role"] == "query")]["label"].iat[0]
        marked0 = join(root, case.case_id, "frame0_marked.jpg")
        write_bytes_atomic(marked0, jpeg_bytes(draw_query(read_rgb(f0["uri"]), lab0 == query), 95))
        rgb1 = read_rgb(f1["uri"])
        cands = objs[(objs["frame"] == 1) & objs["candidate"]].sort_values("label")
        match = cands[cands["role"] == "match"]["label"].tolist()
        others = cands[cands["role"] != "match"]["label"].to_numpy()
        rng = case_rng(cfg.seed, case.split + "/items", int(case.index))
        for k, count_label in candidate_counts(len(cands), cfg.candidates.counts):
            pick = sorted(match + rng.choice(others, size=k - len(match), replace=False).tolist())
            ids = (rng.permutation(k) + 1).tolist()  # ids[i] labels the i-th picked candidate
            marked, _ = draw_candidates(rgb1, [lab1 == lb for lb in pick], ids)
            item_id = f"{case.case_id}/{count_label}"
            marked1 = join(root, case.case_id, f"frame1_marked_{count_label}.jpg")
            write_bytes_atomic(marked1, jpeg_bytes(marked, 95))
            shown, options, none_letter = build_options(ids)
            if match:
                answer_id = ids[pick.index(match[0])]
                answer = LETTERS[shown.index(answer_id)] if answer_id in shown else none_letter
            else:
                answer_id, answer = -1, none_letter
            rows.append(
                {
                    "item_id": item_id,
                    "case_id": case.case_id,
                    "split": case.split,
                    "n_candidates": k,
                    "count_label": count_label,
                    "match_type": case.match_type,
                    "match_type_fallback": "",
                    "query_absent": not match,
                    "labels": json.dumps(pick),
                    "ids": json.dumps(ids),
                    "shown_ids": json.dumps(shown),
                    "options": options,
                    "question": build_question(options),
                    "answer": answer,
                    "answer_id": int(answer_id),
                    "none_letter": none_letter,
                    "frame0_marked": marked0,
                    "frame1_marked": marked1,
                    "data_source": case.data_source,
                }
            )
    return pd.DataFrame(rows, columns=ITEM_COLUMNS)
