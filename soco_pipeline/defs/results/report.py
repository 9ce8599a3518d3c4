"""The static results page (issue 26): storage/report/index.html over every leaderboard and results record."""

import dagster as dg

from soco_pipeline.defs.results.assets import GROUP
from soco_pipeline.defs.shared.automation import eager_allowing_missing
from soco_pipeline.defs.shared.executors import IN_RUN_PROCESS
from soco_pipeline.defs.shared.resources import SocoSettings


# after SOCO's board and model_summary (upstream of every family's board); the summary may be missing
@dg.asset(
    group_name=GROUP,
    deps=["leaderboard", "model_summary"],
    automation_condition=eager_allowing_missing("model_summary"),
    op_tags=IN_RUN_PROCESS,
    kinds={"html"},
)
def results_report(context: dg.AssetExecutionContext, soco: SocoSettings) -> dg.MaterializeResult:
    """The results page, storage/report/index.html, and the same page in one file, storage/report.html."""
    from soco_pipeline.defs.shared.boards import board_materializations
    from soco_pipeline.report.page import build_report, error_bar_markdown
    from soco_pipeline.report.single_file import write_single_file
    from soco_pipeline.trust.headline import vanished_boards

    gone = vanished_boards(board_materializations(context.instance), soco.tables_root)
    for text in gone.values():  # a board materialized but whose file is gone: said here and on the page
        context.log.warning(text)
    index = build_report(soco, missing_boards=gone)
    single = write_single_file(index)  # <storage>/report.html: the page as one file, its images inlined
    meta = {
        "path": dg.MetadataValue.path(index),
        "open": dg.MetadataValue.url(f"file://{index}"),
        "single_file": dg.MetadataValue.path(str(single)),
    }
    if gone:
        meta["missing_boards"] = dg.MetadataValue.md("\n".join(f"- {t}" for t in gone.values()))
    # the leaderboards' CIs as error bars, in the UI too
    meta.update({name: dg.MetadataValue.md(md) for name, md in error_bar_markdown(index).items()})
    return dg.MaterializeResult(metadata=meta)
