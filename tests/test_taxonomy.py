"""Tests of the taxonomy: the real file's structure, its queries and parse errors."""

from __future__ import annotations

import copy

import pytest

from soco_pipeline.taxonomy import TaxonomyError, identity_of, load_taxonomy, parse_taxonomy

pytestmark = pytest.mark.unit

TAX = load_taxonomy()

SMALL = {
    "supercategories": ["things"],
    "concepts": {"wheel_center": {"noun": "wheel"}, "handle_end": {"noun": "handle"}},
    "nodes": {
        "vehicle": {
            "supercategory": "things",
            "keypoints": [
                {
                    "part": "wheel",
                    "at": "center",
                    "concept": "wheel_center",
                    "where": ["front left", "rear right"],
                }
            ],
        },
    },
    "categories": {
        "car": {"parent": "vehicle", "family": "car"},
        "bus": {"parent": "vehicle", "family": "car"},
        "mug": {
            "supercategory": "things",
            "family": "mug",
            "keypoints": [
                {
                    "part": "handle",
                    "concept": "handle_end",
                    "where": ["top"],
                    "pattern": "{node}_{part}_{where}",
                }
            ],
        },
    },
}


def test_real_taxonomy_has_100_categories_in_four_supercategories():
    cats = TAX.categories
    assert len(cats) == 100 and len(set(cats)) == 100
    counts = {s: sum(TAX.supercategory(c) == s for c in cats) for s in TAX.supercategories}
    assert counts == {"transportation": 31, "handheld": 20, "furniture": 9, "animals": 40}
    hand = [c for c in cats if TAX.family(c) == c]
    assert sorted(hand) == sorted(
        [
            "car",
            "bus",
            "tractor",
            "ambulance",
            "mug",
            "teapot",
            "kettle",
            "pitcher",
            "chair",
            "bench",
            "stool",
            "dining_table",
            "dog",
            "horse",
            "cow",
            "elephant",
        ]
    )
    for c in cats:
        assert TAX.family(TAX.family(c)) == TAX.family(c), f"{c}: its family must be hand-modelled"
        assert TAX.supercategory(TAX.family(c)) == TAX.supercategory(c)


def test_inheritance_adds_keypoints_from_the_root_down():
    car = TAX.category_keypoints("car")
    assert car[0] == "vehicle_wheel_front_left_center"
    assert "road_vehicle_sidemirror_left" in car and "car_doorhandle_front_left" in car
    assert "car_doorhandle_front_left" not in TAX.category_keypoints("police_car")
    assert len(TAX.category_keypoints("dog")) == 26
    assert all(
        len(TAX.category_keypoints(c)) == 26 for c in TAX.categories if TAX.supercategory(c) == "animals"
    )
    kp = TAX.keypoints["vehicle_wheel_front_left_center"]
    assert (kp.concept, kp.part, kp.where, kp.at) == ("wheel_center", "wheel", "front left", "center")
    assert kp.identity_dict == {"front_rear": "front", "left_right": "left"}
    assert TAX.concept_of("animal_left_eye") == "eye"


def test_lowest_common_ancestor_and_shared_keypoints():
    assert TAX.lowest_common_ancestor("bus", "ambulance") == "road_vehicle"
    assert TAX.lowest_common_ancestor("car", "tractor") == "vehicle"
    assert TAX.lowest_common_ancestor("car", "car") == "car"
    assert TAX.lowest_common_ancestor("car", "mug") is None
    shared = TAX.shared_keypoints("car", "tractor")
    assert "vehicle_wheel_front_left_center" in shared and "road_vehicle_sidemirror_left" not in shared
    assert TAX.shared_keypoints("car", "mug") == []
    assert "pourer_spout_front_tip" in TAX.shared_keypoints("teapot", "kettle")
    assert "pourer_spout_front_tip" not in TAX.shared_keypoints("teapot", "mug")


def test_related_categories_stay_within_a_supercategory():
    rel = TAX.related_categories("bus")
    assert "ambulance" in rel and "tractor" in rel and "bus" not in rel
    assert all(TAX.supercategory(c) == "transportation" for c in rel)
    assert set(TAX.related_categories("chair")) == {
        c for c in TAX.categories if TAX.supercategory(c) == "furniture"
    } - {"chair"}


def test_taxonomy_table_has_one_row_per_category_keypoint():
    df = TAX.to_table()
    assert len(df) == sum(len(TAX.category_keypoints(c)) for c in TAX.categories)
    assert not df.duplicated(["category", "keypoint"]).any()
    row = df[(df.category == "bus") & (df.keypoint == "vehicle_wheel_rear_right_center")].iloc[0]
    assert (row.front_rear, row.left_right, row.concept) == ("rear", "right", "wheel_center")


def test_unknown_category_and_keypoint_give_clear_errors():
    with pytest.raises(KeyError, match="unknown category 'unicorn'"):
        TAX.category_keypoints("unicorn")
    with pytest.raises(KeyError, match="unknown keypoint"):
        TAX.concept_of("vehicle_wing_tip")


def test_small_document_parses():
    tax = parse_taxonomy(copy.deepcopy(SMALL), "small")
    assert tax.categories == ["car", "bus", "mug"]
    assert tax.category_keypoints("bus") == [
        "vehicle_wheel_front_left_center",
        "vehicle_wheel_rear_right_center",
    ]
    assert tax.category_keypoints("mug") == ["mug_handle_top"]
    assert tax.related_categories("car") == ["bus"]
    assert identity_of("upper left") == (("left_right", "left"), ("top_bottom", "upper"))


def test_unknown_parent_is_rejected_with_the_entry_named():
    doc = copy.deepcopy(SMALL)
    doc["categories"]["bus"]["parent"] = "lorry"
    with pytest.raises(TaxonomyError, match=r"categories\.bus: unknown parent 'lorry'"):
        parse_taxonomy(doc, "small")


def test_duplicate_name_is_rejected():
    doc = copy.deepcopy(SMALL)
    doc["nodes"]["car"] = {"supercategory": "things", "keypoints": []}
    with pytest.raises(TaxonomyError, match="duplicate name 'car'"):
        parse_taxonomy(doc, "small")


def test_keypoint_without_concept_is_rejected():
    doc = copy.deepcopy(SMALL)
    doc["categories"]["mug"]["keypoints"][0].pop("concept")
    with pytest.raises(TaxonomyError, match=r"categories\.mug, keypoint entry 1: keypoint without `concept`"):
        parse_taxonomy(doc, "small")


def test_undeclared_concept_and_parent_cycle_are_rejected():
    doc = copy.deepcopy(SMALL)
    doc["categories"]["mug"]["keypoints"][0]["concept"] = "spout_tip"
    with pytest.raises(TaxonomyError, match="not under `concepts:`"):
        parse_taxonomy(doc, "small")
    doc = copy.deepcopy(SMALL)
    doc["nodes"]["vehicle"]["parent"] = "car"
    with pytest.raises(TaxonomyError, match="cycle"):
        parse_taxonomy(doc, "small")


def test_missing_file_and_bad_yaml_are_reported(tmp_path):
    with pytest.raises(TaxonomyError, match="does not exist"):
        load_taxonomy(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("supercategories: [a\n")
    with pytest.raises(TaxonomyError, match="not valid YAML"):
        load_taxonomy(bad)
