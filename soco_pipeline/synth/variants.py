"""Categories as parametric variants of their family, and per-instance variation.

A category's shape and colour perturbation is derived from its name alone (a CRC32 seed), so a
`zebra` always differs from a `horse` the same way; a few recognisable traits are spelled out in
TRAITS. Each image then jitters proportions and colours with its own RNG.
"""

from __future__ import annotations

import zlib

import numpy as np

from ..taxonomy import Taxonomy, load_taxonomy
from .families import BUILDERS, FAMILY_PARAMS
from .model import Builder, ObjectModel

# Recognisable traits: shape multipliers ("x"), fixed colours ("color", RGB 0-255) and fur patterns.
TRAITS: dict[str, dict] = {
    "police_car": {"color": (235, 235, 240), "accent": (20, 30, 120)},
    "taxi": {"color": (245, 200, 20)},
    "race_car": {
        "x": {"body_h": 0.7, "cabin_h": 0.65, "length": 1.05, "clearance": 0.6},
        "color": (200, 20, 20),
    },
    "limousine": {"x": {"length": 1.45, "cabin_len": 1.25, "wheelbase": 1.15}, "color": (20, 20, 22)},
    "jeep": {
        "x": {"body_h": 1.15, "clearance": 1.5, "wheel_r": 1.25, "cabin_h": 1.15},
        "color": (70, 90, 50),
    },
    "sports_car": {"x": {"body_h": 0.75, "cabin_h": 0.75, "cabin_len": 0.85}},
    "fire_engine": {"color": (200, 25, 20), "x": {"length": 0.85, "body_h": 0.9}},
    "school_bus": {"color": (250, 190, 20)},
    "minibus": {"x": {"length": 0.6, "body_h": 0.85}},
    "garbage_truck": {"color": (40, 120, 60)},
    "bulldozer": {"color": (240, 180, 20), "x": {"rear_r": 0.85, "front_r": 1.4}},
    "harvester": {"color": (40, 140, 50), "x": {"length": 1.2, "cabin_h": 1.2}},
    "lawn_mower": {"x": {"length": 0.6, "width": 0.7, "rear_r": 0.5, "front_r": 0.6, "cabin_h": 0.4}},
    "golf_cart": {"color": (240, 240, 235), "x": {"rear_r": 0.45, "front_r": 0.8}},
    "go_kart": {"x": {"length": 0.7, "rear_r": 0.4, "front_r": 0.6, "cabin_h": 0.3, "hood_h": 0.4}},
    "cup": {"x": {"height": 0.75}},
    "beer_mug": {"x": {"height": 1.4}, "color": (230, 180, 60)},
    "tankard": {"x": {"height": 1.3, "radius": 1.1}, "color": (140, 140, 150)},
    "saucepan": {"x": {"height": 0.55, "radius": 1.3, "handle_out": 2.5}, "color": (150, 150, 160)},
    "paint_bucket": {"x": {"height": 1.2, "radius": 1.1, "taper": 1.15}},
    "milk_can": {"x": {"height": 1.8, "taper": 0.75}, "color": (200, 200, 205)},
    "gravy_boat": {"x": {"height": 0.6, "spout_len": 0.8}},
    "watering_can": {"x": {"spout_len": 2.2, "spout_rise": 0.8}, "color": (40, 140, 70)},
    "samovar": {"x": {"height": 1.5}, "color": (200, 150, 60)},
    "armchair": {"x": {"seat_w": 1.5, "seat_d": 1.3, "seat_h": 0.9, "seat_t": 2.4, "leg_r": 1.6}},
    "bar_stool": {"x": {"seat_h": 1.35, "splay": 1.3}},
    "ottoman": {"x": {"seat_h": 0.65, "seat_t": 4.0, "leg_r": 1.8, "seat_w": 1.5, "seat_d": 1.5}},
    "desk": {"x": {"seat_d": 0.85, "seat_w": 0.8}},
    "coffee_table": {"x": {"seat_h": 0.55, "seat_d": 0.75}},
    "zebra": {"color": (240, 240, 240), "pattern": ("stripes", (15, 15, 15))},
    "tiger": {"color": (225, 130, 40), "pattern": ("stripes", (20, 15, 10))},
    "leopard": {"color": (215, 170, 90), "pattern": ("spots", (40, 30, 20))},
    "cheetah": {"color": (220, 180, 100), "pattern": ("spots", (30, 25, 20)), "x": {"body_w": 0.8}},
    "giraffe": {
        "color": (225, 175, 90),
        "pattern": ("spots", (120, 70, 30)),
        "x": {"neck_len": 2.4, "neck_angle": 1.35, "leg_len": 1.3, "tail_len": 0.7},
    },
    "panda": {"color": (240, 240, 240), "paw": (20, 20, 20), "ear": (20, 20, 20)},
    "polar_bear": {"color": (245, 243, 235)},
    "bear": {"color": (80, 50, 30)},
    "pig": {"color": (240, 170, 170), "x": {"leg_len": 0.55}},
    "sheep": {"color": (235, 230, 215), "pattern": ("noise", (190, 185, 170))},
    "fox": {"color": (215, 100, 30), "x": {"tail_len": 1.2, "tail_r": 1.6}},
    "wolf": {"color": (130, 130, 130)},
    "cat": {"x": {"body_len": 0.65, "leg_len": 0.7, "snout_len": 0.4, "tail_len": 1.3}},
    "lion": {"color": (205, 160, 90)},
    "camel": {"color": (200, 160, 100), "x": {"neck_angle": 0.75, "leg_len": 1.15}},
    "rhinoceros": {"color": (130, 125, 120), "x": {"trunk": 0.0, "tusks": 0.0, "ear_len": 0.25}},
    "hippopotamus": {
        "color": (120, 95, 110),
        "x": {"trunk": 0.0, "tusks": 0.0, "leg_len": 0.5, "ear_len": 0.15},
    },
    "mammoth": {"color": (110, 70, 40), "pattern": ("noise", (70, 45, 25))},
}
# Elephant-family animals without a trunk.
for _c in ("bear", "polar_bear", "panda", "tapir"):
    TRAITS.setdefault(_c, {}).setdefault("x", {}).update(
        {"trunk": 0.0 if _c != "tapir" else 0.3, "tusks": 0.0, "ear_len": 0.25, "ear_up": -1.0}
    )
