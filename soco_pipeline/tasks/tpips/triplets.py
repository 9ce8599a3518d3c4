"""The odd-one-out triplet generator: three renders that differ in several aspects at once, by controlled
amounts; each varied aspect gets its own odd image, so aspects disagree. Seeded per triplet by (seed, t)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from .aspects import N_PHOTOS, OBJECT_ASPECTS, VALUE_COLUMNS
from .config import TpipsConfig

IMAGE_PREFIX = "tpips/"


@dataclass
class TripletSet:
    """Image value records (one row per image) and triplets (triplet_id, image ids, varied aspects, split)."""

    images: pd.DataFrame
    triplets: pd.DataFrame


def base_values(rng: np.random.Generator, cfg: TpipsConfig) -> dict:
    """A random value record (every aspect drawn from its range)."""
    sc = cfg.scene
    lo, hi = sc.size_range
    return {
        "hue": float(rng.uniform(0, 1)),
        "azimuth_deg": float(rng.uniform(0, 360)),
        "background_id": int(rng.integers(sc.n_backgrounds)),
        "light_dir_deg": float(rng.uniform(0, 360)),
        "warmth": float(rng.uniform(-1, 1)),
        "area": float(np.exp(rng.uniform(np.log(lo), np.log(hi)))),
        "shape": str(sc.shapes[int(rng.integers(len(sc.shapes)))]),
        "count": int(sc.counts[int(rng.integers(len(sc.counts)))]),
        "texture": str(sc.textures[int(rng.integers(len(sc.textures)))]),
        "blur_sigma": 0.0,
        "jpeg_quality": 0,
        "transfer": 0.0,
    }


def _other(options: list, current, rng: np.random.Generator):
    rest = [o for o in options if o != current]
    return rest[int(rng.integers(len(rest)))]


def perturb(v: dict, aspect: str, delta: float, rng: np.random.Generator, cfg: TpipsConfig) -> dict:
    """A copy of `v` whose `aspect` moved by about `delta` of that aspect's distance scale (categorical: changed)."""
    out = dict(v)
    sign = 1.0 if rng.random() < 0.5 else -1.0
    sc = cfg.scene
    if aspect == "colour":
        out["hue"] = float((v["hue"] + sign * delta / 2.0) % 1.0)
    elif aspect == "pose":
        out["azimuth_deg"] = float((v["azimuth_deg"] + sign * delta * 180.0) % 360.0)
    elif aspect == "background":
        # same photograph, other crop (0.5) for small deltas; another photograph otherwise
        b = int(v["background_id"])
        same_photo = [i for i in range(sc.n_backgrounds) if i != b and i % N_PHOTOS == b % N_PHOTOS]
        other_photo = [i for i in range(sc.n_backgrounds) if i % N_PHOTOS != b % N_PHOTOS]
        pool = same_photo if (delta < 0.6 and same_photo) else other_photo
        out["background_id"] = int(pool[int(rng.integers(len(pool)))])
    elif aspect == "lighting":
        out["light_dir_deg"] = float((v["light_dir_deg"] + sign * delta * 180.0) % 360.0)
        w = v["warmth"] + sign * delta * 1.0
        out["warmth"] = float(np.clip(w if -1 <= w <= 1 else v["warmth"] - sign * delta, -1, 1))
    elif aspect == "size":
        lo, hi = sc.size_range
        span = np.log(hi / lo) * delta
        la = np.log(v["area"]) + sign * span
        if not np.log(lo) <= la <= np.log(hi):
            la = np.log(v["area"]) - sign * span
        out["area"] = float(np.exp(np.clip(la, np.log(lo), np.log(hi))))
    elif aspect == "shape":
        out["shape"] = str(_other(sc.shapes, v["shape"], rng))
    elif aspect == "texture":
        out["texture"] = str(_other(sc.textures, v["texture"], rng))
    elif aspect == "count":
        far = [c for c in sc.counts if abs(c - v["count"]) >= (2 if delta > 0.7 else 1)]
        out["count"] = int(far[int(rng.integers(len(far)))] if far else _other(sc.counts, v["count"], rng))
    else:
        raise ValueError(f"aspect {aspect!r} cannot be varied; use one of {OBJECT_ASPECTS}")
    return out


