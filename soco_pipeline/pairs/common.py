"""What every pair stage shares: table columns, the pair config, taxonomy helpers and input checks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd
import pyarrow as pa

from soco_pipeline.taxonomy import Taxonomy

LEVEL_NAMES = ("intra", "cross")
KIND_NAMES = ("soc", "cc")
PAIR_COLUMNS = [
    "pair_id",
    "level",
    "pair_group",
    "src_image",
    "trg_image",
    "src_category",
    "trg_category",
    "ancestor",
    "evaluated",
]
CORRESPONDENCE_COLUMNS = [
    "pair_id",
    "level",
    "kind",
    "src_keypoint",
    "trg_keypoint",
    "concept",
    "geo",
    "n_candidates",
]
MAX_SHOWN = 5  # offending rows quoted in an error message

# RNG streams derived from the one configured seed, so that each random choice is independent.
STREAM_CROSS_SOURCES = 1
STREAM_EVALUATION = 2

Quota = int | Literal["all"]


@dataclass(frozen=True)
class PairConfig:
    """How pairs are drawn: seed, evaluated pairs per group (int or "all"), sources per (target, category)."""

    seed: int = 0
    intra_per_category: Quota = 200
    cross_per_category: Quota = 200
    cross_sources_per_category: Quota = 1

    def __post_init__(self) -> None:
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < 0:
            raise ValueError(f"PairConfig.seed must be a non-negative int, got {self.seed!r}")
        for name in ("intra_per_category", "cross_per_category", "cross_sources_per_category"):
            v = getattr(self, name)
            if v != "all" and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
                raise ValueError(f"PairConfig.{name} must be a non-negative int or 'all', got {v!r}")


def stream_rng(seed: int, stream: int) -> np.random.Generator:
    """The generator of one random stream of a seeded pair sampling (each stream independent of the others)."""
    return np.random.default_rng([seed, stream])


def quota_value(v: Quota) -> float:
    """A quota as a number (`all` = no limit)."""
    return np.inf if v == "all" else float(v)


def require_columns(df: pd.DataFrame, columns: list[str], table: str) -> None:
    """ValueError naming the missing columns when `df` lacks any of `columns`."""
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"table {table!r} lacks columns {missing}; it must follow the canonical schema")


def table_columns(table: pa.Table | pd.DataFrame, name: str) -> list[str]:
    """The column names of an Arrow table or a DataFrame; TypeError for anything else."""
    if not isinstance(table, pa.Table | pd.DataFrame):
        raise TypeError(f"{name} must be an Arrow Table or a DataFrame, not {type(table)}")
    return table.column_names if isinstance(table, pa.Table) else list(table.columns)


def show_rows(df: pd.DataFrame) -> str:
    """The first MAX_SHOWN rows of `df` as text, for error messages."""
    return df.head(MAX_SHOWN).to_string(index=False)


def related_category_pairs(taxonomy: Taxonomy, categories: list[str] | None = None) -> pd.DataFrame:
    """Ordered (src_category, trg_category, ancestor) of distinct categories sharing keypoints."""
    cats = list(categories) if categories is not None else taxonomy.categories
    rows = []
    for a in cats:
        for b in cats:
            if a == b:
                continue
            lca = taxonomy.lowest_common_ancestor(a, b)
            if lca is not None and taxonomy.inherited_keypoints(lca):
                rows.append((a, b, lca))
    return pd.DataFrame(rows, columns=["src_category", "trg_category", "ancestor"])


def allowed_keypoints(taxonomy: Taxonomy, combos: pd.DataFrame) -> pd.DataFrame:
    """(combo, keypoint) rows: the keypoints shared by each (src_category, trg_category) of `combos`."""
    by_node: dict[str | None, list[str]] = {}
    combo_ids, names = [], []
    for i, (a, b) in enumerate(zip(combos.src_category, combos.trg_category, strict=True)):
        lca = taxonomy.lowest_common_ancestor(a, b)
        if lca not in by_node:
            by_node[lca] = taxonomy.inherited_keypoints(lca) if lca is not None else []
        kps = by_node[lca]
        combo_ids.extend([i] * len(kps))
        names.extend(kps)
    return pd.DataFrame({"combo": np.asarray(combo_ids, dtype=np.int32), "keypoint": names})


def check_images(images: pd.DataFrame, taxonomy: Taxonomy) -> pd.DataFrame:
    """The image set's (image_id, category) rows, checked: unique ids, categories in the taxonomy."""
    require_columns(images, ["image_id", "category"], "image_set")
    imgs = images[["image_id", "category"]].astype(str)
    dup = imgs[imgs.image_id.duplicated(keep=False)]
    if len(dup):
        raise ValueError(f"image_set has duplicate image ids; keep one row per image:\n{show_rows(dup)}")
    unknown = imgs[~imgs.category.isin(taxonomy.categories)]
    if len(unknown):
        raise ValueError(
            f"image_set has categories missing from the taxonomy; fix the category or add it to "
            f"{taxonomy.source}:\n{show_rows(unknown)}"
        )
    return imgs.sort_values(["category", "image_id"], ignore_index=True)


