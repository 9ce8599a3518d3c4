"""Keypoint aggregation: annotator clicks -> one keypoint row per (image, keypoint of its category).

Visible iff a strict majority marked it so; a visible click c_i is an outlier when ||c_i - m|| > max(k *
1.4826 * median_i ||c_i - m||, floor * L) (m the coordinate-wise median, L = max(width, height), k and floor
from `SourceConfig`: a tight pair of clicks does not reject an ordinary third). Kept clicks give x, y (their
median), n_annotators (their count; invisible: the annotators who labelled it) and spread = sqrt((s_x^2 +
s_y^2) / 2) / L (ddof=1; NaN under two or when invisible)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from soco_pipeline.schemas import KeypointSchema, RawClickSchema, validate
from soco_pipeline.sources.config import SourceConfig
from soco_pipeline.taxonomy import Taxonomy

KEYPOINT_COLUMNS = [
    "image_id",
    "category",
    "keypoint",
    "concept",
    "x",
    "y",
    "visible",
    "n_annotators",
    "spread",
]
MAD_TO_SIGMA = 1.4826


def _fail(df: pd.DataFrame, mask, problem: str, fix: str, cols: list[str]) -> None:
    """Raise ValueError listing (up to 5) offending rows when `mask` has any True."""
    mask = np.asarray(mask, dtype=bool)
    if not mask.any():
        return
    bad = df.loc[mask, [c for c in cols if c in df.columns]]
    shown = "; ".join(", ".join(f"{c}={v!r}" for c, v in r.items()) for r in bad.head(5).to_dict("records"))
    more = f" (and {mask.sum() - 5} more)" if mask.sum() > 5 else ""
    raise ValueError(f"{problem}: {shown}{more}. Fix: {fix}")


def _check_image_set(image_set: pd.DataFrame) -> None:
    dup = image_set["image_id"].duplicated(keep=False)
    _fail(
        image_set, dup, "duplicate image ids in image_set", "make image ids unique", ["image_id", "category"]
    )


def _category_keypoints(taxonomy: Taxonomy, categories) -> pd.DataFrame:
    cats = sorted(set(categories))
    rows = [(c, k, taxonomy.keypoints[k].concept) for c in cats for k in taxonomy.category_keypoints(c)]
    return pd.DataFrame(rows, columns=["category", "keypoint", "concept"])


def _with_concepts(
    df: pd.DataFrame,
    allowed: pd.DataFrame,
    key: list[str],
    unknown: tuple[str, str],
    duplicate: tuple[str, str],
) -> pd.DataFrame:
    """`df` with each keypoint's concept; `unknown` and `duplicate` (problem, fix) name the bad rows."""
    df = df.merge(allowed, on=["category", "keypoint"], how="left")
    _fail(df, df["concept"].isna(), *unknown, [*key, "category"])
    _fail(df, df.duplicated(key, keep=False), *duplicate, key)
    return df


def _check_bounds(df: pd.DataFrame, what: str, cols: list[str]) -> None:
    vis = df["visible"].to_numpy(dtype=bool)
    _fail(
        df,
        vis & (df["x"].isna() | df["y"].isna()).to_numpy(),
        f"{what} marked visible with NaN coordinates",
        "give x and y for visible points or mark them invisible",
        cols,
    )
    out = (df["x"] < 0) | (df["x"] > df["width"]) | (df["y"] < 0) | (df["y"] > df["height"])
    _fail(
        df,
        vis & out.to_numpy(),
        f"{what} outside the image bounds [0, width] x [0, height]",
        "check the coordinates are original-image pixels of this image",
        [*cols, "x", "y", "width", "height"],
    )