for _c in ("bear", "polar_bear", "panda"):
    TRAITS[_c]["x"].update({"ear_up": 0.0, "ear_len": 0.3, "ear_w": 0.25, "snout_len": 2.0})
for _c in ("rhinoceros", "hippopotamus"):
    TRAITS[_c]["x"].update({"ear_up": 0.0, "ear_w": 0.2, "snout_len": 2.5, "snout_r": 1.8})

PALETTES: dict[str, list[tuple[int, int, int]]] = {
    "transportation": [
        (180, 30, 30),
        (30, 60, 150),
        (225, 225, 230),
        (30, 30, 35),
        (140, 145, 150),
        (40, 110, 60),
        (230, 190, 30),
        (120, 30, 120),
    ],
    "handheld": [
        (235, 235, 230),
        (30, 80, 160),
        (190, 40, 40),
        (60, 130, 80),
        (120, 80, 50),
        (40, 40, 40),
        (230, 180, 50),
    ],
    "furniture": [
        (150, 100, 60),
        (110, 70, 40),
        (200, 160, 110),
        (60, 40, 30),
        (220, 220, 215),
        (40, 40, 45),
    ],
    "animals": [(140, 90, 50), (60, 45, 35), (200, 160, 110), (230, 225, 215), (110, 110, 110), (35, 30, 30)],
}
FAMILY_FUR = {
    "elephant": [(125, 120, 118), (110, 105, 100)],
    "cow": [(240, 240, 235), (120, 70, 40), (30, 30, 30)],
}
HAND_SHAPE_JITTER = 0.06


def _name_rng(category: str) -> np.random.Generator:
    return np.random.default_rng([0x50C0, zlib.crc32(category.encode())])


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
        rng = _name_rng(category)
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
    elif family in FAMILY_FUR:
        opts = FAMILY_FUR[family]
        main = _rgb(opts[int(rng.integers(len(opts)))])
    else:
        opts = PALETTES[sup]
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
