"""Feature stage: the per-backbone cache (dense maps, and global features per input policy), its layout, and
read access to it. Every family extracts through `extract_features` (dense) or `cached_global` (global)."""

from soco_pipeline.features.extract import extract_features, load_image
from soco_pipeline.features.global_cache import GlobalFeatures, cached_global, extract_global, read_global
from soco_pipeline.features.layout import MANIFEST_COLUMNS, FeatureError, feature_dir, feature_file
from soco_pipeline.features.policy import GlobalInputPolicy
from soco_pipeline.features.store import FeatureStore

__all__ = [
    "MANIFEST_COLUMNS", "FeatureError", "FeatureStore", "GlobalFeatures", "GlobalInputPolicy", "cached_global",
    "extract_features", "extract_global", "feature_dir", "feature_file", "load_image", "read_global",
]
