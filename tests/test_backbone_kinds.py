"""The backbone-kind registry (a toy kind defined here, built and extracted with), and one validation of a
spec file wherever it is found (add-backbone, the sensor's and demo's scan, a partition's run)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import ClassVar, Literal

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from soco_pipeline.backbones import BackboneSpecError, build_backbone, load_spec, parse_spec, spec_hash
from soco_pipeline.backbones.base import Backbone
from soco_pipeline.backbones.kinds import (
    KIND_CAPABILITIES,
    KIND_MODULES,
    KIND_SPEC_CHECKS,
    backbone_class,
    kinds,
    register_kind,
    unregister_kind,
)
from soco_pipeline.backbones.spec import OPTIONS as KIND_OPTIONS
from soco_pipeline.backbones.spec import PositiveInt, SpecFields
from soco_pipeline.backbones.spec_files import scan_specs
from soco_pipeline.backbones.validate import checked_spec
from soco_pipeline.storage import PROJECT_ROOT

pytestmark = pytest.mark.unit


class ToyOptions(SpecFields):
    """The toy kind's fields: one option, the number of channels."""

    kind: Literal["toy"]
    channels: PositiveInt = 3
    MODELS: ClassVar[tuple[str, ...] | None] = ("colour",)


class ToyBackbone(Backbone):
    """A kind in one class: the input colours, pooled to a stride-4 grid, repeated `channels` times."""

    Options = ToyOptions

    def __init__(self, spec, context=None):
        super().__init__(spec, context)
        self.stride = self.multiple = 4
        self.channels = spec.opt("channels")

    def forward(self, batch, records, size):
        pooled = torch.nn.functional.avg_pool2d(batch, self.stride)
        return pooled.repeat(1, self.channels, 1, 1)[:, : self.channels]


@pytest.fixture
def toy_kind():
    register_kind("toy")(ToyBackbone)  # the one registry line a new kind needs
    yield
    unregister_kind("toy")


def test_a_new_kind_is_one_class_and_one_registry_line(toy_kind):
    assert "toy" in kinds()
    spec = parse_spec(
        {
            "kind": "toy",
            "model": "colour",
            "channels": 2,
            "input": {"nearest_multiple": 16},
            "normalisation": "raw",
            "device": "cpu",
        },
        "toy_test",
    )
    assert spec.opt("channels") == 2 and len(spec_hash(spec)) == 16
    backbone = build_backbone(spec, {"device": "cpu"})
    assert isinstance(backbone, ToyBackbone)
    image = np.zeros((16, 24, 3), dtype=np.uint8)
    image[..., 0] = 255  # pure red: after the white padding the top rows are (1, 0, 0) in both channels
    maps = backbone.extract([image], pd.DataFrame({"image_id": ["a"], "width": [24], "height": [16]}))
    assert maps[0].shape == (2, 4, 4)
    np.testing.assert_allclose(maps[0][:, 0, 0].numpy(), [1.0, 0.0], atol=1e-6)
    # The kind's own fields are validated like the built-in ones.
    with pytest.raises(BackboneSpecError, match=r"'channels' must be > 0"):
        parse_spec(
            {"kind": "toy", "model": "colour", "channels": 0, "input": {"fixed_grid": 4}}, "t", "t.yaml"
        )
    with pytest.raises(BackboneSpecError, match=r"'model' is 'grey'; kind 'toy' offers \['colour'\]"):
        parse_spec({"kind": "toy", "model": "grey", "input": {"fixed_grid": 4}}, "t", "t.yaml")


class ToyCnnOptions(ToyOptions):
    """A second toy kind's fields (as the toy's)."""

    kind: Literal["toy_cnn"]


class ToyCnnBackbone(ToyBackbone):
    """A plug-in kind whose model is read for global features as a CNN's (its declared `global_readout`)."""

    Options = ToyCnnOptions
    global_readout = "cnn_stages"

    def __init__(self, spec, context=None):
        super().__init__(spec, context)
        self.model = torch.nn.Identity()


