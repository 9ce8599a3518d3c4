"""model_headlines and model_summary over every family's board, built by `summary_assets(families)`."""

from collections.abc import Iterable

import dagster as dg
import pandas as pd

from soco_pipeline.defs.shared.automation import eager_allowing_missing
from soco_pipeline.defs.shared.boards import latest_materialization, warn_vanished
from soco_pipeline.defs.shared.checks import TableResult, table_asset
from soco_pipeline.defs.shared.executors import IN_RUN_PROCESS
from soco_pipeline.defs.shared.family import Family
from soco_pipeline.defs.shared.io_manager import ALLOW_MISSING
from soco_pipeline.defs.shared.resources import SocoSettings
from soco_pipeline.tasks.core import CORE_HEADLINES, SOCO
from soco_pipeline.trust.headline import Headline
from soco_pipeline.trust.headline_schemas import ModelHeadlineSchema, ModelSummarySchema

GROUP = "summary"
# 3: the headlines from the Family declarations (families in name order, after SOCO's)
CODE_VERSION = "3"


def declared_headlines(families: Iterable[Family]) -> tuple[Headline, ...]:
    """SOCO's headlines, then each of `families`'; ValueError for a headline of an undeclared board."""
    declared = [f for f in families if f.headline is not None]
    for f in declared:
        if f.headline.board not in f.boards:
            raise ValueError(
                f"family {f.name!r}: its headline reads {f.headline.board!r}, which it does not declare with "
                f"@FAMILY.board (its boards: {', '.join(f.boards) or 'none'}); give the Headline board=..."
            )
    return (*CORE_HEADLINES, *(f.headline for f in declared))


def summary_assets(families: Iterable[Family]) -> list[dg.AssetsDefinition]:
    """`model_headlines` and `model_summary` over `declared_headlines(families)`."""
    return headline_assets(declared_headlines(families))


def headline_assets(headlines: tuple[Headline, ...]) -> list[dg.AssetsDefinition]:
    """`model_headlines` (reading every declared board, each optional) and `model_summary` for `headlines`."""
    boards = list(dict.fromkeys(h.board for h in headlines))

    @table_asset(
        name="model_headlines",
        schema=ModelHeadlineSchema,
        group_name=GROUP,
        ins={b: dg.AssetIn(metadata=ALLOW_MISSING) for b in boards},
        automation_condition=eager_allowing_missing(*boards),
        op_tags=IN_RUN_PROCESS,
        code_version=CODE_VERSION,
        kinds={"pandas"},
    )
    def model_headlines(context: dg.AssetExecutionContext, soco: SocoSettings, **tables) -> TableResult:
        """Every family's headline (0-100, 95% CI, n, simulated, board date): one row per (model, family)."""
        from soco_pipeline.trust.headline import model_headlines as build
        from soco_pipeline.trust.roles import spec_roles

        when = {b: latest_materialization(context.instance, b) for b in boards}
        roles = spec_roles(soco.backbones_dir, soco.lvlms_dir, soco.storage_root)
        long = build(tables, when, headlines, embedded=soco.source == "embedded", roles=roles)
        return TableResult(
            long,
            {
                "rows": len(long),
                "models": int(long["model"].nunique()),
                "families": ", ".join(sorted(long["family"].unique())),
                **warn_vanished(context, when, soco.tables_root),
            },
        )

    # the SOCO board's published columns (a spec's `reference:`), when SOCO's headline is declared
    soco_board = {"leaderboard": dg.AssetIn(metadata=ALLOW_MISSING)} if "leaderboard" in boards else {}

    @table_asset(
        schema=ModelSummarySchema,
        group_name=GROUP,
        ins=soco_board,
        automation_condition=dg.AutomationCondition.eager(),
        op_tags=IN_RUN_PROCESS,
        code_version=CODE_VERSION,
        kinds={"pandas"},
    )
    def model_summary(
        context: dg.AssetExecutionContext, soco: SocoSettings, model_headlines: pd.DataFrame, **board
    ) -> TableResult:
        """One row per model: every family's headline with its 95% CI, `simulated` flags and board dates, and
        the published SOC of the model its spec names, the difference and the knobs that differ."""
        from soco_pipeline.analysis.leaderboard import leaderboard_markdown
        from soco_pipeline.trust.headline import model_summary as build
        from soco_pipeline.trust.published import summary_published

        wide = summary_published(build(model_headlines, headlines), board.get("leaderboard"), SOCO.name)
        shown = wide[["model", *dict.fromkeys(h.family for h in headlines)]].round(1)
        when = {b: latest_materialization(context.instance, b) for b in boards}
        return TableResult(
            wide,
            {
                "rows": len(wide),
                "summary": dg.MetadataValue.md(leaderboard_markdown(shown)),
                **warn_vanished(context, when, soco.tables_root),
            },
        )

    return [model_headlines, model_summary]
