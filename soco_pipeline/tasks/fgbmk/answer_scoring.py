"""Answer matching for FG-BMK's human-oriented questions (docs/fgbmk.md, "Answer-matching rules"), beside
FG-BMK's own substring rule (`correct_published`); a circular group is right only if every rotation is."""

from __future__ import annotations

import json
import re

import pandas as pd

_SEP = re.compile(r"[_\-,]+")
_DROP = re.compile(r"[^\w ]+")  # letters of any script stay (foreign class names)
_SPACES = re.compile(r"\s+")
_QUOTED = re.compile(r'"([^"]+)"')


def normalise(text: str) -> str:
    """The normalised form answers and names are compared in."""
    return _SPACES.sub(" ", _DROP.sub("", _SEP.sub(" ", str(text).lower()))).strip()


def published_normalise(text: str) -> str:
    """answer_acc.py's normalisation: `_ - ,` runs to one space, lower case, stripped."""
    return _SEP.sub(" ", str(text)).lower().strip()


def _has_phrase(answer: str, name: str) -> bool:
    return bool(name) and re.search(rf"(?<!\w){re.escape(name)}(?!\w)", answer) is not None


def match_choice(answer: str, truth: str, options: list[str]) -> tuple[str, str]:
    """(parsed option or "", method) of a choice answer."""
    a, opts = normalise(answer), [normalise(o) for o in options]
    if a in opts:
        return a, "exact"
    found = [o for o in opts if _has_phrase(a, o)]
    found = [o for o in found if not any(o != p and _has_phrase(p, o) for p in found)]
    if len(found) == 1:
        return found[0], "contains"
    return "", "ambiguous" if found else "none"


def match_short(answer: str, truth: str) -> tuple[str, str]:
    """(parsed name or "", method) of a short answer."""
    a, t = normalise(answer), normalise(truth)
    if a == t:
        return t, "exact"
    return (t, "contains") if _has_phrase(a, t) else ("", "none")


def match_yes_no(answer: str) -> tuple[str, str]:
    """("yes" | "no" | "", method) of a true/false answer."""
    words = normalise(answer).split()
    if words and words[0] in ("yes", "no"):
        return words[0], "leading"
    present = {w for w in words if w in ("yes", "no")}
    return (present.pop(), "contains") if len(present) == 1 else ("", "none")


def infer_form(prompt: str) -> str:
    """A published question's form from its wording: choice, true_false or short_answer."""
    p = prompt.lower()
    if "answer with yes or no" in p:
        return "true_false"
    return "choice" if "choose one answer from the following list" in p else "short_answer"


def options_of(prompt: str) -> list[str]:
    """The quoted options of a choice prompt."""
    return _QUOTED.findall(prompt.split(":", 1)[-1]) if ":" in prompt else _QUOTED.findall(prompt)


def score_answers(answers: pd.DataFrame) -> pd.DataFrame:
    """Add parsed, method, correct and correct_published to answer rows (an `error` counts as wrong)."""
    parsed, method, correct = [], [], []
    errors = answers["error"] if "error" in answers.columns else pd.Series("", index=answers.index)
    for form, raw, key, opts, err in zip(
        answers.form, answers.raw_answer, answers["class"], answers.options, errors, strict=True
    ):
        if form == "choice":
            p, m = match_choice(raw, key, json.loads(opts) if isinstance(opts, str) else list(opts))
        elif form == "short_answer":
            p, m = match_short(raw, key)
        elif form == "true_false":
            p, m = match_yes_no(raw)
        else:
            raise ValueError(f"unknown question form {form!r}; use choice, true_false or short_answer")
        parsed.append(p)
        method.append(m if not err else "error")
        correct.append(bool(p) and p == normalise(key) and not err)
    out = answers.copy()
    out["parsed"], out["method"], out["correct"] = parsed, method, correct
    out["correct_published"] = [
        published_normalise(k) in published_normalise(r)
        for k, r in zip(answers["class"], answers.raw_answer, strict=True)
    ]
    return out