def _split_names(n: int, cfg: TpipsConfig, rng: np.random.Generator) -> np.ndarray:
    names = list(cfg.triplets.splits)
    shares = np.array([cfg.triplets.splits[k] for k in names], float)
    counts = np.floor(shares / shares.sum() * n).astype(int)
    counts[0] += n - counts.sum()
    labels = np.repeat(names, counts)
    return labels[rng.permutation(n)]


def generate_triplets(cfg: TpipsConfig, n: int | None = None, seed: int | None = None) -> TripletSet:
    """Value records of 3n images and the n triplets over them (nothing rendered yet; see `render_images`)."""
    tc = cfg.triplets
    n = tc.n if n is None else int(n)
    seed = cfg.seed if seed is None else int(seed)
    if n < 1:
        raise ValueError(f"triplets.n must be >= 1, got {n}")
    rows, trip = [], []
    for t in range(n):
        rng = np.random.default_rng([seed, 0x7919, t])
        v0 = base_values(rng, cfg)
        k = int(rng.integers(tc.vary_min, tc.vary_max + 1))
        varied = [OBJECT_ASPECTS[i] for i in rng.choice(len(OBJECT_ASPECTS), size=k, replace=False)]
        start = int(rng.integers(3))
        vals = [dict(v0), dict(v0), dict(v0)]
        odd_of = {}
        for j, a in enumerate(varied):
            odd = (start + j) % 3
            odd_of[a] = odd
            delta = float(rng.uniform(tc.min_delta, tc.max_delta))
            moved = perturb(vals[odd], a, delta, rng, cfg)
            vals[odd] = {**vals[odd], **{c: moved[c] for c in _columns_of(a)}}
            if rng.random() < tc.graded_fraction:
                pair = [i for i in range(3) if i != odd]
                m = pair[int(rng.integers(2))]
                small = perturb(vals[m], a, float(rng.uniform(0.03, tc.graded_delta)), rng, cfg)
                if a not in ("shape", "texture", "count", "background"):  # categorical ones stay equal
                    vals[m] = {**vals[m], **{c: small[c] for c in _columns_of(a)}}
        ids = []
        for i in range(3):
            image_id = f"{IMAGE_PREFIX}s{seed}/t{t:05d}_{i}"
            rows.append({"image_id": image_id, **vals[i]})
            ids.append(image_id)
        trip.append(
            {
                "triplet_id": f"{IMAGE_PREFIX}s{seed}/t{t:05d}",
                "image_0": ids[0],
                "image_1": ids[1],
                "image_2": ids[2],
                "varied": ",".join(varied),
                "odd_by_construction": ",".join(f"{a}:{odd_of[a]}" for a in varied),
            }
        )
    triplets = pd.DataFrame(trip)
    triplets["split"] = _split_names(n, cfg, np.random.default_rng([seed, 0x5917]))
    images = pd.DataFrame(rows).astype(VALUE_COLUMNS)
    return TripletSet(images=images, triplets=triplets)


def _columns_of(aspect: str) -> tuple[str, ...]:
    renamed = {"colour": "hue", "pose": "azimuth_deg", "background": "background_id", "size": "area"}
    return ("light_dir_deg", "warmth") if aspect == "lighting" else (renamed.get(aspect, aspect),)


def value_records(images: pd.DataFrame, role: str) -> pd.DataFrame:
    """The value records (image_id and VALUE_COLUMNS) of the `tpips_images` rows of one `role`, read back."""
    rows = images[images["role"] == role]
    return rows[["image_id", *VALUE_COLUMNS]].astype(VALUE_COLUMNS).reset_index(drop=True)


def triplet_set(images: pd.DataFrame, triplets: pd.DataFrame) -> TripletSet:
    """The TripletSet behind the `tpips_images` and `tpips_triplets` tables (no triplet regenerated)."""
    return TripletSet(images=value_records(images, "triplet"), triplets=triplets.reset_index(drop=True))
