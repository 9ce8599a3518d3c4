"""Why our number differs: `published_gap`, the measured effect of aligning each differing knob."""

import dagster as dg
import pandas as pd

from soco_pipeline.defs.results.assets import GROUP
from soco_pipeline.defs.shared.checks import TableResult, partition_table
from soco_pipeline.defs.shared.executors import GPU_STEP_TAGS
from soco_pipeline.defs.shared.partitions import backbones_partitions
from soco_pipeline.defs.shared.resources import SocoSettings
from soco_pipeline.defs.shared.run_configs import recorded_subset
from soco_pipeline.defs.shared.specs import run_taxonomy, spec_for
from soco_pipeline.stored_tables import stored_table

INPUTS = ("predictions", "image_pairs", "correspondences", "keypoints", "image_set", "taxonomy")
PER_MODEL_INPUTS = ("predictions",)  # of this model's partition; the others are the data's tables


def read_inputs(tables_root: str, partition: str) -> dict[str, pd.DataFrame]:
    """{name: table} of INPUTS as stored (this model's predictions, the data's tables)."""
    return {
        name: stored_table(tables_root, name, partition if name in PER_MODEL_INPUTS else None)
        for name in INPUTS
    }


@partition_table(
    backbones_partitions,
    group_name=GROUP,
    deps=[dg.AssetKey(k) for k in ("backbone_spec", "evaluation_protocol", *INPUTS)],
    pool="gpu",  # a prediction knob re-runs the backbone
    op_tags=GPU_STEP_TAGS,
    kinds={"pytorch"},
    code_version="1",
)
def published_gap(context: dg.AssetExecutionContext, soco: SocoSettings) -> TableResult:
    """Ours -> the published protocol, one knob at a time (input size, layer re-run; alpha re-scored), and
    the unexplained rest with its reason; no rows, and no table read, when the spec names no published model."""
    from soco_pipeline.evaluation.subsets import apply_pair_subset
    from soco_pipeline.runtime.device import resolve_device
    from soco_pipeline.tasks.core import SOCO
    from soco_pipeline.trust.published import backbone_knobs, load_published
    from soco_pipeline.trust.published_gap import GAP_COLUMNS, GapInputs, measure_gap

    spec = spec_for(soco, context.partition_key)
    if not spec.reference:
        return TableResult(
            pd.DataFrame(columns=list(GAP_COLUMNS)),
            {"rows": 0, "reference": "none", "gap": "the spec names no published model (`reference:`)"},
        )
    t = read_inputs(soco.tables_root, context.partition_key)
    protocol = soco.protocol()
    inputs = GapInputs(
        image_set=t["image_set"],
        image_pairs=apply_pair_subset(
            t["image_pairs"], recorded_subset(context.instance, context.partition_key)
        ),
        correspondences=t["correspondences"],
        keypoints=t["keypoints"],
        taxonomy=run_taxonomy(t["taxonomy"]),
        protocol=protocol,
        features_root=soco.features_root,
        backbone_context={"embedded_root": soco.embedded_root, "device": soco.device},
        device=str(resolve_device(soco.device)),
        log=context.log.info,
    )
    layer = dict(spec.options).get("layer", "")
    knobs = backbone_knobs(spec.input.policy, spec.input.value, layer, protocol)
    table = measure_gap(
        spec,
        knobs,
        load_published(),
        t["predictions"],
        inputs.predict,
        inputs.score,
        simulated=soco.source == "embedded",
        family=SOCO.name,
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