def visible_keypoints(keypoints: pd.DataFrame, taxonomy: Taxonomy) -> pd.DataFrame:
    """The visible keypoints (image_id, keypoint), checked against the taxonomy."""
    require_columns(keypoints, ["image_id", "category", "keypoint", "visible"], "keypoints")
    vis = keypoints.loc[keypoints.visible.astype(bool), ["image_id", "category", "keypoint"]]
    vis = vis.astype(str)
    table = taxonomy.to_table()[["category", "keypoint"]]
    known = vis.merge(table, on=["category", "keypoint"], how="left", indicator=True)["_merge"] == "both"
    bad = vis[~known.to_numpy()]
    if len(bad):
        raise ValueError(
            "keypoints has visible rows whose keypoint is not a keypoint of the row's category in the "
            f"taxonomy; fix the keypoint name or the category:\n{show_rows(bad)}"
        )
    dup = vis[vis.duplicated(["image_id", "keypoint"], keep=False)]
    if len(dup):
        raise ValueError(
            f"keypoints has duplicate (image_id, keypoint) rows; aggregate them first:\n{show_rows(dup)}"
        )
    if "concept" in keypoints.columns:
        given = keypoints.loc[keypoints.visible.astype(bool), "concept"].astype(str).to_numpy()
        expected = vis.keypoint.map({k: d.concept for k, d in taxonomy.keypoints.items()}).to_numpy()
        wrong = vis.assign(concept=given, taxonomy_concept=expected)[given != expected]
        if len(wrong):
            raise ValueError(
                "keypoints has rows whose concept differs from the taxonomy's concept of the keypoint; "
                f"rebuild the keypoints table against {taxonomy.source}:\n{show_rows(wrong)}"
            )
    return vis[["image_id", "keypoint"]]


def column_codes(values: pa.ChunkedArray | pa.Array | pd.Series, index: pd.Index) -> np.ndarray:
    """Positions of a string column's values in `index` (-1 where absent); dictionary-encoded and categorical
    columns are mapped through their small dictionaries, so millions of rows cost one integer gather."""
    if isinstance(values, pa.Array):
        values = pa.chunked_array([values])
    if isinstance(values, pa.ChunkedArray):
        if pa.types.is_dictionary(values.type):
            parts = [
                index.get_indexer(c.dictionary.to_pandas().astype(str))[
                    c.indices.to_numpy(zero_copy_only=False)
                ]
                for c in values.chunks
            ]
            return np.concatenate(parts) if parts else np.array([], dtype=np.int64)
        values = values.to_pandas()
    if isinstance(values.dtype, pd.CategoricalDtype):
        codes = values.cat.codes.to_numpy()
        mapped = index.get_indexer(values.cat.categories.astype(str))
        return (
            np.where(codes >= 0, mapped[np.maximum(codes, 0)], -1) if len(mapped) else np.full(len(codes), -1)
        )
    return index.get_indexer(values.astype(str))
