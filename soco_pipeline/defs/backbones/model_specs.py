"""`model_specs`: the model spec files present, one observable source every board depends on."""

import dagster as dg

from soco_pipeline.defs.shared.automation import MODEL_SPECS, SPEC_PARTITIONS, specs_version
from soco_pipeline.defs.shared.checks import observable_source

GROUP = "backbones"


@observable_source(
    name=MODEL_SPECS,
    group_name=GROUP,
    description="The model specs present (every backbones and lvlms partition); data version: their hash.",
)
def model_specs(context: dg.AssetExecutionContext) -> dg.DataVersion:
    """The set of model specs (the spec sensors' partitions); its data version is a hash of their names."""
    return dg.DataVersion(
        specs_version({kind: context.instance.get_dynamic_partitions(kind) for kind in SPEC_PARTITIONS})
    )