def aggregate_clicks(
    clicks: pd.DataFrame,
    image_set: pd.DataFrame,
    taxonomy: Taxonomy,
    cfg: SourceConfig,
    rejected: pd.DataFrame | None = None,
) -> tuple[pd.DataFrame, dict]:
    """KeypointSchema rows (one per keypoint of each ImageNet3D or clicked image's category; invisible: NaN
    x/y) plus statistics; clicks on `rejected` images are ignored and counted; bad rows raise ValueError."""
    _check_image_set(image_set)
    clicks = validate(clicks, RawClickSchema, "clicks")
    n_clicks_total = len(clicks)
    on_rejected = np.zeros(len(clicks), dtype=bool)
    if rejected is not None and len(rejected):
        on_rejected = (
            clicks["image_id"].isin(rejected["image_id"]).to_numpy()
            & ~clicks["image_id"].isin(image_set["image_id"]).to_numpy()
        )
    clicks = clicks[~on_rejected]
    ids = ["image_id", "keypoint", "annotator"]

    info = image_set[["image_id", "category", "source", "width", "height"]]
    c = clicks.merge(info, on="image_id", how="left", validate="many_to_one")
    _fail(
        c,
        c["category"].isna(),
        "clicks on images not in image_set",
        "drop these clicks or add the images to the image set",
        ids,
    )
    allowed = _category_keypoints(taxonomy, info["category"])
    c = _with_concepts(
        c,
        allowed,
        ids,
        (
            "clicks for keypoints not in the image's category",
            "use keypoint names of taxonomy.category_keypoints(category)",
        ),
        ("duplicate (image, keypoint, annotator) click rows", "keep one row per annotator and keypoint"),
    )
    _check_bounds(c, "clicks", ids)

    key = ["image_id", "keypoint"]
    votes = c.groupby(key, sort=False)["visible"].agg(n_votes="size", n_visible="sum").reset_index()
    votes["majority"] = 2 * votes["n_visible"] > votes["n_votes"]

    v = c[c["visible"]].merge(votes.loc[votes["majority"], key], on=key)
    long_side = np.maximum(v["width"], v["height"]).astype(float)
    g = v.groupby(key, sort=False)
    d = np.hypot(v["x"] - g["x"].transform("median"), v["y"] - g["y"].transform("median"))
    scale = d.groupby([v["image_id"], v["keypoint"]], sort=False).transform("median")
    threshold = np.maximum(cfg.outlier_k * MAD_TO_SIGMA * scale, cfg.outlier_floor * long_side)
    keep = (d <= threshold).to_numpy()
    kept = v[keep].assign(long_side=long_side[keep])
    agg = (
        kept.groupby(key, sort=False)
        .agg(
            x=("x", "median"),
            y=("y", "median"),
            n_kept=("x", "size"),
            sx=("x", "std"),
            sy=("y", "std"),
            long_side=("long_side", "first"),
        )
        .reset_index()
    )
    agg["spread"] = np.sqrt((agg["sx"] ** 2 + agg["sy"] ** 2) / 2.0) / agg["long_side"]

    clicked = set(c["image_id"].unique())
    covered = info[(info["source"] == "imagenet3d") | info["image_id"].isin(clicked)]
    no_clicks = ~covered["image_id"].isin(clicked)
    _fail(
        covered,
        no_clicks,
        "ImageNet3D images in image_set without any click",
        "add their annotator clicks or leave them out of the image set",
        ["image_id", "category"],
    )

    grid = covered[["image_id", "category"]].merge(allowed, on="category")
    out = grid.merge(votes, on=key, how="left").merge(
        agg[[*key, "x", "y", "n_kept", "spread"]], on=key, how="left"
    )
    out["visible"] = out["majority"].astype("boolean").fillna(False).astype(bool) & out["n_kept"].notna()
    out["n_annotators"] = np.where(out["visible"], out["n_kept"], out["n_votes"]).astype(float)
    out["n_annotators"] = out["n_annotators"].fillna(0).astype(int)
    out.loc[~out["visible"], ["x", "y", "spread"]] = np.nan
    keypoints = validate(out[KEYPOINT_COLUMNS], KeypointSchema, "keypoints").reset_index(drop=True)

    spreads = keypoints["spread"].dropna()
    stats = {
        "n_images": int(len(covered)),
        "n_keypoints": int(len(keypoints)),
        "n_visible": int(keypoints["visible"].sum()),
        "n_clicks": int(n_clicks_total),
        "n_clicks_on_rejected_images": int(on_rejected.sum()),
        "n_visible_clicks_considered": int(len(v)),
        "outliers_dropped": int((~keep).sum()),
        "outlier_rate": float((~keep).mean()) if len(v) else 0.0,
        "visibility_disagreements": int(
            ((votes["n_visible"] > 0) & (votes["n_visible"] < votes["n_votes"])).sum()
        ),
        "keypoints_without_clicks": int(out["n_votes"].isna().sum()),
        "median_spread": float(spreads.median()) if len(spreads) else float("nan"),
        "mean_spread": float(spreads.mean()) if len(spreads) else float("nan"),
        "p90_spread": float(spreads.quantile(0.9)) if len(spreads) else float("nan"),
    }
    return keypoints, stats


