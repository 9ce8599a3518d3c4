"""Small TPIPS configs and data for the tests (tiny scale, CPU)."""

from __future__ import annotations

from soco_pipeline.tasks.tpips.config import TpipsConfig, load_config


def tiny_config(n_triplets: int = 12, n_afc: int = 8, **sections) -> TpipsConfig:
    """The shipped config shrunk to a few triplets and 2AFC items (and any other section updates)."""
    cfg = load_config()
    return cfg.with_updates(triplets={"n": n_triplets}, afc={"n": n_afc}, **sections)
