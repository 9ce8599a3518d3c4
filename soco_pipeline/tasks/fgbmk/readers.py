"""Readers and writers of FG-BMK's published formats, the release's misspellings included (docs/fgbmk.md,
"Reading the published data"); every error names the file and line and says what to fix."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import PurePosixPath

import pandas as pd

from soco_pipeline import storage

QUESTION_KEYS = ("question_id", "image", "text", "class", "category")
ANSWER_KEYS = ("question_id", "image", "prompt", "text", "class", "category")
FORMS = ("choice", "true_false", "short_answer")
HIERARCHICAL = "hierarchical_granularity_recognition"
ATTRIBUTE = "attribute_recognition"
KNOWLEDGE_BIAS = "knowledge_bias_estimation"
_FORM_SPELLINGS = {f: f for f in FORMS} | {"true_flase": "true_false"}  # the release's spelling too
KB_FILE = "questions_true_false_all_class.jsonl"
_LABEL = re.compile(r"\s*-?\d+(\s+-?\d+)*\s*")


class FgbmkFormatError(ValueError):
    """A published-format file is malformed; the message names the file and line and the fix."""


@dataclass(frozen=True)
class MachineDataset:
    """One machine-oriented dataset: its train and test rows and its class names (None without classes.txt)."""

    name: str
    train: pd.DataFrame
    test: pd.DataFrame
    classes: list[str] | None
    folder: str = ""  # where train.csv / test.csv lie (errors name them)

    @property
    def num_classes(self) -> int:
        """len(classes.txt), or the largest label + 1 without one (as FG-BMK's Dataset counts)."""
        if self.classes is not None:
            return len(self.classes)
        labels = pd.concat([self.train.labels, self.test.labels]).explode()
        return int(labels.max()) + 1


def read_classes(path: str) -> list[str]:
    """classes.txt: one name a line (trailing blank lines ignored; an inner blank or a repeat refused)."""
    lines = storage.read_bytes(path).decode("utf-8").splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            raise FgbmkFormatError(f"{path}:{n}: empty class name; every line up to the last names a class")
    names = [line.strip() for line in lines]
    first: dict[str, int] = {}
    for i, name in enumerate(names):
        if name in first:
            raise FgbmkFormatError(
                f"{path}:{i + 1}: class name {name!r} is listed twice (ids {first[name]} and {i}, lines "
                f"{first[name] + 1} and {i + 1}); every class needs a name of its own: rename or merge them"
            )
        first[name] = i
    return names


def read_split(
    csv_path: str,
    image_root: str | None = None,
    classes: list[str] | None = None,
    check_images: bool = True,
    split: str | None = None,
) -> pd.DataFrame:
    """One train.csv / test.csv as rows: image_id, path, uri, split, labels, label (-1: multi-label), line."""
    root = image_root if image_root is not None else csv_path.rsplit("/", 1)[0]
    split = split or PurePosixPath(csv_path).stem
    try:
        text = storage.read_bytes(csv_path).decode("utf-8")
    except FileNotFoundError:
        raise FgbmkFormatError(
            f"{csv_path}: no such file; a machine-oriented dataset has train.csv and test.csv"
        ) from None
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        path, comma, label = line.rpartition(",")
        if not comma or not path.strip():
            raise FgbmkFormatError(
                f"{csv_path}:{n}: malformed line {line[:80]!r}; expected 'relative/image/path,label'"
            )
        if not _LABEL.fullmatch(label):
            raise FgbmkFormatError(
                f"{csv_path}:{n}: label {label!r} is not an integer (or space-separated integers for a "
                f"multi-label line)"
            )
        labels = [int(x) for x in label.split()]
        bad = [x for x in labels if x < 0 or (classes is not None and x >= len(classes))]
        if bad:
            have = (
                f"classes.txt has {len(classes)} classes (0..{len(classes) - 1})"
                if classes is not None
                else "labels must be >= 0"
            )
            raise FgbmkFormatError(f"{csv_path}:{n}: label {bad[0]} is outside the classes; {have}")
        rows.append((path, labels, n))
    df = pd.DataFrame(rows, columns=["path", "labels", "line"])
    df.insert(0, "image_id", df.path)
    df["uri"] = [storage.join(root, p) for p in df.path]
    df["split"] = split
    df["label"] = [lab[0] if len(lab) == 1 else -1 for lab in df.labels]
    if check_images:
        for uri, n in zip(df.uri, df.line, strict=True):
            if not storage.exists(uri):
                raise FgbmkFormatError(
                    f"{csv_path}:{n}: image {uri} does not exist; point image_root at the folder the paths "
                    f"are relative to, or remove the line"
                )
    return df[["image_id", "path", "uri", "split", "labels", "label", "line"]]


def read_machine_dataset(
    folder: str, image_root: str | None = None, check_images: bool = True
) -> MachineDataset:
    """A machine-oriented dataset folder (train.csv, test.csv, optional classes.txt)."""
    folder = str(folder).rstrip("/")
    cpath = storage.join(folder, "classes.txt")
    classes = read_classes(cpath) if storage.exists(cpath) else None
    splits = {
        s: read_split(storage.join(folder, f"{s}.csv"), image_root or folder, classes, check_images, s)
        for s in ("train", "test")
    }
    return MachineDataset(folder.rsplit("/", 1)[-1], splits["train"], splits["test"], classes, folder)


def read_jsonl(path: str, keys: tuple[str, ...] = QUESTION_KEYS) -> pd.DataFrame:
    """A JSONL file of question (or answer) records with at least `keys`; adds `line` (1-based)."""
    try:
        text = storage.read_bytes(path).decode("utf-8")
    except FileNotFoundError:
        raise FgbmkFormatError(f"{path}: no such file") from None
    if text.startswith("version https://git-lfs"):
        raise FgbmkFormatError(
            f"{path}: a Git LFS pointer, not the file; run `git lfs pull` in the FG-BMK checkout"
        )
    records = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError as e:
            raise FgbmkFormatError(f"{path}:{n}: not valid JSON ({e}); one JSON object a line") from None
        if not isinstance(rec, dict):
            raise FgbmkFormatError(f"{path}:{n}: expected a JSON object, got {type(rec).__name__}")
        missing = [k for k in keys if k not in rec]
        if missing:
            raise FgbmkFormatError(f"{path}:{n}: missing keys {missing}; a record has {list(keys)}")
        records.append({**rec, "line": n})
    df = pd.DataFrame(records, columns=[*keys, "line"] if not records else None)
    dup = df[df.question_id.duplicated(keep=False)] if len(df) else df
    if len(dup):
        where = "; ".join(
            f"id {qid!r} on lines {', '.join(str(x) for x in grp.line)}"
            for qid, grp in list(dup.groupby("question_id", sort=True))[:5]
        )
        raise FgbmkFormatError(
            f"{path}: duplicate question ids ({dup.question_id.nunique()}): {where}; every record needs a "
            f"question_id of its own (answers are matched to questions by it)"
        )
    for k in ("image", "text", "class", "category", *(["prompt"] if "prompt" in keys else [])):
        df[k] = df[k].astype(str)
    return df


def read_questions(path: str) -> pd.DataFrame:
    """A published question file: question_id, image, text (the question), class (the answer), category."""
    return read_jsonl(path, QUESTION_KEYS)


def read_answers(path: str) -> pd.DataFrame:
    """A published answer file: question_id, image, prompt (the question), text (the model's answer), class, category."""
    return read_jsonl(path, ANSWER_KEYS)


def write_jsonl(df: pd.DataFrame, path: str, keys: tuple[str, ...] = QUESTION_KEYS) -> None:
    """Write `keys` of every row as one JSON object a line (atomically); question ids stay ints when they are."""
    missing = [k for k in keys if k not in df.columns]
    if missing:
        raise ValueError(f"write_jsonl({path}): the table lacks columns {missing}")
    lines = []
    for rec in df[list(keys)].to_dict("records"):
        qid = rec["question_id"]
        if isinstance(qid, float) and qid.is_integer():
            rec["question_id"] = int(qid)
        elif hasattr(qid, "item"):
            rec["question_id"] = qid.item()
        lines.append(json.dumps(rec, ensure_ascii=False))
    storage.write_bytes_atomic(path, ("\n".join(lines) + ("\n" if lines else "")).encode())


def human_files(root: str) -> pd.DataFrame:
    """The question files under a human-oriented root (task, dataset, level, form, path)."""
    fs, base = storage.filesystem(root)
    rows = []
    for p in sorted(fs.glob(f"{base.rstrip('/')}/**/*.jsonl")):
        parts = PurePosixPath(p).relative_to(base).parts
        task = parts[0].replace("estimination", "estimation")
        if task == HIERARCHICAL and len(parts) == 4:
            m = re.fullmatch(r"(\w+?)_question_(\w+)\.jsonl", parts[3])
            if m and m.group(2) in _FORM_SPELLINGS:
                rows.append((task, parts[1], parts[2], _FORM_SPELLINGS[m.group(2)], p))
        elif task == KNOWLEDGE_BIAS and len(parts) == 3 and parts[2] == KB_FILE:
            rows.append((task, parts[1], "all_class", "true_false", p))
        elif task == ATTRIBUTE and len(parts) == 2:  # <dataset>_attribute_questions.jsonl
            m = re.fullmatch(r"(.+?)_attribute_questions\.jsonl", parts[1])
            if m:
                rows.append((task, m.group(1), "attribute", "mixed", p))
    prefix = "" if "://" not in root else root.split("://", 1)[0] + "://"
    df = pd.DataFrame(rows, columns=["task", "dataset", "level", "form", "path"])
    df["path"] = prefix + df["path"] if prefix else df["path"]
    return df


def unrecognised_files(root: str) -> list[str]:
    """The .jsonl files under a human-oriented root that `human_files` does not take as question files."""
    fs, base = storage.filesystem(root)
    known = {PurePosixPath(p).as_posix().split("://")[-1] for p in human_files(root).path}
    return sorted(p for p in fs.glob(f"{base.rstrip('/')}/**/*.jsonl") if p not in known)


def hierarchical_path(root: str, dataset: str, level: str, form: str) -> str:
    """Where a hierarchical question file goes in the published layout."""
    if form not in FORMS:
        raise ValueError(f"form {form!r} is not one of {list(FORMS)}")
    return storage.join(root, HIERARCHICAL, dataset, level, f"{level}_question_{form}.jsonl")


def knowledge_bias_path(root: str, dataset: str) -> str:
    """Where the knowledge-bias question file goes (our spelling of the folder: estimation)."""
    return storage.join(root, KNOWLEDGE_BIAS, dataset, KB_FILE)


def image_size(ds: MachineDataset, uri: str, split: str, line: int) -> tuple[int, int]:
    """(width, height) of one listed image from its header; FgbmkFormatError naming its CSV line if not."""
    from PIL import Image

    fs, path = storage.filesystem(uri)
    try:
        with fs.open(path, "rb") as f, Image.open(f) as im:
            return im.size
    except Exception as e:  # PIL raises UnidentifiedImageError, OSError, SyntaxError, ValueError ...
        csv = storage.join(ds.folder, f"{split}.csv") if ds.folder else f"{ds.name}/{split}.csv"
        head = storage.read_bytes(uri)[:16] if storage.exists(uri) else b""
        raise FgbmkFormatError(
            f"{csv}:{line}: {uri} is not a readable image ({type(e).__name__}; it starts "
            f"{head!r}); replace it with the JPEG/PNG image, or remove line {line} from {split}.csv"
        ) from None


def items_from_dataset(ds: MachineDataset) -> pd.DataFrame:
    """A machine-oriented dataset as the family's items table at the subclass level (the release's ids)."""
    rows = pd.concat([ds.train, ds.test], ignore_index=True)
    names = ds.classes or [str(i) for i in range(ds.num_classes)]
    sizes = [image_size(ds, r.uri, r.split, r.line) for r in rows.itertuples(index=False)]
    first = rows.labels.map(lambda lab: int(lab[0]))
    name = rows.labels.map(lambda lab: " + ".join(names[int(i)] for i in lab))
    return pd.DataFrame(
        {
            "image_id": ds.name + "/" + rows.path,
            "uri": rows.uri,
            "path": rows.path,
            "split": rows.split,
            "width": [w for w, _ in sizes],
            "height": [h for _, h in sizes],
            "category": name,
            "superclass": ds.name,
            "class": ds.name,
            "subclass": name,
            "superclass_id": 0,
            "class_id": 0,
            "subclass_id": first.astype("int64"),
            "labels": rows.labels.map(lambda lab: " ".join(str(int(i)) for i in lab)),
            "multi_label": rows.labels.map(len) > 1,
            "simulated": False,
        }
    )
