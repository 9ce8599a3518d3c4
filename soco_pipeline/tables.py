"""The one registry of published tables: asset -> Parquet path -> SQL view (families register their own)."""

from __future__ import annotations

from dataclasses import dataclass

from soco_pipeline.storage import join


@dataclass(frozen=True)
class Table:
    """A published table: the asset that writes it, its SQL view, and whether it has one file per backbone."""

    asset: str
    view: str
    partitioned: bool = False

    def relative_path(self, partition: str | None = None) -> str:
        """`<asset>.parquet`, or `<asset>/<partition>.parquet` for a partitioned table."""
        if self.partitioned:
            return f"{self.asset}/{partition}.parquet" if partition is not None else self.asset
        return f"{self.asset}.parquet"

    def path(self, tables_root: str, partition: str | None = None) -> str:
        """The fsspec path of the table (of one partition, or the folder of all partitions)."""
        return join(tables_root, self.relative_path(partition))


TABLES: tuple[Table, ...] = (
    Table("taxonomy", "taxonomy"),
    Table("source_images", "source_images"),
    Table("raw_keypoints", "raw_keypoints"),
    Table("image_set", "images"),
    Table("rejected_images", "rejected_images"),
    Table("keypoints", "keypoints"),
    Table("descriptions", "descriptions"),
    Table("image_pairs", "pairs"),
    Table("correspondences", "correspondences"),
    Table("four_choice", "four_choice"),
    Table("feature_manifest", "features", partitioned=True),
    Table("global_feature_manifest", "global_features", partitioned=True),
    Table("predictions", "predictions", partitioned=True),
    Table("four_choice_predictions", "four_choice_predictions", partitioned=True),
    Table("metrics", "metrics", partitioned=True),
    Table("leaderboard", "leaderboard"),
    # LVLM evaluation (soco_pipeline/defs/lvlm/); partitioned by LVLM spec
    Table("lvlm_items", "lvlm_items"),
    Table("lvlm_answers", "lvlm_answers", partitioned=True),
    Table("lvlm_metrics", "lvlm_metrics", partitioned=True),
    Table("lvlm_leaderboard", "lvlm_leaderboard"),
    # analysis (soco_pipeline/defs/analysis/)
    Table("global_metrics", "global_metrics", partitioned=True),
    Table("probe_metrics", "probe_metrics", partitioned=True),
    Table("correlation", "correlation"),
    # per-sample input hashes of the evaluated pairs (soco_pipeline/defs/pairs/hashes.py, docs/results.md)
    Table("sample_hashes", "sample_hashes"),
    # published figures beside ours (trust/published.py); SOCO's history is the view soco_history, as the
    # families' (no file moves; results_db keeps model_history)
    Table("published_comparison", "published_comparison"),
    # the gap knob by knob (trust/published_gap.py); rankings under single-knob changes (analysis/protocol_atlas.py)
    Table("published_gap", "published_gap", partitioned=True),
    Table("protocol_atlas", "protocol_atlas"),
    Table("model_history", "soco_history", partitioned=True),
    # one row per (model, family) headline, one row per model across families (soco_pipeline/defs/summary/)
    Table("model_headlines", "model_headlines"),
    Table("model_summary", "model_summary"),
)
_BY_ASSET = {t.asset: t for t in TABLES}
_DERIVED: dict[str, Table] = {}  # registered by the definitions (a task family's tables), in import order


def register_table(asset: str, partitioned: bool = False, view: str | None = None) -> Table:
    """Register a table derived from the definitions (its view is named after the asset unless `view` says
    otherwise); registering the same table again is a no-op, a different one under a taken name an error."""
    table = Table(asset, view or asset, partitioned)
    known = _BY_ASSET.get(asset) or _DERIVED.get(asset)
    if known is not None and known != table:
        raise ValueError(f"table {asset!r} is registered twice, as {known} and as {table}; rename one asset")
    views = {t.view: t.asset for t in all_tables() if t.asset != asset}
    if table.view in views:
        raise ValueError(f"view {table.view!r} of {asset!r} is already the view of {views[table.view]!r}")
    _DERIVED.setdefault(asset, table)
    return table


def all_tables() -> tuple[Table, ...]:
    """Every published table: the core ones above, then those the loaded definitions registered."""
    return TABLES + tuple(_DERIVED.values())


def table_for(asset: str) -> Table:
    """The registered table of an asset; KeyError naming this file when the asset is not registered."""
    try:
        return _BY_ASSET.get(asset) or _DERIVED[asset]
    except KeyError:
        raise KeyError(
            f"asset {asset!r} writes a table that soco_pipeline/tables.py does not register; add a Table "
            f"entry there (asset, view name, partitioned), or declare it through a task family's "
            f"Family.table (defs/shared/family.py, loaded with the definitions) or its FamilySpec (loaded by "
            f"soco_pipeline.tasks.family_specs()), so that the IO manager and the SQL views agree"
        ) from None
