"""Feature stage: extraction into the per-backbone cache, its layout, and read access to it."""

from soco_pipeline.features.extract import extract_features, load_image
from soco_pipeline.features.layout import MANIFEST_COLUMNS, FeatureError, feature_dir, feature_file
from soco_pipeline.features.store import FeatureStore

__all__ = [
    "MANIFEST_COLUMNS", "FeatureError", "FeatureStore", "extract_features", "feature_dir", "feature_file",
    "load_image",
]
