"""Why our number differs: `published_gap`, per backbone whose spec names a published model (`reference:`),
one row per (metric, differing knob) with the measured effect of aligning it (evaluation/published_gap.py).
A prediction knob re-runs a variant spec through the feature cache (its own spec hash, so its own folder);
a scoring knob re-scores; the rest is unexplained, with the reason."""

import dagster as dg
import pandas as pd

from soco_pipeline.defs.results.assets import GROUP
from soco_pipeline.defs.shared.checks import TableResult, partition_table
from soco_pipeline.defs.shared.executors import GPU_STEP_TAGS
from soco_pipeline.defs.shared.partitions import backbones_partitions
from soco_pipeline.defs.shared.resources import SocoSettings
from soco_pipeline.defs.shared.run_configs import recorded_subset
from soco_pipeline.defs.shared.specs import run_taxonomy, spec_for


@partition_table(
    backbones_partitions,
    group_name=GROUP,
    deps=[dg.AssetKey("backbone_spec"), dg.AssetKey("evaluation_protocol")],
    pool="gpu",  # a prediction knob re-runs the backbone
    op_tags=GPU_STEP_TAGS,
    kinds={"pytorch"},
    code_version="1",
)
def published_gap(
    context: dg.AssetExecutionContext,
    soco: SocoSettings,
    predictions: pd.DataFrame,
    image_pairs: pd.DataFrame,
    correspondences: pd.DataFrame,
    keypoints: pd.DataFrame,
    image_set: pd.DataFrame,
    taxonomy: pd.DataFrame,
) -> TableResult:
    """Ours -> the published protocol, one knob at a time (input size, layer re-run; alpha re-scored), and
    the unexplained rest with its reason; no rows when the spec names no published model."""
    from soco_pipeline.device import resolve_device
    from soco_pipeline.evaluation.published import load_published, soco_knobs
    from soco_pipeline.evaluation.published_gap import GapInputs, measure_gap
    from soco_pipeline.evaluation.subsets import apply_pair_subset

    spec = spec_for(soco, context.partition_key)
    protocol = soco.protocol()
    inputs = GapInputs(
        image_set=image_set,
        image_pairs=apply_pair_subset(image_pairs, recorded_subset(context.instance, context.partition_key)),
        correspondences=correspondences,
        keypoints=keypoints,
        taxonomy=run_taxonomy(taxonomy),
        protocol=protocol,
        features_root=soco.features_root,
        backbone_context={"embedded_root": soco.embedded_root, "device": soco.device},
        device=str(resolve_device(soco.device)),
        log=context.log.info,
    )
    layer = dict(spec.options).get("layer", "")
    knobs = soco_knobs(spec.input.policy, spec.input.value, layer, protocol)
    table = measure_gap(
        spec,
        knobs,
        load_published(),
        predictions,
        inputs.predict,
        inputs.score,
        simulated=soco.source == "embedded",
    )
    sentence = table["sentence"].iloc[0] if len(table) else ""
    return TableResult(
        table,
        {
            "rows": len(table),
            "reference": spec.reference or "none",
            "gap": sentence or "the spec names no published model (`reference:`)",
        },
    )
