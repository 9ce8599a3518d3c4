"""Language descriptions of keypoints ("the center point of the front left wheel of a bus"): the templates of
assets/descriptions.yaml filled with the category and the keypoint's part, `where`, `at` and concept noun."""

from __future__ import annotations

import re
import string
from pathlib import Path

import pandas as pd
import yaml

from soco_pipeline.schemas import DescriptionSchema, validate
from soco_pipeline.taxonomy import ASSETS_DIR, Taxonomy

DEFAULT_TEMPLATES_PATH = ASSETS_DIR / "descriptions.yaml"
FIELDS = ("a_category", "category", "part", "where", "at", "noun")


def load_templates(path: str | Path | None = None) -> dict:
    """The description templates ({'at': {...}, 'concepts': {...}}) from YAML (default: assets)."""
    path = Path(path) if path is not None else DEFAULT_TEMPLATES_PATH
    with open(path) as f:
        doc = yaml.safe_load(f) or {}
    if not isinstance(doc, dict) or not isinstance(doc.get("at"), dict):
        raise ValueError(f"{path}: expected a mapping with an `at:` section of templates")
    return {
        "at": {str(k or ""): v for k, v in doc["at"].items()},
        "concepts": dict(doc.get("concepts") or {}),
    }


def with_article(noun_phrase: str) -> str:
    """'a bus', 'an ambulance' (vowel-initial words take 'an')."""
    return f"{'an' if noun_phrase[:1].lower() in 'aeiou' else 'a'} {noun_phrase}"


def template_for(kp: str, taxonomy: Taxonomy, templates: dict) -> str:
    """The description template of a keypoint: its own (a release's), its concept's or its `at` value's."""
    d = taxonomy.keypoints[kp]
    template = d.template or templates.get("concepts", {}).get(d.concept) or templates.get("at", {}).get(d.at)
    if not template:
        raise ValueError(
            f"no description template for keypoint {kp!r} (concept {d.concept!r}, at {d.at!r}); add one "
            f"under `at: {d.at!r}` or `concepts: {d.concept}` in assets/descriptions.yaml"
        )
    used = {f for _, f, _, _ in string.Formatter().parse(template) if f}
    unknown = used - set(FIELDS)
    if unknown:
        raise ValueError(
            f"description template {template!r} for keypoint {kp!r} uses unknown fields {sorted(unknown)}; "
            f"available: {list(FIELDS)}"
        )
    return template


def describe(category: str, keypoint: str, taxonomy: Taxonomy, templates: dict) -> str:
    """The description of one keypoint of a category."""
    d = taxonomy.keypoints[keypoint]
    cat = category.replace("_", " ").strip()  # 'police_car' -> 'police car'
    fields = {
        "a_category": with_article(cat),
        "category": cat,
        "part": d.part,
        "where": d.where,
        "at": d.at,
        "noun": str((taxonomy.concepts.get(d.concept) or {}).get("noun", d.concept.replace("_", " "))),
    }
    text = template_for(keypoint, taxonomy, templates).format_map(fields)
    return re.sub(r"\s+", " ", text).strip()


def build_descriptions(taxonomy: Taxonomy, templates: dict | None = None) -> pd.DataFrame:
    """One description per (category, keypoint) of the taxonomy (DescriptionSchema)."""
    templates = templates if templates is not None else load_templates()
    table = taxonomy.to_table()[["category", "keypoint", "concept"]]
    # ~2k short strings from the taxonomy (not data rows): a comprehension is the clear way here.
    keys = zip(table["category"], table["keypoint"], strict=True)
    table = table.assign(description=[describe(c, k, taxonomy, templates) for c, k in keys])
    return validate(table, DescriptionSchema, "descriptions").reset_index(drop=True)