def test_a_new_kind_gets_the_global_extractor_of_its_declared_readout(toy_kind):
    """features/global_extractors picks by the kind's declared readout (kinds.py), not by its name: a plug-in
    kind declaring `cnn_stages` gets the CNN extractor, one declaring none (the toy) the dense mean."""
    from soco_pipeline.backbones.kinds import GLOBAL_READOUTS, global_readout
    from soco_pipeline.features import GlobalInputPolicy
    from soco_pipeline.features.global_extractors import (
        READOUTS,
        CnnGlobal,
        DenseMeanGlobal,
        build_global_extractor,
    )

    assert set(READOUTS) == set(GLOBAL_READOUTS)  # every declared readout has its extractor
    fields = {"model": "colour", "input": {"nearest_multiple": 16}, "normalisation": "raw", "device": "cpu"}
    policy = GlobalInputPolicy(resize=40, crop=32, normalisation="spec", final_norm=True, batch_size=4)
    register_kind("toy_cnn")(ToyCnnBackbone)
    try:
        assert global_readout("toy_cnn") == "cnn_stages"
        cnn = build_global_extractor(parse_spec({"kind": "toy_cnn", **fields}, "toy_cnn"), policy)
        assert type(cnn) is CnnGlobal and cnn.name == "toy_cnn" and cnn.preset == "raw"
    finally:
        unregister_kind("toy_cnn")
    assert global_readout("toy") == "" and global_readout("no_such_kind") == ""
    dense = build_global_extractor(parse_spec({"kind": "toy", **fields}, "toy_dense"), policy)
    assert type(dense) is DenseMeanGlobal


def test_a_kind_class_must_declare_a_known_readout_and_a_built_in_one_its_table_entry():
    class Unknown(ToyCnnBackbone):
        global_readout = "pooled_somehow"

    with pytest.raises(TypeError, match=r"global_readout is 'pooled_somehow'; known are \['class_tokens'"):
        register_kind("toy_cnn")(Unknown)

    class Lying(Backbone):
        Options = KIND_OPTIONS["classical"]
        capabilities = KIND_CAPABILITIES["classical"]
        global_readout = "class_tokens"

    with pytest.raises(TypeError, match=r"global_readout differs from KIND_GLOBAL_READOUT for 'classical'"):
        register_kind("classical")(Lying)


def test_an_unknown_kind_lists_the_registered_ones():
    with pytest.raises(BackboneSpecError, match=r"'kind' is 'toy'; it must be one of \['classical'"):
        parse_spec({"kind": "toy", "model": "colour", "input": {"fixed_grid": 4}}, "t", "t.yaml")


def test_a_registration_must_declare_its_kind():
    class Wrong(ToyBackbone):
        Options = ToyOptions

    with pytest.raises(TypeError, match=r"Literal\['other'\]"):
        register_kind("other")(Wrong)


def test_a_built_in_kind_class_must_offer_its_declared_capabilities():
    class Lying(Backbone):
        Options = KIND_OPTIONS["classical"]
        capabilities = frozenset({"dense_maps"})

    with pytest.raises(TypeError, match=r"differ from KIND_CAPABILITIES\['classical'\]"):
        register_kind("classical")(Lying)


LOADS = """
import glob, json, sys
from soco_pipeline.backbones import load_spec
from soco_pipeline.backbones.kinds import capabilities, global_readout
found = {p: sorted(capabilities(load_spec(p).kind)) for p in sorted(glob.glob("assets/backbones/*.yaml"))}
readouts = {p: global_readout(load_spec(p).kind) for p in found}
heavy = [m for m in ("torch", "timm", "cv2") if m in sys.modules]
print(json.dumps({"specs": found, "readouts": readouts, "heavy": heavy}))
"""


