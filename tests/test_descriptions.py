"""Keypoint descriptions from (category, concept, at, where, part noun)."""

from __future__ import annotations

import pytest

from soco_pipeline.data.descriptions import build_descriptions, describe, load_templates, with_article
from soco_pipeline.taxonomy import load_taxonomy

pytestmark = pytest.mark.unit

TAX = load_taxonomy()


@pytest.fixture(scope="module")
def table():
    return build_descriptions(TAX, load_templates())


def lookup(table, category, keypoint):
    return table.set_index(["category", "keypoint"]).loc[(category, keypoint), "description"]


def test_paper_examples(table):
    assert (
        lookup(table, "bus", "vehicle_wheel_front_left_center")
        == "the center point of the front left wheel of a bus"
    )
    assert lookup(table, "dog", "animal_left_eye") == "the left eye of a dog"
    assert lookup(table, "teapot", "pourer_spout_front_tip") == "the tip of the front spout of a teapot"


def test_empty_where_underscores_and_articles(table):
    assert lookup(table, "horse", "animal_nose") == "the nose of a horse"  # empty where and at
    assert lookup(table, "cow", "animal_tail_mid") == "the middle of the tail of a cow"
    assert (
        lookup(table, "police_car", "road_vehicle_sidemirror_left") == "the left side mirror of a police car"
    )
    assert lookup(table, "ambulance", "ambulance_siren_left") == "the left siren of an ambulance"
    assert with_article("elephant") == "an elephant" and with_article("bus") == "a bus"
    assert not table.description.str.contains("  |_").any()


def test_every_category_keypoint_has_one(table):
    expected = sum(len(TAX.category_keypoints(c)) for c in TAX.categories)
    assert len(table) == expected and table.description.is_unique
    assert not table.duplicated(["category", "keypoint"]).any()
    # Within a category the descriptions tell the keypoints apart.
    assert not table.duplicated(["category", "description"]).any()


def test_missing_template_or_field_names_the_keypoint():
    templates = load_templates()
    broken = {"at": {k: v for k, v in templates["at"].items() if k != "center"}, "concepts": {}}
    with pytest.raises(ValueError, match="vehicle_wheel_front_left_center.*at 'center'"):
        describe("bus", "vehicle_wheel_front_left_center", TAX, broken)
    bad_field = {"at": {**templates["at"], "": "the {colour} {part} of {a_category}"}, "concepts": {}}
    with pytest.raises(ValueError, match=r"animal_left_eye.*unknown fields \['colour'\]"):
        describe("dog", "animal_left_eye", TAX, bad_field)
