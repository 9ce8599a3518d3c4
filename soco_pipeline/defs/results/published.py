"""Published figures beside ours: one row per (model, family, metric) of every spec naming a `reference:`."""

import dagster as dg
import pandas as pd

from soco_pipeline import schemas
from soco_pipeline.defs.results.assets import GROUP
from soco_pipeline.defs.shared.checks import TableResult, table_asset
from soco_pipeline.defs.shared.executors import IN_RUN_PROCESS
from soco_pipeline.defs.shared.resources import SocoSettings


@table_asset(
    schema=schemas.PublishedComparisonSchema,
    group_name=GROUP,
    kinds={"pandas"},
    code_version="1",
    automation_condition=dg.AutomationCondition.eager(),
    op_tags=IN_RUN_PROCESS,
)
def published_comparison(soco: SocoSettings, leaderboard: pd.DataFrame) -> TableResult:
    """Ours beside the published figures of the model each spec names (assets/reference/published.csv):
    the closest published setting, the difference, and every protocol knob in which the two runs differ."""
    from soco_pipeline.tasks.core import SOCO
    from soco_pipeline.trust.published import (
        board_values,
        compare_to_published,
        load_published,
        spec_references,
    )

    refs, knobs = spec_references(soco.backbones_dir, soco.protocol())
    table = compare_to_published(board_values(leaderboard, SOCO.name), refs, knobs, load_published())
    md = table[["model", "reference", "metric", "comparison"]].to_markdown(index=False) if len(table) else ""
    return TableResult(
        table,
        {
            "rows": len(table),
            "models": int(table["model"].nunique()) if len(table) else 0,
            "comparison": dg.MetadataValue.md(md or "no spec names a published reference (`reference:`)"),
        },
    )