def test_loading_every_spec_and_its_capabilities_imports_no_torch():
    """Spec fields (backbones/spec.py OPTIONS) and capabilities (kinds.py KIND_CAPABILITIES) are data: a fresh
    process that loads every shipped spec and asks what its kind offers imports no torch, timm or OpenCV."""
    done = subprocess.run(
        [sys.executable, "-c", LOADS], capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)
    assert out["heavy"] == [] and len(out["specs"]) >= 5
    assert out["specs"]["assets/backbones/oracle_part.yaml"] == [
        "dense_maps",
        "global_features",
        "part_oracle",
    ]
    assert all("pixels" in offered for p, offered in out["specs"].items() if "oracle" not in p)
    # and how global features read each kind's model, from data too
    assert {out["readouts"][f"assets/backbones/{n}.yaml"] for n in ("dense_sift", "oracle_part")} == {""}
    readouts = {
        n: out["readouts"][f"assets/backbones/{n}.yaml"] for n in ("vit_small_random", "efficientnet_lite0")
    }
    assert readouts == {"vit_small_random": "class_tokens", "efficientnet_lite0": "cnn_stages"}


CHECKS = """
import glob, json, sys
from soco_pipeline.backbones.kinds import KIND_SPEC_CHECKS
from soco_pipeline.backbones.spec import load_spec
from soco_pipeline.backbones.validate import checked_spec
paths = [p for p in sorted(glob.glob("assets/backbones/*.yaml")) if load_spec(p).kind not in KIND_SPEC_CHECKS]
accepted = [checked_spec(p, weights=False).name for p in paths]
print(json.dumps({"accepted": accepted, "torch": "torch" in sys.modules}))
"""


def test_accepting_a_spec_of_a_kind_without_world_checks_imports_no_torch():
    """`soco run` of an oracle, SIFT or packaged spec checks it in its own process (checked_spec): a kind
    outside KIND_SPEC_CHECKS has no `check_spec` of its own, so its module and torch stay unloaded; each
    built-in class overrides `check_spec` exactly when its kind is listed there."""
    done = subprocess.run(
        [sys.executable, "-c", CHECKS], capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)
    assert {"oracle_part", "dense_sift", "efficientnet_lite0"} <= set(out["accepted"])
    assert out["torch"] is False
    for kind in KIND_MODULES:
        overrides = backbone_class(kind).check_spec.__func__ is not Backbone.check_spec.__func__
        assert overrides == (kind in KIND_SPEC_CHECKS), kind


RESNET = {
    "kind": "timm",
    "model": "resnet18",
    "weights": "none",
    "input": {"nearest_multiple": 224},
    "device": "cpu",
}


def test_a_non_vit_timm_spec_is_refused_wherever_it_is_found(tmp_path):
    """A resnet18 `timm` spec dropped straight into the spec folder: the scan (sensor and demo) reports it
    as invalid with the add-backbone message, the other specs stay valid, and a partition's run refuses
    it with the same message instead of a bare TypeError from timm."""
    folder = tmp_path / "backbones"
    folder.mkdir()
    (folder / "resnet.yaml").write_text(yaml.safe_dump(RESNET))
    (folder / "sift.yaml").write_text(
        yaml.safe_dump(
            {"kind": "classical", "model": "sift", "input": {"nearest_multiple": 64}, "device": "cpu"}
        )
    )
    valid, invalid = scan_specs(folder)
    assert list(valid) == ["sift"] and list(invalid) == ["resnet"]
    assert "is not a ViT-style network" in invalid["resnet"] and "resnet.yaml" in invalid["resnet"]
    load_spec(folder / "resnet.yaml")  # its fields are fine: only the world check refuses it
    with pytest.raises(BackboneSpecError, match=r"resnet\.yaml.*not a ViT-style network.*kind 'packaged'"):
        checked_spec(folder / "resnet.yaml")


def test_the_partition_loader_validates_like_add_backbone(tmp_path):
    from soco_pipeline.defs.backbones.assets import spec_for

    class Soco:
        backbones_dir = str(tmp_path)

    (tmp_path / "resnet.yaml").write_text(yaml.safe_dump(RESNET))
    with pytest.raises(BackboneSpecError, match="not a ViT-style network"):
        spec_for(Soco(), "resnet")
    (tmp_path / "missing_weights.yaml").write_text(
        yaml.safe_dump({**RESNET, "model": "vit_small_patch14_dinov2", "weights": "nope/w.pth"})
    )
    with pytest.raises(FileNotFoundError, match="weights file .*w.pth does not exist"):
        spec_for(Soco(), "missing_weights")
