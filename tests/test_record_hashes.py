"""The results record takes its per-pair hashes from the stored `sample_hashes` table (issue 53, review): no
image is read or hashed again, and the hashes are those the record computed from the images before."""

import pandas as pd
import pytest

from soco_pipeline.backbones import spec_hash
from soco_pipeline.backbones.spec import load_spec
from soco_pipeline.defs.backbones.records import stored_matching_hash
from soco_pipeline.defs.definitions import build_definitions
from soco_pipeline.evaluation.subsets import SubsetRule
from soco_pipeline.storage import read_parquet
from soco_pipeline.tables import table_for
from soco_pipeline.tasks.core import SOCO
from soco_pipeline.trust import hashes
from soco_pipeline.trust.records import backbone_record

pytestmark = pytest.mark.pipeline

TABLES = ("image_set", "keypoints", "image_pairs", "correspondences", "four_choice")
PER_MODEL = ("feature_manifest", "predictions", "four_choice_predictions")


def _soco(core):
    return build_definitions(**core.overrides).resources["soco"]


def _record(core, rule: SubsetRule, pair_hashes: pd.DataFrame | None) -> dict:
    soco = _soco(core)
    tables = {n: read_parquet(table_for(n).path(soco.tables_root)) for n in TABLES}
    tables |= {n: read_parquet(table_for(n).path(soco.tables_root, "oracle_part")) for n in PER_MODEL}
    spec = load_spec(core.backbones / "oracle_part.yaml")
    return backbone_record(
        backbone="oracle_part",
        family=SOCO.record_name,
        spec=spec,
        spec_hash=spec_hash(spec),
        protocol=soco.protocol(),
        tables=tables,
        rule=rule,
        device="cpu",
        n_boot=10,
        pair_hashes=pair_hashes,
    )


@pytest.mark.parametrize("rule", [SubsetRule(), SubsetRule(limit=2)], ids=["full", "limit-2"])
def test_the_record_uses_the_stored_sample_hashes_and_reads_no_image(materialized_core, monkeypatch, rule):
    computed = _record(materialized_core, rule, None)  # from the images, as before
    stored = read_parquet(table_for("sample_hashes").path(str(materialized_core.tables)))

    def no_image_read(image_set):
        raise AssertionError("image_digests called: the record hashed the images again")

    monkeypatch.setattr(hashes, "image_digests", no_image_read)
    reused = _record(materialized_core, rule, stored)
    assert reused["sample_hashes"] == computed["sample_hashes"]
    assert reused["task_hashes"] == computed["task_hashes"]
    pairs = reused["sample_hashes"]["pairs"]
    assert 0 < len(pairs) < len(stored) if rule.limit else len(pairs) == len(stored)  # a subset: its rows
    with materialized_core.instance() as instance:  # the pipeline's results_record passes them so
        assert stored_matching_hash(instance) == _soco(materialized_core).protocol().matching_hash()
    first = next(iter(reused["sample_hashes"]["pairs"]))  # a stored table short of one evaluated pair
    with pytest.raises(AssertionError, match="hashed the images again"):  # is not used: the images again
        _record(materialized_core, rule, stored[stored["pair_id"] != first])
