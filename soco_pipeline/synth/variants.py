"""Categories as parametric variants of their family (seeded by the name), and per-instance jitter."""

from __future__ import annotations

import zlib

import numpy as np
import yaml

from ..taxonomy import ASSETS_DIR, Taxonomy, load_taxonomy
from .families import BUILDERS, FAMILY_PARAMS
from .model import Builder, ObjectModel

# Recognisable traits per category, the palettes and the families' fur colours.
VARIANTS = yaml.safe_load((ASSETS_DIR / "synth_variants.yaml").read_text())
TRAITS: dict[str, dict] = VARIANTS["traits"]
PALETTES: dict[str, list[list[int]]] = VARIANTS["palettes"]
FAMILY_FUR: dict[str, list[list[int]]] = VARIANTS["family_fur"]
HAND_SHAPE_JITTER = 0.06


def category_params(category: str, taxonomy: Taxonomy | None = None) -> tuple[str, dict[str, float], dict]:
    """(family, shape parameters, traits) of a category: family defaults, name-derived perturbation, traits."""
    tax = taxonomy or load_taxonomy()
    family = tax.family(category)
    if family not in FAMILY_PARAMS:
        raise ValueError(
            f"category {category!r} has family {family!r}, which has no builder; use one of "
            f"{sorted(FAMILY_PARAMS)} as its `family` in assets/taxonomy.yaml"
        )
    params = dict(FAMILY_PARAMS[family])
    traits = dict(TRAITS.get(category, {}))
    if family != category:
        rng = np.random.default_rng([0x50C0, zlib.crc32(category.encode())])
        for k in sorted(params):
            if k in ("trunk", "horns", "tusks", "ear_up", "lid", "bulge", "spout_len") or params[k] == 0:
                continue
            params[k] *= float(np.exp(rng.uniform(-0.15, 0.15)))
        if "color" not in traits:
            sup = tax.supercategory(category)
            traits["color"] = (
                tuple(int(c) for c in rng.integers(30, 230, 3))
                if sup != "animals"
                else PALETTES["animals"][int(rng.integers(len(PALETTES["animals"])))]
            )
    for k, m in traits.get("x", {}).items():
        params[k] = m if k in ("trunk", "tusks", "ear_up") and m <= 0 else params[k] * m
    return family, params, traits


def _rgb(c) -> np.ndarray:
    return np.asarray(c, dtype=float) / 255.0


def sample_colors(category: str, family: str, traits: dict, sup: str, rng: np.random.Generator) -> dict:
    """Colours of one instance: the category's colour (or a palette pick) with jitter."""
    if "color" in traits:
        main = _rgb(traits["color"])
    else:
        opts = FAMILY_FUR[family] if family in FAMILY_FUR else PALETTES[sup]
        main = _rgb(opts[int(rng.integers(len(opts)))])
    main = np.clip(main * rng.uniform(0.85, 1.12) + rng.normal(0, 0.03, 3), 0.02, 1.0)
    second = np.clip(1.0 - main * 0.7 + rng.normal(0, 0.05, 3), 0.05, 1.0)
    col = {
        "main": main,
        "second": second,
        "rim": np.array([0.7, 0.7, 0.72]) * rng.uniform(0.7, 1.1),
        "accent": _rgb(traits.get("accent", (200, 30, 30))),
        "handle": main * rng.uniform(0.7, 1.0),
        "band": tuple(sorted(rng.uniform(-0.6, 0.8, 2))) if rng.random() < 0.6 else (2.0, 2.0),
        "leg": main * 0.8 if rng.random() < 0.6 else np.array([0.12, 0.12, 0.13]),
    }
    if sup == "animals":
        dark = main * 0.45
        col.update(
            paw=_rgb(traits["paw"]) if "paw" in traits else dark,
            muzzle=main * rng.uniform(0.7, 1.0),
            ear=_rgb(traits["ear"]) if "ear" in traits else main * 0.85,
            tail=main * 0.9,
        )
        pattern = traits.get("pattern")
        if pattern is None and family == "cow" and main.mean() > 0.7 and rng.random() < 0.7:
            pattern = ("spots", (25, 25, 25))
        if pattern is None:
            col["texture"] = (
                "noise",
                {"color2": main * 0.75, "freq": 9.0 / max(float(rng.uniform(0.8, 1.2)), 1e-3)},
            )
        else:
            kind, c2 = pattern
            col["texture"] = (
                kind,
                {
                    "color2": _rgb(c2),
                    "freq": 14.0 if kind == "stripes" else 9.0,
                    "axis": 0,
                    "duty": 0.25,
                    "level": 0.2,
                },
            )
    return col


def build_instance(category: str, rng: np.random.Generator, taxonomy: Taxonomy | None = None) -> ObjectModel:
    """Build one instance of a category: its family's builder with jittered parameters and colours."""
    tax = taxonomy or load_taxonomy()
    family, params, traits = category_params(category, tax)
    sup = tax.supercategory(category)
    p = {
        k: (
            v * float(np.exp(rng.normal(0, HAND_SHAPE_JITTER)))
            if k not in ("trunk", "horns", "tusks", "ear_up", "lid", "bulge")
            else v
        )
        for k, v in sorted(params.items())
    }
    col = sample_colors(category, family, traits, sup, rng)
    want = set(tax.category_keypoints(category))
    b = Builder()
    BUILDERS[family](b, p, col, want)
    return b.build(category, tax.category_keypoints(category), p)