def animal_keypoints(raw: pd.DataFrame, image_set: pd.DataFrame, taxonomy: Taxonomy) -> pd.DataFrame:
    """KeypointSchema rows of `image_set`'s Animal3D images (n_annotators 1, spread NaN); bad rows raise."""
    _check_image_set(image_set)
    info = image_set.loc[image_set["source"] == "animal3d", ["image_id", "category", "width", "height"]]
    r = raw[["image_id", "keypoint", "x", "y", "visible"]].merge(info, on="image_id", how="inner")
    key = ["image_id", "keypoint"]
    allowed = _category_keypoints(taxonomy, info["category"])
    r = _with_concepts(
        r,
        allowed,
        key,
        (
            "Animal3D keypoints not in the image's category",
            "map Animal3D keypoints with sources.animal3d.animal_keypoint_names",
        ),
        ("duplicate Animal3D keypoint rows", "one row per image and keypoint"),
    )
    r["visible"] = r["visible"].astype(bool)
    _check_bounds(r, "Animal3D keypoints", key)
    grid = info[["image_id", "category"]].merge(allowed, on="category")
    out = grid.merge(r[[*key, "x", "y", "visible"]], on=key, how="left")
    missing_img = ~info["image_id"].isin(r["image_id"])
    _fail(
        info,
        missing_img,
        "Animal3D images in image_set without keypoints",
        "read keypoints and images from the same annotations.json",
        ["image_id", "category"],
    )
    _fail(
        out,
        out["visible"].isna(),
        "Animal3D images lacking some of their category's keypoints",
        "give all 26 keypoints (invisible ones with visibility 0)",
        key,
    )
    out["visible"] = out["visible"].astype(bool)
    out.loc[~out["visible"], ["x", "y"]] = np.nan
    out["n_annotators"] = 1
    out["spread"] = np.nan
    return validate(out[KEYPOINT_COLUMNS], KeypointSchema, "animal keypoints").reset_index(drop=True)


def aggregate_keypoints(
    raw: pd.DataFrame, image_set: pd.DataFrame, taxonomy: Taxonomy, cfg: SourceConfig
) -> tuple[pd.DataFrame, dict]:
    """The `keypoints` table and statistics from `read_raw_keypoints`'s rows inside `image_set`."""
    _check_image_set(image_set)
    inside = raw["image_id"].isin(image_set["image_id"]).to_numpy()
    r = raw[inside]
    origin = r["origin"]
    unknown = sorted(set(origin) - {"clicks", "animal3d", "soco"})
    if unknown:
        raise ValueError(f"raw keypoints with unknown origin {unknown}; use sources.read_raw_keypoints")
    parts, stats = [], {}
    clicks = r[origin == "clicks"]
    if len(clicks) or (image_set["source"] == "imagenet3d").any():
        kp, stats = aggregate_clicks(
            clicks[["image_id", "keypoint", "annotator", "x", "y", "visible"]], image_set, taxonomy, cfg
        )
        parts.append(kp)
    if (origin == "animal3d").any() or (image_set["source"] == "animal3d").any():
        parts.append(animal_keypoints(r[origin == "animal3d"], image_set, taxonomy))
    soco = r[origin == "soco"]
    if len(soco):
        cats = image_set.set_index("image_id")["category"]
        parts.append(soco.assign(category=soco["image_id"].map(cats))[KEYPOINT_COLUMNS])
    if not parts:
        raise ValueError("no keypoints for the images of image_set; check the keypoint sources")
    out = validate(pd.concat(parts, ignore_index=True), KeypointSchema, "keypoints")
    return out, {
        **stats,
        "raw_rows_outside_image_set": int((~inside).sum()),
        "n_keypoints_total": int(len(out)),
        "n_visible_total": int(out["visible"].sum()),
    }
