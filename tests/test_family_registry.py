"""The domain-side family registry (soco_pipeline/tasks/__init__.py): each family core declares one
`FamilySpec`, found with no list to edit; loading it registers the tables its record and watch read and
imports neither Dagster nor torch (the CLI reads family tables without the definitions)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit

SCRIPT = """
import json, sys
from soco_pipeline.tables import table_for
from soco_pipeline.tasks import family_specs
specs = family_specs()
tables = {n: [(t, table_for(t).partitioned) for t in (*s.record.samples, *s.record.backbone, *s.record.lvlm,
          *s.watch.per_model)] for n, s in specs.items()}
print(json.dumps({"names": list(specs), "tables": tables, "heavy": [m for m in ("dagster", "torch") if m in sys.modules]}))
"""


def test_a_fresh_process_finds_every_family_and_registers_its_tables_without_dagster_or_torch():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)
    assert out["names"] == ["fgbmk", "mmvm", "tpips"] and out["heavy"] == []
    assert ["mmvm_items", False] in out["tables"]["mmvm"] and ["mmvm_predictions", True] in out["tables"][
        "mmvm"
    ]
    assert ["fgbmk_probe_predictions", True] in out["tables"]["fgbmk"]
    assert ["tpips_learned_outcomes", True] in out["tables"]["tpips"]


def test_the_dagster_family_is_built_from_the_spec():
    from soco_pipeline.defs.definitions import build_definitions  # noqa: F401 - loads every group folder
    from soco_pipeline.defs.fgbmk import FAMILY as FGBMK
    from soco_pipeline.defs.mmvm import FAMILY as MMVM
    from soco_pipeline.defs.tpips.assets import FAMILY as TPIPS
    from soco_pipeline.tasks import family_specs

    for family in (FGBMK, MMVM, TPIPS):
        spec = family_specs()[family.name]
        assert (
            family.spec is spec
            and family.headline == spec.headline
            and family.load_config is spec.load_config
        )
        assert spec.headline.family == family.name and spec.headline.board == f"{family.name}_leaderboard"


def test_the_input_notes_read_each_familys_config_through_its_loader(tmp_path):
    """One config route: the note says the TPIPS input size of the file the settings name (no environment
    variable read by the report), and a family without an input policy of its own has no note."""
    import yaml

    from soco_pipeline.settings import Settings
    from soco_pipeline.storage import PROJECT_ROOT
    from soco_pipeline.tasks import family_input_notes, family_specs

    doc = yaml.safe_load((PROJECT_ROOT / "assets" / "tpips.yaml").read_text())
    doc["features"]["input_size"] = 48
    (tmp_path / "tpips.yaml").write_text(yaml.safe_dump(doc))
    notes = family_input_notes(Settings(tpips_config_path=str(tmp_path / "tpips.yaml")))
    assert "48 x 48 px" in notes["tpips"] and "fgbmk" in notes and "mmvm" not in notes
    assert [n for n, s in family_specs().items() if s.workbook] == ["mmvm"]
    assert {n: s.headline_value for n, s in family_specs().items()} == {
        "fgbmk": "top1_subclass",
        "mmvm": "accuracy",
        "tpips": "ooo",
    }
