"""Click aggregation and Animal3D keypoint pass-through."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from soco_pipeline.data.keypoints import aggregate_clicks, aggregate_keypoints, animal_keypoints
from soco_pipeline.sources import SourceConfig
from soco_pipeline.taxonomy import load_taxonomy
from tests.fixtures_data import clicks_for, image_row

pytestmark = pytest.mark.unit

TAX = load_taxonomy()
CFG = SourceConfig()
WHEEL = "vehicle_wheel_front_left_center"
MIRROR = "road_vehicle_sidemirror_left"


def bus_set(n: int = 1, w: int = 200, h: int = 100) -> pd.DataFrame:
    return pd.DataFrame(
        [image_row(f"bus_{i:04d}", "bus", "transportation", f"/x/bus_{i}.JPEG", w, h) for i in range(n)]
    )


def click_rows(rows: list[tuple]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["image_id", "keypoint", "annotator", "x", "y", "visible"])


def test_median_after_outlier_removal_and_spread():
    clicks = click_rows(
        [
            ("bus_0000", WHEEL, 0, 100.0, 50.0, True),
            ("bus_0000", WHEEL, 1, 102.0, 51.0, True),
            ("bus_0000", WHEEL, 2, 160.0, 90.0, True),  # outlier: far beyond max(3*1.48*MAD, 3% of 200)
            ("bus_0000", WHEEL, 3, 101.0, 49.0, True),
        ]
    )
    kp, stats = aggregate_clicks(clicks, bus_set(), TAX, CFG)
    row = kp[kp.keypoint == WHEEL].iloc[0]
    assert (row.x, row.y, row.n_annotators, bool(row.visible)) == (101.0, 50.0, 3, True)
    kept = np.array([[100.0, 50.0], [102.0, 51.0], [101.0, 49.0]])
    expected = np.sqrt((kept[:, 0].var(ddof=1) + kept[:, 1].var(ddof=1)) / 2) / 200
    assert row.spread == pytest.approx(expected)
    assert stats["outliers_dropped"] == 1 and stats["median_spread"] == pytest.approx(expected)


def test_every_category_keypoint_gets_a_row_and_majority_visibility():
    clicks = click_rows(
        [
            ("bus_0000", MIRROR, 0, 10.0, 10.0, True),
            ("bus_0000", MIRROR, 1, np.nan, np.nan, False),
            ("bus_0000", MIRROR, 2, np.nan, np.nan, False),
            ("bus_0000", WHEEL, 0, 30.0, 40.0, True),
            ("bus_0000", WHEEL, 1, 31.0, 40.0, True),
            ("bus_0000", WHEEL, 2, np.nan, np.nan, False),
        ]
    )
    kp, stats = aggregate_clicks(clicks, bus_set(), TAX, CFG)
    assert sorted(kp.keypoint) == sorted(TAX.category_keypoints("bus"))
    mirror = kp[kp.keypoint == MIRROR].iloc[0]
    assert not mirror.visible and np.isnan(mirror.x) and mirror.n_annotators == 3
    wheel = kp[kp.keypoint == WHEEL].iloc[0]
    assert wheel.visible and wheel.x == 30.5 and wheel.n_annotators == 2
    assert stats["visibility_disagreements"] == 2
    assert stats["keypoints_without_clicks"] == len(TAX.category_keypoints("bus")) - 2


def test_dataset_median_spread_tracks_injected_noise():
    images = bus_set(30, 400, 300)
    rng = np.random.default_rng(1)
    kps = TAX.category_keypoints("bus")
    truth = pd.DataFrame([(i, k) for i in images.image_id for k in kps], columns=["image_id", "keypoint"])
    truth["x"], truth["y"] = rng.uniform(50, 350, len(truth)), rng.uniform(50, 250, len(truth))
    truth["visible"], truth["long_side"] = True, 400.0
    kp, stats = aggregate_clicks(clicks_for(truth, sigma=0.01, seed=2), images, TAX, CFG)
    # Median of sqrt((s_x^2 + s_y^2) / 2) with 3 clicks is sigma * sqrt(median(chi2_4) / 4) ~ 0.92 sigma.
    assert 0.8 * 0.01 < stats["median_spread"] < 1.05 * 0.01
    err = np.hypot(kp.x.to_numpy() - truth.x.to_numpy(), kp.y.to_numpy() - truth.y.to_numpy()) / 400
    assert np.quantile(err, 0.95) < 0.02


def test_clicks_on_rejected_images_are_ignored():
    rejected = pd.DataFrame(
        {
            "image_id": ["bus_0009"],
            "category": ["bus"],
            "source": ["imagenet3d"],
            "uri": ["/x"],
            "reason": ["crowded"],
        }
    )
    clicks = click_rows([("bus_0000", WHEEL, 0, 5.0, 5.0, True), ("bus_0009", WHEEL, 0, 5.0, 5.0, True)])
    _, stats = aggregate_clicks(clicks, bus_set(), TAX, CFG, rejected=rejected)
    assert stats["n_clicks_on_rejected_images"] == 1


@pytest.mark.parametrize(
    "rows, match",
    [
        (
            [("bus_0000", "car_door_handle_front_left", 0, 5.0, 5.0, True)],
            r"not in the image's category.*"
            r"image_id='bus_0000', keypoint='car_door_handle_front_left', annotator=0",
        ),
        ([("bus_0000", "no_such_keypoint", 1, 5.0, 5.0, True)], "keypoint='no_such_keypoint'"),
        ([("bus_0042", WHEEL, 0, 5.0, 5.0, True)], r"not in image_set.*image_id='bus_0042'"),
        ([("bus_0000", WHEEL, 0, np.nan, 5.0, True)], "NaN coordinates"),
        ([("bus_0000", WHEEL, 0, 250.0, 5.0, True)], r"outside the image bounds.*x=250\.0"),
        ([("bus_0000", WHEEL, 0, 5.0, 5.0, True), ("bus_0000", WHEEL, 0, 6.0, 5.0, True)], "duplicate"),
    ],
)
def test_bad_clicks_raise_clear_errors(rows, match):
    with pytest.raises(ValueError, match=match):
        aggregate_clicks(click_rows(rows), bus_set(), TAX, CFG)


def test_duplicate_image_ids_and_unclicked_images_raise():
    clicks = click_rows([("bus_0000", WHEEL, 0, 5.0, 5.0, True)])
    with pytest.raises(ValueError, match="duplicate image ids.*bus_0000"):
        aggregate_clicks(clicks, pd.concat([bus_set(), bus_set()]), TAX, CFG)
    with pytest.raises(ValueError, match="without any click.*bus_0001"):
        aggregate_clicks(clicks, bus_set(2), TAX, CFG)


def dog_raw(image_id="dog_0000", x=10.0):
    names = [k for k in TAX.category_keypoints("dog")]
    return pd.DataFrame(
        {
            "image_id": image_id,
            "category": "dog",
            "keypoint": names,
            "x": x,
            "y": 12.0,
            "visible": [i % 2 == 0 for i in range(len(names))],
        }
    )


def test_animal_keypoints_pass_through():
    images = pd.DataFrame([image_row("dog_0000", "dog", "animals", "/x/d.JPEG", source="animal3d")])
    kp = animal_keypoints(pd.concat([dog_raw(), dog_raw("dog_rejected")]), images, TAX)
    assert len(kp) == 26 and set(kp.image_id) == {"dog_0000"}
    assert (kp.n_annotators == 1).all() and kp.spread.isna().all()
    assert kp.x[kp.visible].eq(10.0).all() and kp.x[~kp.visible].isna().all()
    assert kp.concept[kp.keypoint == "animal_left_mouth"].item() == "mouth_corner"
    with pytest.raises(ValueError, match=r"outside the image bounds.*dog_0000"):
        animal_keypoints(dog_raw(x=500.0), images, TAX)


def test_aggregate_keypoints_concatenates_both_sources():
    images = pd.concat(
        [bus_set(), pd.DataFrame([image_row("dog_0000", "dog", "animals", "/d", source="animal3d")])]
    )
    clicks = click_rows([("bus_0000", WHEEL, a, 5.0 + a, 5.0, True) for a in range(3)])
    raw = pd.concat([clicks.assign(origin="clicks"), dog_raw().assign(origin="animal3d")], ignore_index=True)
    kp, stats = aggregate_keypoints(raw, images, TAX, CFG)
    assert len(kp) == len(TAX.category_keypoints("bus")) + 26
    assert stats["n_keypoints_total"] == len(kp)
