"""The protocol-sensitivity atlas (`protocol_atlas`): per family, metric and single-knob change, how far the
ranking of the board's models moves (Kendall tau with a bootstrap CI over categories, the flipped pairs, the
largest score change); the oracles are controls, left out. Domain in analysis/protocol_atlas.py."""

import base64

import dagster as dg
import pandas as pd

from soco_pipeline.defs.results.assets import GROUP
from soco_pipeline.defs.shared.checks import TableResult, fan_in_table, partition_rows
from soco_pipeline.defs.shared.resources import SocoSettings


@fan_in_table(group_name=GROUP, partitioned=["metrics"], kinds={"pandas"}, code_version="1")
def protocol_atlas(soco: SocoSettings, metrics: dict[str, pd.DataFrame]) -> TableResult:
    """Rankings under the shipped protocol against each single-knob change that re-scores the stored metrics
    (another alpha, the pooled reduction): tau [CI], the pairs that flip, the largest change."""
    from soco_pipeline.analysis.protocol_atlas import (
        atlas_figure_png,
        control_models,
        soco_knob_table,
    )
    from soco_pipeline.analysis.protocol_atlas import (
        protocol_atlas as build_atlas,
    )

    protocol = soco.protocol()
    long = (
        soco_knob_table(
            partition_rows(metrics), protocol.headline_alpha, protocol.alphas, protocol.reductions
        )
        if metrics
        else pd.DataFrame(columns=["family", "metric", "knob", "model", "unit", "value", "weight"])
    )
    atlas = build_atlas(long, control_models(soco.backbones_dir), seed=soco.seed)
    meta = {"rows": len(atlas), "flips": int(atlas["n_flipped"].sum()) if len(atlas) else 0}
    if len(atlas):
        cols = ["metric", "knob", "n_models", "tau", "tau_low", "tau_high", "n_flipped", "largest_change"]
        meta["atlas"] = dg.MetadataValue.md(atlas[cols].round(3).to_markdown(index=False))
        img = base64.b64encode(atlas_figure_png(atlas)).decode()
        meta["figure"] = dg.MetadataValue.md(f"![protocol atlas](data:image/png;base64,{img})")
    return TableResult(atlas, meta)
