"""The family contract's shared machinery, without a Dagster run: capabilities decide "not applicable", one
config route per family, the table registry derived from the declarations, and TPIPS's features read
through the manifest its cache asset wrote (the same arrays as re-deriving the spec)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from soco_pipeline.backbones import list_specs
from soco_pipeline.backbones.kinds import CAPABILITIES, capabilities, missing_capabilities, per_kind
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
from soco_pipeline.tasks.tpips.features import (
    extract_tpips,
    features_from_manifest,
    layer_specs,
    load_tpips_features,
)
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


def test_a_per_kind_choice_is_read_by_capability_and_a_kind_left_out_is_refused():
    """TPIPS's `features.layers` (kind -> layers): a kind offering "blocks" gets its entry, a kind without it one
    layer, and a kind offering it that the table leaves out stops with the fix (never one layer in silence)."""
    specs = list_specs()
    cfg = tiny_config()
    assert len(layer_specs(specs["dense_sift"], cfg)) == 1
    assert [dict(s.options)["layer"] for s in layer_specs(specs["efficientnet_lite0"], cfg)] == [
        "stride16+stride32",
        "stride16",
    ]
    table = {"timm": [-1, -6]}
    assert per_kind(table, "timm", "blocks", "layers") == [-1, -6]
    assert per_kind(table, "classical", "blocks", "layers") is None
    with pytest.raises(ValueError, match="'packaged' offers 'blocks': give it an entry in layers"):
        per_kind(table, "packaged", "blocks", "layers")


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


def test_every_family_table_has_a_blocking_check():
    from soco_pipeline.defs.definitions import defs

    graph = defs.resolve_asset_graph()
    family_tables = [
        k for k in graph.get_all_asset_keys() if k.path[-1].split("_")[0] in ("mmvm", "fgbmk", "tpips")
    ]
    assert len(family_tables) == 36  # MMVM 11, FG-BMK 11, TPIPS 14 (each with its <family>_history)
    for key in family_tables:
        specs = defs.get_assets_def(key).check_specs
        assert any(c.name == "schema" and c.blocking for c in specs if c.asset_key == key), key
    toy = Family("toy", "1", lambda path, soco: None)
    with pytest.raises(TypeError, match="no blocking check"):
        toy.table()(lambda context: None)
    with pytest.raises(TypeError, match="no blocking check"):
        toy.board(partitioned=["toy_scores"])(lambda context, toy_scores: None)


def test_tpips_judgements_from_the_stored_tables_equal_regenerating(tmp_path):
    """tpips_ooo / tpips_afc read the triplets and 2AFC items tpips_renders stored (Parquet round trip):
    the same rows as generating them again."""
    from soco_pipeline.tasks.tpips.afc import annotate_afc, generate_afc
    from soco_pipeline.tasks.tpips.ooo import annotate_triplets
    from soco_pipeline.tasks.tpips.triplets import triplet_set, value_records

    cfg = tiny_config(12, 8)
    ts = generate_triplets(cfg)
    afc_values, afc_items = generate_afc(cfg)
    images = pd.concat([ts.images.assign(role="triplet"), afc_values.assign(role="afc")], ignore_index=True)
    stored = {}
    for name, table in {"images": images, "triplets": ts.triplets, "afc_items": afc_items}.items():
        table.to_parquet(tmp_path / f"{name}.parquet", index=False)
        stored[name] = pd.read_parquet(tmp_path / f"{name}.parquet")
    ooo_direct, _ = annotate_triplets(ts, cfg)
    ooo_stored, _ = annotate_triplets(triplet_set(stored["images"], stored["triplets"]), cfg)
    pd.testing.assert_frame_equal(ooo_stored, ooo_direct)
    afc_direct, _ = annotate_afc(afc_values, afc_items, cfg)
    afc_stored, _ = annotate_afc(value_records(stored["images"], "afc"), stored["afc_items"], cfg)
    pd.testing.assert_frame_equal(afc_stored, afc_direct)
    assert len(ooo_direct) > 0 and len(afc_direct) > 0


def test_mmvm_predictions_from_the_feature_asset_equal_extracting_in_place(tmp_path):
    """mmvm_predictions reads the manifest mmvm_features wrote (Parquet round trip): the same predictions as
    extracting inside the scoring step did."""
    from soco_pipeline.tasks.mmvm.backbone_eval import backbone_predictions, extract_frames
    from soco_pipeline.tasks.mmvm.generator import generate
    from soco_pipeline.tasks.mmvm.prompt import build_items
    from tests.test_mmvm_core import tiny_config as mmvm_tiny_config

    cfg = mmvm_tiny_config()
    t = generate(cfg, str(tmp_path / "gen"))
    t["items"] = build_items(t["cases"], t["objects"], t["images"], cfg, str(tmp_path / "marked"))
    spec = dataclasses.replace(list_specs()["dense_sift"], device="cpu")
    root = str(tmp_path / "features")
    in_place, _ = backbone_predictions(spec, t, root, device="cpu", none_rule=cfg.none_rule)
    extract_frames(spec, t["images"], root, "cpu", lambda _m: None).to_parquet(tmp_path / "m.parquet")
    manifest = pd.read_parquet(tmp_path / "m.parquet")
    via_asset, _ = backbone_predictions(
        spec, t, root, device="cpu", none_rule=cfg.none_rule, manifest=manifest
    )
    pd.testing.assert_frame_equal(via_asset, in_place)
    assert (in_place["status"] == "ok").all() and len(in_place) == 2 * len(t["items"])


def test_the_families_and_their_boards_and_headlines_are_found_in_the_group_folders(tmp_path, monkeypatch):
    """`declared_families` finds every module-level `Family` of the folders (a submodule's too, once when
    imported elsewhere), each with the boards `@board` declared and its headline's family and board filled."""
    from soco_pipeline.defs.definitions import group_folders
    from soco_pipeline.defs.shared.family import declared_families

    found = declared_families(group_folders())
    assert found == [FGBMK, MMVM, TPIPS]
    assert (FGBMK.boards, MMVM.boards, TPIPS.boards) == (
        ["fgbmk_leaderboard", "fgbmk_findings"],
        ["mmvm_leaderboard"],
        ["tpips_leaderboard"],
    )
    assert [(f.headline.family, f.headline.board) for f in found] == [
        ("fgbmk", "fgbmk_leaderboard"),
        ("mmvm", "mmvm_leaderboard"),
        ("tpips", "tpips_leaderboard"),
    ]
    # a throwaway package: one Family in a submodule, re-exported by its folder; then a second of the same name
    pkg = tmp_path / "family_pkg"
    (pkg / "toy").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "toy" / "decl.py").write_text(
        "from soco_pipeline.defs.shared.family import Family\nFAMILY = Family('toy', '1', lambda p, s: None)\n"
    )
    (pkg / "toy" / "__init__.py").write_text("from family_pkg.toy.decl import FAMILY\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    toy = importlib.import_module("family_pkg.toy")
    (family,) = declared_families([toy])
    assert family.name == "toy" and family.headline is None and family.boards == []
    (pkg / "toy" / "again.py").write_text(
        "from soco_pipeline.defs.shared.family import Family\nTOY = Family('toy', '2', lambda p, s: None)\n"
    )
    importlib.invalidate_caches()  # the finder must see the new file
    with pytest.raises(ValueError, match="two Family declarations named 'toy'"):
        declared_families([toy])
