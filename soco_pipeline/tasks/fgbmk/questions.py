"""Human-oriented questions for LVLMs in FG-BMK's published wording (docs/fgbmk.md, "Human-oriented
questions"): generated, or an official source's published files; `circular` adds every option rotation."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from soco_pipeline.tasks.fgbmk.config import LEVELS, QuestionConfig
from soco_pipeline.tasks.fgbmk.embedded import COLOUR_NAMES, SHAPES, TEXTURES, display_name

QUESTION_COLUMNS = [
    "question_id",
    "group_id",
    "rotation",
    "task",
    "level",
    "form",
    "image",
    "uri",
    "image_id",
    "text",
    "class",
    "category",
    "options",
    "template",
    "subclass",
    "superclass",
    "simulated",
]
ATTRIBUTES = {"colour": tuple(COLOUR_NAMES), "texture": TEXTURES, "body_shape": SHAPES}
ATTRIBUTE_WORDS = {"colour": "main colour", "texture": "texture", "body_shape": "shape"}
_PARENT = {"subclass": "class", "class": "superclass", "superclass": None}


def _quote(names: list[str]) -> str:
    return ", ".join(f'"{n}"' for n in names)


def render_text(
    template: str,
    config: QuestionConfig,
    level: str,
    obj: str,
    options: list[str] | None = None,
    name: str | None = None,
    attribute: str | None = None,
) -> str:
    """Fill one template: {obj}, {level}, {levels}, {options}, {name}, {attribute}."""
    return template.format(
        obj=obj,
        level=config.level_words.get(level, level),
        levels=config.level_plurals.get(level, level),
        options=_quote(options or []),
        name=name or "",
        attribute=attribute or "",
    )


def _obj(config: QuestionConfig, level: str, superclass: str) -> str:
    """The object word of a question: "object" at the superclass level, else the superclass's word."""
    return "object" if level == "superclass" else config.superclass_words.get(superclass, "object")


def _distractors(items_h: pd.DataFrame, row, level: str, k: int, rng: np.random.Generator) -> list[str]:
    parent = _PARENT[level]
    names = items_h[level].unique()
    same = sorted(set(items_h[items_h[parent] == row[parent]][level]) if parent else set(names))
    same = [n for n in same if n != row[level]]
    picked = list(rng.permutation(same)[:k]) if same else []
    if len(picked) < k:  # a parent with too few children: top up from the whole level
        rest = sorted(set(names) - set(picked) - {row[level]})
        picked += list(rng.permutation(rest)[: k - len(picked)])
    return [str(p) for p in picked]


def build_questions(
    items: pd.DataFrame,
    hierarchy: pd.DataFrame,
    config: QuestionConfig,
    seed: int = 0,
    simulated: bool = True,
) -> pd.DataFrame:
    """QUESTION_COLUMNS rows for the test images of `items`, distractors drawn from `hierarchy`."""
    rng = np.random.default_rng([int(seed), 0xF6B9])
    test = items[items.split == "test"].sort_values("image_id")
    if config.images_per_subclass:
        test = test.groupby("subclass", sort=True).head(config.images_per_subclass)
    rows: list[dict] = []

    def add(task, level, form, r, text, answer, options, template):
        rows.append(
            {
                "group_id": len(rows),
                "rotation": 0,
                "task": task,
                "level": level,
                "form": form,
                "image": r["path"],
                "uri": r["uri"],
                "image_id": r["image_id"],
                "text": text,
                "class": answer,
                "category": config.level_words.get(level, level) if task != "attribute" else level,
                "options": json.dumps(options),
                "template": template,
                "subclass": r["subclass"],
                "superclass": r["superclass"],
                "simulated": simulated,
            }
        )

    for r in test.to_dict("records"):
        for level in LEVELS:
            obj = _obj(config, level, r["superclass"])
            truth = display_name(r[level])
            dis = [display_name(d) for d in _distractors(hierarchy, r, level, config.n_choices - 1, rng)]
            options = [str(o) for o in rng.permutation([truth, *dis])]
            t = int(rng.integers(len(config.choice)))
            text = render_text(config.choice[t], config, level, obj, options)
            add("hierarchical", level, "choice", r, text, truth, options, t)
            t = int(rng.integers(len(config.true_false)))
            yes = bool(rng.random() < 0.5) or not dis
            text = render_text(config.true_false[t], config, level, obj, name=truth if yes else dis[0])
            add("hierarchical", level, "true_false", r, text, "yes" if yes else "no", [], t)
            t = int(rng.integers(len(config.short_answer)))
            text = render_text(config.short_answer[t], config, level, obj)
            add("hierarchical", level, "short_answer", r, text, truth, [], t)
        obj = _obj(config, "subclass", r["superclass"])
        for attr, values in ATTRIBUTES.items():
            if attr not in r:  # a published dataset has no attributes
                continue
            truth = str(r[attr])
            picked = list(rng.permutation([v for v in values if v != truth])[: config.n_choices - 1])
            options = [str(o) for o in rng.permutation([truth, *picked])]
            t = int(rng.integers(len(config.attribute)))
            words = ATTRIBUTE_WORDS[attr]
            text = render_text(config.attribute[t], config, "subclass", obj, options, attribute=words)
            add("attribute", attr, "choice", r, text, truth, options, t)
        others = sorted(set(hierarchy[hierarchy["class"] == r["class"]].subclass) - {r["subclass"]})
        others = others or sorted(set(hierarchy.subclass) - {r["subclass"]})
        pairs = [(r["subclass"], "yes")] + ([(str(rng.choice(others)), "no")] if others else [])
        for name, key in pairs:
            t = int(rng.integers(len(config.true_false)))
            text = render_text(config.true_false[t], config, "subclass", obj, name=display_name(name))
            add("knowledge_bias", "subclass", "true_false", r, text, key, [], t)
    out = pd.DataFrame(rows)
    out.insert(0, "question_id", np.arange(1, len(out) + 1))
    return out[QUESTION_COLUMNS]


