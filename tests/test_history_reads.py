"""A family's regression watch (`<family>_history`) checks whether the family can score the backbone before it
reads anything (issue 53, review): for a backbone it cannot score, no table is read. Its tables are
dependencies read in the step, so here it materializes its not-applicable row in a storage where none of them
was ever written (with them as inputs, Dagster would load them first and fail)."""

import os
import shutil

import dagster as dg
import pytest

from soco_pipeline.defs.definitions import build_definitions
from soco_pipeline.defs.mmvm import FAMILY as MMVM
from soco_pipeline.defs.tpips.assets import FAMILY as TPIPS
from soco_pipeline.storage import PROJECT_ROOT
from soco_pipeline.tables import table_for

pytestmark = pytest.mark.pipeline


@pytest.mark.parametrize("family", [MMVM, TPIPS], ids=lambda f: f.name)
def test_a_backbone_the_family_cannot_score_reads_none_of_its_tables(tmp_path, family):
    backbones = tmp_path / "backbones"
    backbones.mkdir()
    shutil.copy(PROJECT_ROOT / "assets" / "backbones" / "oracle_part.yaml", backbones)
    defs = build_definitions(storage_root=str(tmp_path / "storage"), backbones_dir=str(backbones))
    soco = defs.resources["soco"]
    watched = family.spec.watch.tables
    name = f"{family.name}_history"
    with dg.DagsterInstance.ephemeral() as instance:
        instance.add_dynamic_partitions("backbones", ["oracle_part"])
        result = dg.materialize(
            [defs.get_assets_def(name)],
            instance=instance,
            resources=defs.resources,
            partition_key="oracle_part",
        )
        assert result.success
        meta = instance.get_latest_materialization_event(dg.AssetKey(name)).asset_materialization.metadata
    assert meta["not_applicable"].value.startswith(f"not applicable: {family.name} needs pixels")
    for t in watched:  # none of what the watch would read exists: it read none
        assert not os.path.exists(table_for(t).path(soco.tables_root, "oracle_part"))
        assert not os.path.exists(table_for(t).path(soco.tables_root))
