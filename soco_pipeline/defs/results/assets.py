"""The results group: storage/results.duckdb, views over every published table (its one writer)."""

import dagster as dg

from soco_pipeline.defs.shared.automation import eager_allowing_missing
from soco_pipeline.defs.shared.resources import SocoSettings

GROUP = "results"
OPTIONAL_SUMMARIES = (
    "lvlm_leaderboard",
    "correlation",
    "mmvm_leaderboard",
    "fgbmk_leaderboard",
    "fgbmk_findings",
    "tpips_leaderboard",
    "published_comparison",
    "model_headlines",
    "model_summary",
)


@dg.asset(
    group_name=GROUP,
    # every summary table: a view is (re)made once they are written (the per-partition tables before them);
    # the LVLM, correlation and task-family summaries are optional (not every deployment runs them)
    deps=[dg.AssetKey(name) for name in ("leaderboard", *OPTIONAL_SUMMARIES)],
    automation_condition=eager_allowing_missing(*OPTIONAL_SUMMARIES),
    kinds={"duckdb"},
    code_version="2",
)
def results_database(context: dg.AssetExecutionContext, soco: SocoSettings) -> dg.MaterializeResult:
    """storage/results.duckdb: views over every result table, for DuckDB SQL (opened read-only by readers).

    The only writer of that file; for tables in an object store there is no file, readers build these
    views over the bucket themselves (this asset then checks that every table reads)."""
    from soco_pipeline.results_db import refresh_views
    from soco_pipeline.storage import is_remote

    views = refresh_views(soco.duckdb_path, soco.tables_root)
    where = soco.tables_root if is_remote(soco.tables_root) else soco.duckdb_path
    return dg.MaterializeResult(metadata={"path": dg.MetadataValue.path(where), "views": ", ".join(views)})