def circular(questions: pd.DataFrame, config: QuestionConfig) -> pd.DataFrame:
    """Every rotation of each choice question's options (rotation r moves option i to i - r), renumbered."""
    choice = questions[questions.form == "choice"]
    extra = []
    for rot in range(1, config.n_choices):
        rotated = choice.copy()
        opts = [json.loads(o) for o in choice.options]
        rotated["options"] = [json.dumps(o[rot % len(o) :] + o[: rot % len(o)]) for o in opts]
        rotated["rotation"] = rot
        texts = []
        for q, o in zip(rotated.itertuples(index=False), rotated.options, strict=True):
            attr = q.task == "attribute"
            template = (config.attribute if attr else config.choice)[q.template]
            level, words = ("subclass", {"attribute": ATTRIBUTE_WORDS[q.level]}) if attr else (q.level, {})
            obj = _obj(config, level, q.superclass)
            texts.append(render_text(template, config, level, obj, json.loads(o), **words))
        rotated["text"] = texts
        extra.append(rotated)
    out = pd.concat([questions, *extra], ignore_index=True).sort_values(
        ["group_id", "rotation"], kind="stable"
    )
    out["question_id"] = np.arange(1, len(out) + 1)
    return out.reset_index(drop=True)


def official_questions(root: str, dataset: str, image_root: str) -> pd.DataFrame:
    """QUESTION_COLUMNS rows of every published question file of `dataset` under a human-oriented root."""
    from soco_pipeline import storage
    from soco_pipeline.tasks.fgbmk.answer_scoring import infer_form, options_of, true_class
    from soco_pipeline.tasks.fgbmk.readers import human_files, read_questions

    files = human_files(root)
    files = files[files.dataset == dataset]
    if files.empty:
        raise ValueError(
            f"no published question files of dataset {dataset!r} under {root}; the datasets there: "
            f"{sorted(set(human_files(root).dataset))} (set source.dataset)"
        )
    frames = []
    for f in files.itertuples(index=False):
        q = read_questions(f.path)
        task = {"knowledge_bias_estimation": "knowledge_bias", "attribute_recognition": "attribute"}.get(
            f.task, "hierarchical"
        )
        forms = [infer_form(t) for t in q.text] if f.form == "mixed" else [f.form] * len(q)
        frames.append(
            pd.DataFrame(
                {
                    "published_question_id": q.question_id.astype(str),
                    "source_file": f.path,
                    "task": task,
                    "level": f.level,
                    "form": forms,
                    "image": q.image,
                    "uri": [storage.join(image_root, p) for p in q.image],
                    "image_id": dataset + "/" + q.image,
                    "text": q.text,
                    "class": q["class"],
                    "category": q.category,
                    "options": [
                        json.dumps(options_of(t) if form == "choice" else [])
                        for t, form in zip(q.text, forms, strict=True)
                    ],
                    "template": -1,
                    "subclass": [
                        true_class(k, c, im) for k, c, im in zip(q["class"], q.category, q.image, strict=True)
                    ],
                    "superclass": dataset,
                    "simulated": False,
                }
            )
        )
    out = pd.concat(frames, ignore_index=True)
    out.insert(0, "rotation", 0)
    out.insert(0, "group_id", np.arange(len(out)))
    out.insert(0, "question_id", np.arange(1, len(out) + 1))
    return out


def questions_for(items: pd.DataFrame, config) -> pd.DataFrame:
    """The questions table of an FgbmkConfig: generated ones in every rotation, or the published files."""
    src = config.source
    if src.kind == "official":
        if not src.questions:
            return pd.DataFrame(columns=QUESTION_COLUMNS)
        return official_questions(src.questions, src.dataset_name, src.image_root or src.folder)
    from soco_pipeline.tasks.fgbmk.embedded import hierarchy

    h = hierarchy(subclasses=sorted(items.subclass.unique()))
    return circular(build_questions(items, h, config.questions, config.seed), config.questions)
