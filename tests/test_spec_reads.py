"""What a computation reads of a spec (issue 53, backbones/reads.py): a spec's data version ignores metadata
(`reference:`, description, comments, name, device, batch size) and moves with any computation field; FG-BMK
and TPIPS, which extract at their own input size, read everything but `input` (FG-BMK still reads it for a
dense-only backbone whose global policy has no `dense_input`)."""

import pytest
import yaml

from soco_pipeline.backbones.reads import computation, reads_version, spec_computation_version, without
from soco_pipeline.backbones.spec import load_spec
from soco_pipeline.backbones.spec_files import scan_specs, spec_data_version
from soco_pipeline.defs.fgbmk import fgbmk_reads
from soco_pipeline.defs.tpips.assets import tpips_reads
from soco_pipeline.features.policy import GlobalInputPolicy
from soco_pipeline.storage import PROJECT_ROOT

pytestmark = pytest.mark.unit

BACKBONES = PROJECT_ROOT / "assets" / "backbones"


def _spec(tmp_path, name: str, edit: dict | None = None, comment: str = ""):
    doc = {**yaml.safe_load((BACKBONES / f"{name}.yaml").read_text()), **(edit or {})}
    path = tmp_path / f"{name}.yaml"
    path.write_text(comment + yaml.safe_dump(doc))
    return path


@pytest.mark.parametrize(
    "edit",
    [{"reference": "DINOv2-S/14"}, {"description": "the same model"}, {"device": "cpu", "batch_size": 2}],
    ids=["reference", "description", "device and batch size"],
)
def test_metadata_keeps_the_data_version(tmp_path, edit):
    before = spec_data_version(_spec(tmp_path, "efficientnet_lite0"))
    after = spec_data_version(_spec(tmp_path, "efficientnet_lite0", edit, comment="# a comment\n"))
    assert after == before
    assert scan_specs(tmp_path)[0] == {"efficientnet_lite0": before}


@pytest.mark.parametrize(
    "edit", [{"input": {"nearest_multiple": 320}}, {"seed": 1}, {"normalisation": "imagenet"}], ids=str
)
def test_a_computation_field_moves_the_data_version(tmp_path, edit):
    before = spec_computation_version(load_spec(_spec(tmp_path, "efficientnet_lite0")))
    assert spec_computation_version(load_spec(_spec(tmp_path, "efficientnet_lite0", edit))) != before


def test_fgbmk_and_tpips_ignore_the_input_where_they_extract_at_their_own_size(tmp_path):
    (tmp_path / "b").mkdir()
    a = load_spec(_spec(tmp_path, "efficientnet_lite0"))
    b = load_spec(_spec(tmp_path / "b", "efficientnet_lite0", {"input": {"nearest_multiple": 320}}))
    own, spec_input = GlobalInputPolicy(dense_input=112), GlobalInputPolicy(dense_input=None)

    class Cfg:  # the FG-BMK config's one field its reads look at
        global_features = own

    assert computation(a) != computation(b)
    assert fgbmk_reads(a, Cfg) == fgbmk_reads(b, Cfg) and tpips_reads(a, None) == tpips_reads(b, None)
    sift_a = load_spec(_spec(tmp_path, "dense_sift"))
    sift_b = load_spec(_spec(tmp_path / "b", "dense_sift", {"input": {"nearest_multiple": 320}}))
    assert fgbmk_reads(sift_a, Cfg) == fgbmk_reads(sift_b, Cfg)  # runs at dense_input 112
    Cfg.global_features = spec_input  # a dense-only backbone then runs at the spec's own input
    assert fgbmk_reads(sift_a, Cfg) != fgbmk_reads(sift_b, Cfg)
    assert fgbmk_reads(a, Cfg) == fgbmk_reads(b, Cfg)  # a model read block by block: the policy's crop


def test_reads_version_covers_every_input():
    fields = {"kind": "timm", "input": {"nearest_multiple": 224}}
    base = reads_version(fields, config="c", code="1")
    assert reads_version(dict(reversed(list(fields.items()))), code="1", config="c") == base  # order-free
    assert reads_version(fields, config="d", code="1") != base
    assert reads_version(fields, config="c", code="2") != base
    assert reads_version(without(fields, ["input"]), config="c", code="1") != base
