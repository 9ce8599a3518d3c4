"""Per-sample input hashes of the evaluated pairs (issue 26), as the results records carry them."""

import dagster as dg
import pandas as pd

from soco_pipeline.defs.pairs.assets import GROUP
from soco_pipeline.defs.shared.automation import EAGER
from soco_pipeline.defs.shared.checks import TableResult, table_asset
from soco_pipeline.defs.shared.resources import SocoSettings
from soco_pipeline.trust.hashes import MATCHING_HASH


@table_asset(group_name=GROUP, automation_condition=EAGER, kinds={"pandas"}, code_version="1")
def sample_hashes(
    context: dg.AssetExecutionContext,
    soco: SocoSettings,
    image_set: pd.DataFrame,
    keypoints: pd.DataFrame,
    image_pairs: pd.DataFrame,
    correspondences: pd.DataFrame,
) -> TableResult:
    """The input hash of every evaluated pair, as the results records carry them, and the task hash."""
    from soco_pipeline.trust.hashes import pair_hashes, task_hash

    ev = image_pairs[image_pairs["evaluated"].astype(bool)]
    matching = soco.protocol().matching_hash()
    df = pair_hashes(ev, correspondences, keypoints, image_set, matching)
    metadata = {"rows": len(df), "task_hash/pairs": task_hash(df["pair_id"], df["pair_hash"])}
    return TableResult(df, {**metadata, MATCHING_HASH: matching})
