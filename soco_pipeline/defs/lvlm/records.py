"""The LVLM's results record (issue 26), as JSON (storage/results/records/lvlm/<model>.json)."""

import dagster as dg
import pandas as pd

from soco_pipeline.defs.lvlm.assets import GROUP, lvlm_spec_for
from soco_pipeline.defs.shared.automation import EAGER
from soco_pipeline.defs.shared.partitions import lvlms_partitions
from soco_pipeline.defs.shared.resources import SocoSettings
from soco_pipeline.defs.shared.run_configs import recorded_lvlm_subset, stage_timing
from soco_pipeline.tasks.core import LVLM_FAMILY

PER_LVLM_STAGES = ("lvlm_answers", "lvlm_metrics")


@dg.asset(
    group_name=GROUP,
    partitions_def=lvlms_partitions,
    automation_condition=EAGER,
    deps=["lvlm_metrics"],
    kinds={"json"},
)
def lvlm_results_record(
    context: dg.AssetExecutionContext,
    soco: SocoSettings,
    lvlm_items: pd.DataFrame,
    lvlm_answers: pd.DataFrame,
) -> dg.MaterializeResult:
    """The LVLM's results record: spec, item protocol, versions, timings, counts, CIs and item hashes."""
    from soco_pipeline.lvlm.specs import spec_hash
    from soco_pipeline.trust.provenance import write_named_record
    from soco_pipeline.trust.records import lvlm_record, results_markdown

    model = context.partition_key
    spec = lvlm_spec_for(soco, model)
    rec = lvlm_record(
        model=model,
        family=LVLM_FAMILY.record_name,
        spec=spec,
        spec_hash=spec_hash(spec),
        protocol=soco.lvlm_protocol(),
        items=lvlm_items,
        answers=lvlm_answers,
        rule=recorded_lvlm_subset(context.instance, model),
        timing=stage_timing(context.instance, model, PER_LVLM_STAGES),
    )
    path = write_named_record(rec, soco.records_root, model, family="lvlm")
    return dg.MaterializeResult(
        metadata={
            "path": dg.MetadataValue.path(path),
            "task_hash/lvlm_items": rec["task_hashes"]["lvlm_items"],
            "partial": rec["subset"]["partial"],
            "results": dg.MetadataValue.md(results_markdown(rec)),
        }
    )
