"""Feature stage: the per-backbone cache and read access to it; names load lazily (no torch for `policy`)."""

import importlib

_WHERE = {
    "extract_features": "extract",
    "load_image": "extract",
    "GlobalFeatures": "global_cache",
    "cached_global": "global_cache",
    "extract_global": "global_cache",
    "read_global": "global_cache",
    "resolve_folder": "global_cache",
    "MANIFEST_COLUMNS": "layout",
    "FeatureError": "layout",
    "feature_dir": "layout",
    "feature_file": "layout",
    "GlobalInputPolicy": "policy",
    "FeatureStore": "store",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