def score_answer_file(answers: pd.DataFrame) -> pd.DataFrame:
    """Score a published answer file; the form and options come from the prompt's wording."""
    df = answers.rename(columns={"text": "raw_answer"}).copy()
    df["form"] = [infer_form(p) for p in df.prompt]
    df["options"] = [json.dumps(options_of(p)) for p in df.prompt]
    return score_answers(df)


def accuracy_table(scored: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Plain accuracy (ours and the published rule) per group, 0-100, with counts."""
    g = scored.groupby(by, sort=True)
    return pd.DataFrame(
        {
            "n": g.size(),
            "accuracy": g.correct.mean() * 100.0,
            "accuracy_published": g.correct_published.mean() * 100.0,
        }
    ).reset_index()


def circular_accuracy(scored: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Choice questions: share of groups (every rotation of one question) answered right in every rotation."""
    choice = scored[scored.form == "choice"]
    groups = choice.groupby([*by, "group_id"], sort=True).correct.all().reset_index()
    g = groups.groupby(by, sort=True)
    return pd.DataFrame({"groups": g.size(), "circular_accuracy": g.correct.mean() * 100.0}).reset_index()


def knowledge_bias(scored: pd.DataFrame, worst: int = 5) -> tuple[pd.DataFrame, dict]:
    """Per-class accuracy of the knowledge-bias questions and its spread (mean, population std, min, max)."""
    kb = scored[scored.task == "knowledge_bias"] if "task" in scored.columns else scored
    per = kb.groupby("subclass", sort=True).correct.agg(["mean", "size"]).reset_index()
    per.columns = ["subclass", "accuracy", "n"]
    per["accuracy"] *= 100.0
    acc = per.accuracy.to_numpy()
    stats = {k: float(getattr(acc, k)()) if len(acc) else float("nan") for k in ("mean", "std", "min", "max")}
    worst_classes = per.sort_values(["accuracy", "subclass"]).subclass.head(worst).tolist()
    report = {"classes": int(len(per)), **stats, "worst": worst_classes}
    return per, report


def class_of_image(image: str) -> str:
    """The image's folder, normalised: a yes/no row's class when its `category` is only a level word."""
    folder = image.replace("\\", "/").rsplit("/", 2)[-2] if "/" in image else ""
    return normalise(re.sub(r"^\d+\.", "", folder))


# `category` of a published question names its true class, except these level words of the hierarchical files.
LEVEL_CATEGORIES = frozenset(
    {"generic", "kingdom", "phylum", "class", "order", "family", "genus", "species", "attribute"}
)


def true_class(answer_key: str, category: str, image: str) -> str:
    """A published question's true class: its key, or for a yes/no key `category`, else the image's folder."""
    if answer_key.strip().lower() not in ("yes", "no"):
        return answer_key
    return category if category.strip().lower() not in LEVEL_CATEGORIES else class_of_image(image)


def per_class_published(scored: pd.DataFrame) -> pd.DataFrame:
    """A scored published answer file with its true class (`true_class`, normalised) in `subclass`."""
    cls = [
        normalise(true_class(k, c, im))
        for k, c, im in zip(scored["class"], scored.category, scored.image, strict=True)
    ]
    return scored.assign(subclass=cls)


def answer_acc(scored: pd.DataFrame) -> dict:
    """FG-BMK's demo/human_evaluation/answer_acc.py on scored rows: per answer key correct / total, and its
    "Overall Accuracy" = the share of images (by `image`) whose questions are all right (0-100)."""
    if scored.empty:
        return dict(images=0, correct_images=0, overall_accuracy=float("nan"), per_question=float("nan"))
    per_image = scored.groupby("image", sort=False).correct_published.all()
    key = scored["class"].map(published_normalise)
    per_class = scored.groupby(key, sort=False).correct_published.agg(["sum", "size"])
    return {
        "images": int(len(per_image)),
        "correct_images": int(per_image.sum()),
        "overall_accuracy": float(per_image.mean()) * 100.0,
        "per_question": float(scored.correct_published.mean()) * 100.0,
        "per_class": {k: (int(r["sum"]), int(r["size"])) for k, r in per_class.iterrows()},
    }
