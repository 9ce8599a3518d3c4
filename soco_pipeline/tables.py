"""The one registry of published tables: asset -> Parquet path under the tables root -> SQL view.

The IO manager, the leaderboard and the results database all read it, so renaming an asset without
updating this file fails loudly (`table_for`) instead of silently dropping a view.
"""

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
    # MMVMBench object matching (soco_pipeline/defs/mmvm/); SIMULATED data unless imported
    Table("mmvm_cases", "mmvm_cases"),
    Table("mmvm_images", "mmvm_images"),
    Table("mmvm_objects", "mmvm_objects"),
    Table("mmvm_items", "mmvm_items"),
    Table("mmvm_predictions", "mmvm_predictions", partitioned=True),
    Table("mmvm_answers", "mmvm_answers", partitioned=True),
    Table("mmvm_backbone_metrics", "mmvm_backbone_metrics", partitioned=True),
    Table("mmvm_lvlm_metrics", "mmvm_lvlm_metrics", partitioned=True),
    Table("mmvm_leaderboard", "mmvm_leaderboard"),
    # FG-BMK fine-grained family (soco_pipeline/defs/fgbmk/)
    Table("fgbmk_items", "fgbmk_items"),
    Table("fgbmk_questions", "fgbmk_questions"),
    Table("fgbmk_global_features", "fgbmk_global_features", partitioned=True),
    Table("fgbmk_metrics", "fgbmk_metrics", partitioned=True),
    Table("fgbmk_robustness", "fgbmk_robustness", partitioned=True),
    Table("fgbmk_answers", "fgbmk_answers", partitioned=True),
    Table("fgbmk_lvlm_metrics", "fgbmk_lvlm_metrics", partitioned=True),
    Table("fgbmk_leaderboard", "fgbmk_leaderboard"),
    Table("fgbmk_findings", "fgbmk_findings"),
    # TPIPS (soco_pipeline/defs/tpips/); judgements simulated
    Table("tpips_images", "tpips_images"),
    Table("tpips_ooo", "tpips_ooo"),
    Table("tpips_afc", "tpips_afc"),
    Table("tpips_pixel_baselines", "tpips_pixel_baselines"),
    Table("tpips_features", "tpips_features", partitioned=True),
    Table("tpips_baseline_scores", "tpips_baseline_scores", partitioned=True),
    Table("tpips_learned", "tpips_learned", partitioned=True),
    Table("tpips_lvlm_answers", "tpips_lvlm_answers", partitioned=True),
    Table("tpips_leaderboard", "tpips_leaderboard"),
    # per-sample input hashes of the evaluated pairs (soco_pipeline/defs/pairs/hashes.py, docs/results.md)
    Table("sample_hashes", "sample_hashes"),
    # one row per (model, family) headline, one row per model across families (soco_pipeline/defs/summary/)
    Table("model_headlines", "model_headlines"),
    Table("model_summary", "model_summary"),
)
_BY_ASSET = {t.asset: t for t in TABLES}


def table_for(asset: str) -> Table:
    """The registered table of an asset; KeyError naming this file when the asset is not registered."""
    try:
        return _BY_ASSET[asset]
    except KeyError:
        raise KeyError(
            f"asset {asset!r} writes a table that soco_pipeline/tables.py does not register; add a Table "
            f"entry there (asset, view name, partitioned) so that the IO manager and the SQL views agree"
        ) from None
