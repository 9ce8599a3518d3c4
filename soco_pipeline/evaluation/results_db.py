"""Moved to `soco_pipeline.results_db` (the foundation); this name stays while other branches still use it."""

from soco_pipeline.results_db import (
    ResultsError,
    connect_readonly,
    create_views,
    query,
    refresh_views,
    table_files,
)

__all__ = ["ResultsError", "connect_readonly", "create_views", "query", "refresh_views", "table_files"]
