"""Rules the OOO and 2AFC tables must satisfy (the blocking `schema` checks list the broken ones)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .afc import AFC_COLUMNS
from .config import TpipsConfig
from .ooo import OOO_COLUMNS


def _common(df: pd.DataFrame, columns: list[str], n_opts: int, cfg: TpipsConfig, name: str) -> list[str]:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        return [f"{name}: missing columns {missing}"]
    out = []
    if (df.aspect.astype(str).str.strip() == "").any():
        out.append(f"{name}: empty aspect in {int((df.aspect.astype(str).str.strip() == '').sum())} rows")
    unknown = sorted(set(df.aspect) - set(cfg.aspects))
    if unknown:
        out.append(f"{name}: aspects outside the vocabulary: {unknown}")
    votes = np.array(df.votes.tolist(), dtype=float).reshape(-1, n_opts) if len(df) else np.zeros((0, n_opts))
    total = votes.sum(1) + df.cannot_tell.to_numpy()
    bad = total != cfg.observer.n_annotators
    if bad.any():
        out.append(f"{name}: {int(bad.sum())} rows whose votes + cannot_tell != {cfg.observer.n_annotators}")
    if (df.cannot_tell.to_numpy() >= cfg.observer.prune_cannot_tell).any():
        out.append(f"{name}: rows with >= {cfg.observer.prune_cannot_tell} 'cannot tell' were not pruned")
    y = df[[f"y_{k}" for k in range(n_opts)]].to_numpy(float)
    if len(y) and not np.allclose(y.sum(1), 1.0):
        out.append(f"{name}: vote distributions y do not sum to 1")
    marker = cfg.source.votes_are
    if (df.judgements != marker).any():
        out.append(f"{name}: rows without the judgements={marker!r} marker of the {cfg.source.kind} source")
    return out


def ooo_problems(df: pd.DataFrame, cfg: TpipsConfig) -> list[str]:
    """Problems of an OOO table (empty list: fine)."""
    out = _common(df, OOO_COLUMNS, 3, cfg, "tpips_ooo")
    if not out and not set(df.split) <= set(cfg.triplets.splits):
        out.append(f"tpips_ooo: splits outside {sorted(cfg.triplets.splits)}")
    return out


def afc_problems(df: pd.DataFrame, cfg: TpipsConfig) -> list[str]:
    """Problems of a 2AFC table (empty list: fine)."""
    out = _common(df, AFC_COLUMNS, 2, cfg, "tpips_afc")
    if not out and len(df):
        v = np.array(df.votes.tolist())
        if (v[:, 0] == v[:, 1]).any():
            out.append("tpips_afc: tied items were not removed")
    return out
