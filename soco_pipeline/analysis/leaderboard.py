"""The leaderboard across backbones as a table, Markdown and a bar chart (here, not in evaluation/: it joins
analysis's global-feature metrics)."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd

from soco_pipeline.storage import write_bytes_atomic

LEVEL_COLUMNS = ["cc", "soc", "soc_geo", "cross_soc", "cross_cc", "four_choice", "four_choice_circular"]
GLOBAL_COLUMNS = ["knn_top1", "retrieval_map"]  # from analysis.global_metrics, when given


def leaderboard(
    metrics: pd.DataFrame,
    alpha: float = 0.1,
    reduction: str = "official",
    global_metrics: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One row per backbone: levels, drops, per-super-category SOC, 4-choice, kNN and retrieval."""
    m = metrics[(metrics["reduction"] == reduction)]
    at = ((m["alpha"] - alpha).abs() < 1e-9) | m["metric"].str.startswith("four_choice")
    m = m[at]
    top = m[m["scope"] == "all"].pivot_table(
        index="backbone", columns="metric", values="value", aggfunc="first"
    )
    board = top.reindex(columns=LEVEL_COLUMNS)
    board.insert(board.columns.get_loc("cross_cc") + 1, "cc_to_soc_drop", board["cc"] - board["soc"])
    board.insert(
        board.columns.get_loc("cc_to_soc_drop") + 1, "soc_to_cross_drop", board["soc"] - board["cross_soc"]
    )
    sup = m[(m["scope"] == "supercategory") & (m["metric"] == "soc")]
    if len(sup):
        sup = sup.pivot_table(index="backbone", columns="group", values="value", aggfunc="first")
        sup.columns = [f"soc_{c}" for c in sup.columns]
        board = board.join(sup)
    if global_metrics is not None:  # analysis: global-feature metrics from the feature cache
        from soco_pipeline.analysis.global_metrics import headline_global  # loads torch: only when asked

        board = board.join(
            headline_global(global_metrics).set_index("backbone").reindex(columns=GLOBAL_COLUMNS)
        )
    board = board.sort_values("soc", ascending=False, na_position="last")
    return board.reset_index().rename_axis(columns=None)


def leaderboard_markdown(df: pd.DataFrame) -> str:
    """The leaderboard as a GitHub-flavoured Markdown table (values with one decimal)."""
    shown = df.astype(object).where(df.notna(), None)  # tabulate prints None (not NaN) as missingval
    return shown.to_markdown(index=False, floatfmt=".1f", missingval="") + "\n"


CONSOLE_COLUMNS = ["cc", "soc", "soc_geo", "cross_soc", "cross_cc", "four_choice_circular", "knn_top1"]


def console_board(board: pd.DataFrame) -> pd.DataFrame:
    """The terminal view of a leaderboard, SOC's 95% CI beside SOC, partial runs marked."""
    from soco_pipeline.evaluation.stats import ci_display  # evaluation imports no analysis module
    from soco_pipeline.evaluation.subsets import partial_display

    shown = ci_display(partial_display(board))
    out = shown[["backbone", *[c for c in CONSOLE_COLUMNS if c in shown.columns]]].copy()
    ci = "soc 95% CI (boot. categories)"  # ci_display's text column of SOC's interval
    if ci in shown.columns:
        out.insert(out.columns.get_loc("soc") + 1, "SOC 95% CI", shown[ci])
    return out


def leaderboard_plot(df: pd.DataFrame, path: str, alpha: float = 0.1) -> str:
    """Bar charts (per level; SOC per super-category) of a leaderboard, written atomically as a PNG."""
    write_bytes_atomic(path, leaderboard_png(df, alpha))
    return path


def leaderboard_png(df: pd.DataFrame, alpha: float = 0.1) -> bytes:
    """Bar charts (per level at PCK@`alpha`; SOC per super-category) of a leaderboard, as PNG bytes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = [c for c in ["cc", "soc", "soc_geo", "cross_soc", "cross_cc", "four_choice"] if c in df.columns]
    sups = [c for c in df.columns if c.startswith("soc_") and c not in ("soc_geo", "soc_to_cross_drop")]
    fig, axes = plt.subplots(1, 2, figsize=(14, 4.8))
    for ax, cols, title in (
        (axes[0], levels, f"PCK@{alpha:g} per level"),
        (axes[1], sups, "SOC per super-category"),
    ):
        width = 0.8 / max(1, len(df))
        x = np.arange(len(cols))
        for i, row in enumerate(df.itertuples(index=False)):
            vals = [getattr(row, c) for c in cols]
            ax.bar(x + i * width, np.nan_to_num(np.asarray(vals, dtype=float)), width, label=row.backbone)
        ax.set_xticks(
            x + width * (len(df) - 1) / 2, [c.replace("soc_", "") if ax is axes[1] else c for c in cols]
        )
        ax.set_ylim(0, 100)
        ax.set_title(title)
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()
