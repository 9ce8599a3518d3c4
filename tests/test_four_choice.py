"""Four-choice items built from the evaluated SOC correspondences."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from soco_pipeline.pairs import PairConfig, build_correspondences, build_image_pairs
from soco_pipeline.pairs.four_choice import OPTION_COLUMNS, build_four_choice
from soco_pipeline.schemas import FourChoiceSchema, validate
from soco_pipeline.taxonomy import load_taxonomy
from tests.test_pairs import HEADLIGHTS, WHEELS, make_tables

pytestmark = pytest.mark.unit

TAX = load_taxonomy()


def setup(spec, **cfg):
    images, kps = make_tables(spec)
    pairs = build_image_pairs(images, kps, TAX, PairConfig(**cfg))
    corr = build_correspondences(pairs, kps, TAX)
    return pairs, corr, kps


def visible_of(kps: pd.DataFrame) -> dict[str, set[str]]:
    vis = kps[kps.visible]
    return vis.groupby("image_id").keypoint.agg(set).to_dict()


def test_items_have_the_right_answer_once_and_distinct_options():
    spec = {f"car_{i:04d}": ("car", "all") for i in range(3)}
    spec |= {f"dog_{i:04d}": ("dog", "all") for i in range(3)}
    pairs, corr, kps = setup(spec, intra_per_category="all", cross_per_category="all")
    items = build_four_choice(pairs, corr, kps, seed=0, taxonomy=TAX)
    validate(items, FourChoiceSchema, "four_choice")
    opts = items[OPTION_COLUMNS].to_numpy()
    right = opts[np.arange(len(items)), items.answer.to_numpy()]
    assert (right == items.src_keypoint.to_numpy()).all()
    assert ((opts == items.src_keypoint.to_numpy()[:, None]).sum(axis=1) == 1).all()
    assert all(len(set(row)) == 4 for row in opts)
    # One item per evaluated SOC correspondence (every target here has >= 4 visible keypoints).
    corr_df = corr.to_pandas()
    assert len(items) == (corr_df.kind == "soc").sum()
    # Options are visible target keypoints.
    vis = visible_of(kps)
    trg = items.pair_id.map(pairs.set_index("pair_id").trg_image)
    assert all(set(row) <= vis[t] for row, t in zip(opts, trg, strict=True))
    # The answer's position is spread over A-D.
    assert set(items.answer) == {0, 1, 2, 3}


def test_same_concept_distractor_when_one_exists():
    pairs, corr, kps = setup(
        {
            "car_0000": ("car", "all"),
            "car_0001": ("car", [*WHEELS, HEADLIGHTS[0], "vehicle_taillight_rear_left"]),
        }
    )
    items = build_four_choice(pairs, corr, kps, seed=1, taxonomy=TAX)
    concept = {k: TAX.concept_of(k) for k in TAX.keypoints}
    target = items[items.pair_id == "intra:car_0000:car_0001"]
    assert len(target) == 6
    for _, it in target.iterrows():
        others = [it[c] for c in OPTION_COLUMNS if it[c] != it.src_keypoint]
        same = [o for o in others if concept[o] == concept[it.src_keypoint]]
        if concept[it.src_keypoint] == "wheel_center":
            assert same, it.to_dict()  # three other wheels are visible: one must be offered
        else:
            assert not same  # the only visible headlight / taillight is the right one


def test_deterministic_and_seed_sensitive():
    spec = {f"horse_{i:04d}": ("horse", "all") for i in range(4)}
    pairs, corr, kps = setup(spec)
    a = build_four_choice(pairs, corr, kps, seed=7, taxonomy=TAX)
    pd.testing.assert_frame_equal(a, build_four_choice(pairs, corr, kps, seed=7, taxonomy=TAX))
    # A pandas (string) correspondences table gives the same items.
    pd.testing.assert_frame_equal(
        a, build_four_choice(pairs, corr.to_pandas().astype(str), kps, seed=7, taxonomy=TAX)
    )
    b = build_four_choice(pairs, corr, kps, seed=8, taxonomy=TAX)
    assert not a[OPTION_COLUMNS + ["answer"]].equals(b[OPTION_COLUMNS + ["answer"]])
    assert list(a.pair_id) == sorted(a.pair_id)


def test_only_evaluated_pairs_and_cross_shared_keypoints():
    spec = {f"car_{i:04d}": ("car", "all") for i in range(3)}
    spec |= {f"tractor_{i:04d}": ("tractor", "all") for i in range(3)}
    pairs, corr, kps = setup(spec, intra_per_category=2, cross_per_category=1)
    items = build_four_choice(pairs, corr, kps, seed=0, taxonomy=TAX)
    assert set(items.pair_id) == set(pairs.pair_id[pairs.evaluated])
    cross = items[items.pair_id.str.startswith("cross:")]
    assert len(cross) == 2 * 8  # one evaluated pair per target category, 8 shared keypoints each
    assert all(o.startswith("vehicle_") for o in cross[OPTION_COLUMNS].to_numpy().ravel())


def test_targets_with_fewer_than_four_candidates_are_skipped():
    pairs, corr, kps = setup(
        {
            "car_0000": ("car", "all"),
            "car_0001": ("car", [WHEELS[0], WHEELS[1], HEADLIGHTS[0]]),  # 3 visible keypoints
        }
    )
    items = build_four_choice(pairs, corr, kps, seed=0, taxonomy=TAX)
    assert set(items.pair_id) == {"intra:car_0001:car_0000"}
    assert len(items) == 3
    none = build_four_choice(pairs.assign(evaluated=False), corr, kps, seed=0, taxonomy=TAX)
    assert none.empty and list(none.columns) == ["pair_id", "src_keypoint", *OPTION_COLUMNS, "answer"]
