"""The results group: storage/results.duckdb, views over every published table (its one writer)."""

from collections.abc import Iterable

import dagster as dg

from soco_pipeline.defs.shared.automation import eager_allowing_missing
from soco_pipeline.defs.shared.executors import IN_RUN_PROCESS
from soco_pipeline.defs.shared.family import Family
from soco_pipeline.defs.shared.resources import SocoSettings

GROUP = "results"
# the summaries beside the families' boards; all optional (not every deployment runs them)
OPTIONAL_SUMMARIES = (
    "lvlm_leaderboard",
    "correlation",
    "published_comparison",
    "protocol_atlas",
    "model_headlines",
    "model_summary",
)


def results_database_asset(families: Iterable[Family]) -> dg.AssetsDefinition:
    """`results_database` over SOCO's leaderboard, OPTIONAL_SUMMARIES and the boards of `families`."""
    optional = (*OPTIONAL_SUMMARIES, *(board for f in families for board in f.boards))

    @dg.asset(
        group_name=GROUP,
        # every summary table: a view is (re)made once they are written; all but SOCO's board optional
        deps=[dg.AssetKey(name) for name in ("leaderboard", *optional)],
        automation_condition=eager_allowing_missing(*optional),
        op_tags=IN_RUN_PROCESS,
        kinds={"duckdb"},
        code_version="2",
    )
    def results_database(context: dg.AssetExecutionContext, soco: SocoSettings) -> dg.MaterializeResult:
        """storage/results.duckdb: views over every result table, for DuckDB SQL (its only writer); for tables
        in an object store, readers build the views themselves and this checks that every table reads."""
        from soco_pipeline.report.results_db import refresh_views
        from soco_pipeline.storage import is_remote

        views = refresh_views(soco.duckdb_path, soco.tables_root)
        where = soco.tables_root if is_remote(soco.tables_root) else soco.duckdb_path
        return dg.MaterializeResult(
            metadata={"path": dg.MetadataValue.path(where), "views": ", ".join(views)}
        )

    return results_database
