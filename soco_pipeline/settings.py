"""Where the pipeline reads and writes, from the environment with sensible defaults.

Everything lives under one storage root (an fsspec path: a local folder by default, `s3://...`
works too): `tables/` (Parquet), `features/` (the tensor cache), `embedded/` (the generated data
set), `results.duckdb` (views for SQL). The Makefile and the tests set the variables.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from soco_pipeline.storage import PROJECT_ROOT, default_storage_root, is_remote, join


@dataclass(frozen=True)
class Settings:
    """Paths and choices that the Dagster resources start from."""

    storage_root: str = field(default_factory=default_storage_root)
    backbones_dir: str = field(
        default_factory=lambda: os.environ.get(
            "SOCO_BACKBONES_DIR", str(PROJECT_ROOT / "assets" / "backbones")
        )
    )
    lvlms_dir: str = field(
        default_factory=lambda: os.environ.get("SOCO_LVLMS_DIR", str(PROJECT_ROOT / "assets" / "lvlms"))
    )
    dataset_size: str = field(default_factory=lambda: os.environ.get("SOCO_DATASET_SIZE", "demo"))
    seed: int = field(default_factory=lambda: int(os.environ.get("SOCO_SEED", "0")))
    categories: tuple[str, ...] | None = field(
        default_factory=lambda: tuple(c for c in os.environ.get("SOCO_CATEGORIES", "").split(",") if c) or None
    )
    images_per_category: int | None = field(
        default_factory=lambda: int(os.environ["SOCO_IMAGES_PER_CATEGORY"])
        if os.environ.get("SOCO_IMAGES_PER_CATEGORY")
        else None
    )

    @property
    def tables_root(self) -> str:
        """Parquet tables, one file per asset (per partition for partitioned assets)."""
        return join(self.storage_root, "tables")

    @property
    def features_root(self) -> str:
        """The per-backbone feature tensor cache."""
        return join(self.storage_root, "features")

    @property
    def embedded_root(self) -> str:
        """The generated default data set for the configured size, categories and seed."""
        name = f"{self.dataset_size}-seed{self.seed}"
        if self.categories:
            name += "-" + hashlib.sha256(",".join(self.categories).encode()).hexdigest()[:8]
        if self.images_per_category:
            name += f"-n{self.images_per_category}"
        return join(self.storage_root, "embedded", name)

    @property
    def lvlm_root(self) -> str:
        """LVLM marked images (`images/`) and the answer cache (`cache/<model>/`)."""
        return join(self.storage_root, "lvlm")

    @property
    def duckdb_path(self) -> str:
        """The DuckDB file holding views over the result tables (local path); ":memory:" when the storage
        root is a URL (object store): readers then build the views over the bucket (results_db)."""
        if is_remote(self.storage_root):
            return ":memory:"
        return str(Path(self.storage_root) / "results.duckdb")
