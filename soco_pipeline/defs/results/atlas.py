"""The protocol-sensitivity atlas: how far each board's ranking moves per single-knob change."""

import base64

import dagster as dg
import pandas as pd

from soco_pipeline.defs.results.assets import GROUP
from soco_pipeline.defs.shared.checks import TableResult, fan_in_table, partition_rows
from soco_pipeline.defs.shared.resources import SocoSettings


@fan_in_table(
    group_name=GROUP,
    partitioned=["metrics", "mmvm_predictions", "tpips_baseline_outcomes", "fgbmk_probe_predictions"],
    optional=["tpips_ooo"],
    kinds={"pandas"},
    code_version="2",
)
def protocol_atlas(
    soco: SocoSettings,
    metrics: dict[str, pd.DataFrame],
    mmvm_predictions: dict[str, pd.DataFrame],
    tpips_baseline_outcomes: dict[str, pd.DataFrame],
    tpips_ooo: pd.DataFrame | None,
    fgbmk_probe_predictions: dict[str, pd.DataFrame],
) -> TableResult:
    """Rankings under the shipped protocol against each single-knob change that re-scores stored outputs: tau
    [CI], flipped pairs, the largest change."""
    from soco_pipeline.analysis.protocol_atlas import (
        atlas_figure_png,
        control_models,
        fgbmk_knob_table,
        mmvm_knob_table,
        soco_knob_table,
        tpips_knob_table,
    )
    from soco_pipeline.analysis.protocol_atlas import (
        protocol_atlas as build_atlas,
    )

    protocol = soco.protocol()
    frames = []
    if metrics:
        frames.append(
            soco_knob_table(
                partition_rows(metrics), protocol.headline_alpha, protocol.alphas, protocol.reductions
            )
        )
    mmvm = [t for t in mmvm_predictions.values() if len(t)]
    if mmvm:
        frames.append(mmvm_knob_table(pd.concat(mmvm, ignore_index=True)))
    tpips = [t for t in tpips_baseline_outcomes.values() if len(t)]
    if tpips and tpips_ooo is not None:
        frames.append(tpips_knob_table(pd.concat(tpips, ignore_index=True), tpips_ooo))
    fgbmk = [t for t in fgbmk_probe_predictions.values() if len(t)]
    if fgbmk:
        frames.append(fgbmk_knob_table(pd.concat(fgbmk, ignore_index=True)))
    frames = [f for f in frames if len(f)]
    long = (
        pd.concat(frames, ignore_index=True)
        if frames
        else pd.DataFrame(columns=["family", "metric", "knob", "model", "unit", "value", "weight"])
    )
    atlas = build_atlas(long, control_models(soco.backbones_dir), seed=soco.seed)
    meta = {"rows": len(atlas), "flips": int(atlas["n_flipped"].sum()) if len(atlas) else 0}
    if len(atlas):
        cols = ["family", "metric", "knob", "n_models", "tau", "tau_low", "tau_high", "n_flipped"]
        meta["atlas"] = dg.MetadataValue.md(atlas[cols].round(3).to_markdown(index=False))
        img = base64.b64encode(atlas_figure_png(atlas)).decode()
        meta["figure"] = dg.MetadataValue.md(f"![protocol atlas](data:image/png;base64,{img})")
    return TableResult(atlas, meta)
