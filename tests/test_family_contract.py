"""The family contract's shared machinery, without a Dagster run: capabilities decide "not applicable", one
config route per family, the table registry derived from the declarations, and TPIPS's features read
through the manifest its cache asset wrote (the same arrays as re-deriving the spec)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from soco_pipeline.backbones import list_specs
from soco_pipeline.backbones.kinds import CAPABILITIES, capabilities, missing_capabilities
from soco_pipeline.config import load_config_file
from soco_pipeline.defs.fgbmk import FAMILY as FGBMK
from soco_pipeline.defs.mmvm import FAMILY as MMVM
from soco_pipeline.defs.shared.family import Family
from soco_pipeline.defs.shared.resources import SocoSettings
from soco_pipeline.defs.tpips.assets import FAMILY as TPIPS
from soco_pipeline.features.policy import GlobalInputPolicy, load_global_policy
from soco_pipeline.settings import Settings
from soco_pipeline.storage import PROJECT_ROOT
from soco_pipeline.tables import register_table, table_for
from soco_pipeline.tasks.fgbmk.config import load_config as load_fgbmk
from soco_pipeline.tasks.tpips.features import extract_tpips, features_from_manifest, load_tpips_features
from soco_pipeline.tasks.tpips.images import write_images
from soco_pipeline.tasks.tpips.triplets import generate_triplets
from tests.tpips_helpers import tiny_config

pytestmark = pytest.mark.unit


def test_kinds_offer_capabilities_and_the_oracle_reads_no_pixels():
    for kind in ("timm", "classical", "packaged", "diffusion", "oracle"):
        assert capabilities(kind) <= set(CAPABILITIES), kind
    assert "pixels" in capabilities("timm") and "pixels" in capabilities("classical")
    assert "pixels" not in capabilities("oracle") and "part_oracle" in capabilities("oracle")
    assert missing_capabilities("oracle", {"pixels", "dense_maps"}) == ["pixels"]
    assert missing_capabilities("timm", {"pixels", "dense_maps", "global_features"}) == []


def test_one_not_applicable_mechanism_for_every_family():
    specs = list_specs()
    oracle, sift = specs["oracle_part"], specs["dense_sift"]
    for family in (MMVM, TPIPS):
        reason = family.not_applicable(oracle)
        assert reason.startswith(f"not applicable: {family.name} needs pixels") and "SOCO part maps" in reason
        assert family.not_applicable(sift) == ""
    assert FGBMK.not_applicable(oracle) == ""  # global features from the part maps the FG-BMK set writes


def test_a_family_reads_its_config_through_its_settings_field(tmp_path, monkeypatch):
    monkeypatch.delenv("SOCO_TPIPS_CONFIG", raising=False)
    assert Settings().family_config_path("tpips") == str(PROJECT_ROOT / "assets" / "tpips.yaml")
    assert Settings().family_config_path("toy") == str(PROJECT_ROOT / "assets" / "toy.yaml")  # no field
    other = tmp_path / "tpips.yaml"
    other.write_text((PROJECT_ROOT / "assets" / "tpips.yaml").read_text().replace("seed: 0", "seed: 7", 1))
    monkeypatch.setenv("SOCO_TPIPS_CONFIG", str(other))  # the variable fills the field
    soco = SocoSettings(storage_root=str(tmp_path))
    assert soco.tpips_config_path == str(other) and TPIPS.config(soco).seed == 7
    assert TPIPS.config(SocoSettings(storage_root=str(tmp_path), tpips_config_path=None)).seed == 0


def test_the_one_loader_names_the_file_and_the_field(tmp_path):
    bad = tmp_path / "policy.yaml"
    bad.write_text("resize: {demo: 128, full: 256}\ncrop: -3\n")
    with pytest.raises(ValueError, match=rf"{bad}: field 'crop' must be >= 8, got -3"):
        load_config_file(GlobalInputPolicy, bad, scale="demo")
    bad.write_text("resise: 128\n")
    with pytest.raises(ValueError, match=r"unknown field\(s\) \['resise'\]"):
        load_config_file(GlobalInputPolicy, bad)


def test_the_global_policy_lives_in_the_features_config():
    for scale in ("demo", "full"):
        assert load_fgbmk(None, scale).global_features == load_global_policy(scale)
    assert load_global_policy("demo").crop == 112 and load_global_policy("full").crop == 224


def test_the_family_tables_are_registered_by_their_declarations():
    assert table_for("mmvm_cases").partitioned is False and table_for("mmvm_predictions").partitioned
    assert table_for("tpips_leaderboard").view == "tpips_leaderboard"
    assert table_for("fgbmk_answers").partitioned
    with pytest.raises(ValueError, match="registered twice"):
        register_table("mmvm_cases", partitioned=True)
    with pytest.raises(ValueError, match="must be named toy_<what>"):
        Family("toy", "1", lambda path, soco: None).register("scores")


def test_tpips_features_through_the_manifest_equal_the_spec_derived_ones(tmp_path):
    cfg = tiny_config(3, 1, image_size=48, features={"input_size": 48})
    ts = generate_triplets(cfg)
    images = write_images(ts.images, str(tmp_path / "data"), cfg)
    ids = images.image_id.tolist()
    spec = dataclasses.replace(list_specs()["dense_sift"], device="cpu")
    manifests = extract_tpips(spec, images, str(tmp_path / "cache"), cfg, "cpu")
    table = pd.concat([m.assign(layer=i) for i, m in enumerate(manifests)], ignore_index=True)
    table = table.sample(frac=1.0, random_state=0)  # the order of the rows does not matter
    via_manifest = features_from_manifest(table, ids, str(tmp_path / "cache"))
    via_spec = load_tpips_features(spec, ids, str(tmp_path / "cache"), cfg, "cpu")
    assert len(via_manifest.layers) == len(via_spec.layers) >= 1
    for a, b in zip(via_manifest.layers, via_spec.layers, strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(via_manifest.globals_, via_spec.globals_)
