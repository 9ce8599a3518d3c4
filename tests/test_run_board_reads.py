"""`soco run` skips a board made after the model's rows that it reads (run_cli.rows_read, from the asset graph):
a family's board is judged by that family's rows, not by those of a family run after it in the same command,
else a `reference:`-only edit after a first run would run every board but the last again."""

import dagster as dg
import pytest

from soco_pipeline.cli.demo import PER_BACKBONE, SUMMARY, families
from soco_pipeline.cli.run import rows_read
from soco_pipeline.defs.definitions import build_definitions

pytestmark = pytest.mark.unit


def test_a_board_reads_its_own_familys_rows_and_the_summary_reads_every_familys():
    defs = build_definitions()
    found = [f for f in families(defs) if f.per_backbone]
    soco = [dg.AssetKey(k) for k in PER_BACKBONE]
    rows = soco + [k for f in found for k in f.per_backbone]
    assert {"fgbmk", "mmvm", "tpips"} <= {f.name for f in found}
    for family in found:
        read = rows_read(defs, [family.leaderboard, *family.after], rows)
        assert read and set(read) <= set(family.per_backbone), (family.name, read)
    summary = set(rows_read(defs, [dg.AssetKey(k) for k in SUMMARY], rows))
    assert dg.AssetKey("metrics") in summary
    for family in found:
        assert summary & set(family.per_backbone), family.name
