"""The demo's closing lines say where `published_gap` rows come from (issue 55): no demo spec names a published
model, so the demo has none and says so; a spec folder with a `reference:` names the model and the query."""

import pytest

from soco_pipeline.cli.demo import gap_line, where_the_tables_are
from soco_pipeline.settings import Settings
from soco_pipeline.storage import PROJECT_ROOT

pytestmark = pytest.mark.unit


def test_the_demo_says_no_spec_of_its_own_names_a_published_model():
    settings = Settings()
    line = gap_line(settings)
    assert line.startswith("published_gap: no row here, no demo spec names a published model")
    assert line in where_the_tables_are(settings)


def test_a_spec_with_a_reference_is_named_with_the_query(tmp_path):
    spec = (PROJECT_ROOT / "assets" / "backbones" / "oracle_part.yaml").read_text()
    (tmp_path / "oracle_part.yaml").write_text(spec + "reference: DINOv2-B/14\n")
    line = gap_line(Settings(backbones_dir=str(tmp_path)))
    assert line == (
        'why a number differs from its paper: .venv/bin/soco sql "select * from published_gap" '
        "(oracle_part (reference: DINOv2-B/14))"
    )
