"""What a computation reads of a spec (issue 53, backbones/reads.py): a spec's data version ignores metadata
(`reference:`, description, comments, name, device, batch size) and moves with any computation field; FG-BMK
and TPIPS, which extract at their own input size, read everything but `input` (FG-BMK still reads it for a
dense-only backbone whose global policy has no `dense_input`); nor do they read `layer` where a global
readout (FG-BMK) or the config's layers (TPIPS) stand in for it, so a layer sweep reuses their rows."""

import dataclasses

import pytest
import yaml

from soco_pipeline.backbones.reads import computation, reads_version, spec_computation_version, without
from soco_pipeline.backbones.spec import load_spec
from soco_pipeline.backbones.spec_files import scan_specs, spec_data_version
from soco_pipeline.defs.fgbmk import fgbmk_reads
from soco_pipeline.defs.tpips.assets import tpips_reads
from soco_pipeline.features.policy import GlobalInputPolicy, global_reads
from soco_pipeline.storage import PROJECT_ROOT
from soco_pipeline.tasks.fgbmk.config import load_config as load_fgbmk_config
from soco_pipeline.tasks.tpips.config import load_config as load_tpips_config
from soco_pipeline.tasks.tpips.features import layer_specs

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
    tpips = load_tpips_config()
    assert fgbmk_reads(a, Cfg) == fgbmk_reads(b, Cfg) and tpips_reads(a, tpips) == tpips_reads(b, tpips)
    sift_a = load_spec(_spec(tmp_path, "dense_sift"))
    sift_b = load_spec(_spec(tmp_path / "b", "dense_sift", {"input": {"nearest_multiple": 320}}))
    assert fgbmk_reads(sift_a, Cfg) == fgbmk_reads(sift_b, Cfg)  # runs at dense_input 112
    Cfg.global_features = spec_input  # a dense-only backbone then runs at the spec's own input
    assert fgbmk_reads(sift_a, Cfg) != fgbmk_reads(sift_b, Cfg)
    assert fgbmk_reads(a, Cfg) == fgbmk_reads(b, Cfg)  # a model read block by block: the policy's crop


@pytest.mark.parametrize(
    "name, layer", [("vit_small_random", -4), ("efficientnet_lite0", "stride16")], ids=["timm", "packaged"]
)
def test_fgbmk_and_tpips_ignore_the_layer_where_they_read_their_own(tmp_path, name, layer):
    (tmp_path / "b").mkdir()
    a = load_spec(_spec(tmp_path, name))
    b = load_spec(_spec(tmp_path / "b", name, {"layer": layer}))
    fgbmk, tpips = load_fgbmk_config(), load_tpips_config()
    assert computation(a) != computation(b)  # SOCO and MMVM read the dense maps of `layer`
    assert fgbmk_reads(a, fgbmk) == fgbmk_reads(b, fgbmk)  # the readout: the last blocks or stages
    assert tpips_reads(a, tpips) == tpips_reads(b, tpips)  # the config's layers replace the spec's
    assert [s.options for s in layer_specs(a, tpips)] == [s.options for s in layer_specs(b, tpips)]
    no_layers = tpips.features.model_copy(update={"layers": {**tpips.features.layers, a.kind: []}})
    assert "layer" in tpips_reads(a, tpips.model_copy(update={"features": no_layers}))  # the spec's own
    assert spec_computation_version(a) != spec_computation_version(b)


@pytest.mark.parametrize(
    "name, layer", [("vit_small_random", -4), ("efficientnet_lite0", "stride16")], ids=["timm", "packaged"]
)
def test_the_global_readout_gives_the_same_features_whatever_the_layer(tmp_path, name, layer):
    """What lets FG-BMK's reads leave `layer` (and, under a fixed preset, `normalisation`) out: its
    extractor's output for specs that differ only there."""
    import torch

    from soco_pipeline.features.global_extractors import build_global_extractor

    pixels = torch.rand(2, 3, 28, 28, generator=torch.Generator().manual_seed(0))

    def features(edit: dict, normalisation: str) -> tuple:
        folder = tmp_path / f"{len(list(tmp_path.iterdir()))}"
        folder.mkdir()
        spec = dataclasses.replace(load_spec(_spec(folder, name, edit)), device="cpu")
        policy = GlobalInputPolicy(resize=32, crop=28, normalisation=normalisation)
        with torch.inference_mode():
            return build_global_extractor(spec, policy).forward(pixels, None)

    base = features({}, "spec")
    assert all(map(torch.equal, base, features({"layer": layer}, "spec")))
    other = {"normalisation": "raw"}
    assert all(map(torch.equal, features({}, "clip"), features(other, "clip")))  # the policy's preset
    assert not torch.equal(base[0], features(other, "spec")[0])  # the spec's preset: read
    fields, policy = computation(load_spec(_spec(tmp_path, name))), GlobalInputPolicy(normalisation="spec")
    assert "normalisation" in global_reads(fields, fields["kind"], policy)
    assert "normalisation" not in global_reads(
        fields, fields["kind"], GlobalInputPolicy(normalisation="clip")
    )


def test_reads_version_covers_every_input():
    fields = {"kind": "timm", "input": {"nearest_multiple": 224}}
    base = reads_version(fields, config="c", code="1")
    assert reads_version(dict(reversed(list(fields.items()))), code="1", config="c") == base  # order-free
    assert reads_version(fields, config="d", code="1") != base
    assert reads_version(fields, config="c", code="2") != base
    assert reads_version(without(fields, ["input"]), config="c", code="1") != base
