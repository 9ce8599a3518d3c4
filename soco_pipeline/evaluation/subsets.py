"""Deterministic evaluation subsets (docs/results.md): `limit` keeps the smallest seeded sort keys per pair
group (a larger limit keeps a smaller one's pairs), or explicit id lists."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field


class SubsetError(ValueError):
    """A subset rule names ids that are not in the sample; the message says which."""


class SubsetRule(BaseModel):
    """Which part of the evaluated sample a run scores. Empty = the full sample."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    limit: int | None = Field(default=None, ge=1, description="pairs per pair group (category)")
    pair_ids: tuple[str, ...] = Field(default=(), description="explicit pair ids (intersected with limit)")
    items_per_setting: int | None = Field(default=None, ge=1, description="LVLM item groups per setting")
    item_ids: tuple[int, ...] = Field(default=(), description="explicit LVLM item g_index values")
    seed: int = 0

    @property
    def is_full(self) -> bool:
        """True when the rule keeps everything."""
        return (
            self.limit is None and not self.pair_ids and self.items_per_setting is None and not self.item_ids
        )

    def describe(self) -> str:
        """A short human form ('' for the full sample), e.g. 'limit=5/category' or '3 pair ids'."""
        parts = []
        if self.limit is not None:
            parts.append(f"limit={self.limit}/category")
        if self.pair_ids:
            parts.append(f"{len(self.pair_ids)} pair ids")
        if self.items_per_setting is not None:
            parts.append(f"items={self.items_per_setting}/setting")
        if self.item_ids:
            parts.append(f"{len(self.item_ids)} item ids")
        return ", ".join(parts)

    def to_json(self) -> str:
        """The rule as canonical JSON ('' for the full sample): what tables and metadata store."""
        return "" if self.is_full else json.dumps(self.model_dump(mode="json"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | None) -> SubsetRule:
        """The inverse of `to_json` ('' or None: the full rule)."""
        return cls() if not text else cls.model_validate(json.loads(text))


def _order_key(ids: pd.Series, seed: int) -> np.ndarray:
    """A seeded pseudo-random sort key per id that does not depend on the other ids present."""
    return np.array(
        [hashlib.sha256(f"{seed}:{i}".encode()).hexdigest() for i in ids.astype(str)], dtype=object
    )


def apply_pair_subset(image_pairs: pd.DataFrame, rule: SubsetRule) -> pd.DataFrame:
    """`image_pairs` with `evaluated` narrowed to the rule's pairs (a copy; the input is untouched)."""
    if rule.limit is None and not rule.pair_ids:
        return image_pairs
    out = image_pairs.copy()
    keep = out["evaluated"].astype(bool).to_numpy()
    if rule.pair_ids:
        wanted = pd.Index(rule.pair_ids)
        unknown = wanted.difference(out.loc[keep, "pair_id"])
        if len(unknown):
            raise SubsetError(
                f"subset pair ids not in the evaluated sample: {list(unknown[:5])} ({len(unknown)} in all); "
                f'take ids from `soco sql "select pair_id from eval_pairs"`'
            )
        keep &= out["pair_id"].isin(wanted).to_numpy()
    if rule.limit is not None:
        key = pd.Series(_order_key(out["pair_id"], rule.seed), index=out.index).where(keep)
        rank = key.groupby(out["pair_group"]).rank(method="first")
        keep &= (rank <= rule.limit).to_numpy()
    out["evaluated"] = keep
    return out


def apply_item_subset(items: pd.DataFrame, rule: SubsetRule) -> pd.DataFrame:
    """LVLM item rows narrowed to the rule (every rotation of a kept item stays)."""
    if rule.items_per_setting is None and not rule.item_ids:
        return items
    keep = np.ones(len(items), dtype=bool)
    if rule.item_ids:
        unknown = sorted(set(rule.item_ids) - set(items["g_index"].astype(int)))
        if unknown:
            raise SubsetError(f"subset item ids (g_index) not among the LVLM items: {unknown[:5]}")
        keep &= items["g_index"].isin(rule.item_ids).to_numpy()
    if rule.items_per_setting is not None:
        groups = items.loc[keep, ["setting", "g_index"]].drop_duplicates()
        groups = groups.assign(
            key=_order_key(groups["setting"] + ":" + groups["g_index"].astype(str), rule.seed)
        )
        groups["rank"] = groups.groupby("setting")["key"].rank(method="first")
        chosen = groups[groups["rank"] <= rule.items_per_setting]
        keys = pd.MultiIndex.from_frame(chosen[["setting", "g_index"]])
        keep &= pd.MultiIndex.from_frame(items[["setting", "g_index"]]).isin(keys)
    return items[keep].reset_index(drop=True)


def mark_partial(board: pd.DataFrame, subsets: dict[str, str], name_column: str = "backbone") -> pd.DataFrame:
    """A leaderboard with `partial` and `subset` columns (`subsets`: name -> rule JSON)."""
    out = board.copy()
    rules = out[name_column].map(lambda n: SubsetRule.from_json(subsets.get(n, "")))
    out["partial"] = [not r.is_full for r in rules]
    out["subset"] = [r.describe() for r in rules]
    return out


def partial_display(board: pd.DataFrame, name_column: str = "backbone") -> pd.DataFrame:
    """The board for display: a partial row's name carries ' [partial: <rule>]'."""
    if "partial" not in board.columns:
        return board
    out = board.copy()
    out[name_column] = [
        f"{n} [partial: {s}]" if p else n
        for n, p, s in zip(out[name_column], out["partial"], out["subset"], strict=True)
    ]
    return out


def subsets_of(metrics: pd.DataFrame, name_column: str = "backbone") -> dict[str, str]:
    """{model: subset rule JSON} from metrics tables that carry a `subset` column ('' = full)."""
    if "subset" not in metrics.columns or metrics.empty:
        return {}
    return (
        metrics.groupby(name_column)["subset"]
        .agg(lambda s: str(s.dropna().iloc[0]) if s.notna().any() else "")
        .to_dict()
    )
