"""Image pairs, correspondences, evaluation sample and checks, on tiny hand-made keypoint tables."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from soco_pipeline.pairs import (
    PairConfig,
    build_correspondences,
    build_image_pairs,
    candidate_keypoints,
    check_correspondences,
    check_image_pairs,
    iter_correspondences,
    pair_counts,
    related_category_pairs,
    soc_counts,
    write_correspondences,
)
from soco_pipeline.pairs.image_pairs import _sample_without_replacement
from soco_pipeline.schemas import CorrespondenceSchema, ImagePairSchema, validate
from soco_pipeline.taxonomy import load_taxonomy

pytestmark = pytest.mark.unit

TAX = load_taxonomy()
WHEELS = [
    "vehicle_wheel_front_left_center",
    "vehicle_wheel_front_right_center",
    "vehicle_wheel_rear_left_center",
    "vehicle_wheel_rear_right_center",
]
HEADLIGHTS = ["vehicle_headlight_front_left", "vehicle_headlight_front_right"]


def make_tables(spec: dict[str, tuple[str, list[str] | str]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """image_id -> (category, visible keypoint names or 'all') as image_set and keypoints tables."""
    images, rows = [], []
    for image_id, (cat, visible) in spec.items():
        images.append({"image_id": image_id, "category": cat})
        for i, kp in enumerate(TAX.category_keypoints(cat)):
            v = visible == "all" or kp in visible
            rows.append(
                {
                    "image_id": image_id,
                    "category": cat,
                    "keypoint": kp,
                    "concept": TAX.concept_of(kp),
                    "x": 10.0 + i if v else np.nan,
                    "y": 20.0 + i if v else np.nan,
                    "visible": v,
                    "n_annotators": 3,
                    "spread": 0.5,
                }
            )
    return pd.DataFrame(images), pd.DataFrame(rows)


def corr_frame(pairs: pd.DataFrame, kps: pd.DataFrame, **kw) -> pd.DataFrame:
    return (
        build_correspondences(pairs, kps, TAX, **kw)
        .to_pandas()
        .astype({c: str for c in ["pair_id", "level", "kind", "src_keypoint", "trg_keypoint", "concept"]})
    )


def rows(df: pd.DataFrame, pair_id: str, kind: str) -> set[tuple]:
    sel = df[(df.pair_id == pair_id) & (df.kind == kind)]
    return set(zip(sel.src_keypoint, sel.trg_keypoint, sel.concept, sel.geo, sel.n_candidates, strict=True))


def test_car_four_wheels_give_16_cc_and_4_soc_rows():
    images, kps = make_tables({"car_0000": ("car", WHEELS), "car_0001": ("car", WHEELS)})
    pairs = build_image_pairs(images, kps, TAX, PairConfig())
    assert list(pairs.pair_id) == ["intra:car_0000:car_0001", "intra:car_0001:car_0000"]
    assert (
        (pairs.level == "intra").all()
        and (pairs.ancestor == "car").all()
        and (pairs.pair_group == "car").all()
    )
    corr = corr_frame(pairs, kps)
    pid = "intra:car_0000:car_0001"
    assert rows(corr, pid, "soc") == {(w, w, "wheel_center", True, 4) for w in WHEELS}
    assert rows(corr, pid, "cc") == {(a, b, "wheel_center", True, 4) for a in WHEELS for b in WHEELS}
    assert len(corr[corr.pair_id == pid]) == 20
    # Rows are grouped by pair, SOC before CC.
    first = corr[corr.pair_id == pid]
    assert list(first.kind) == ["soc"] * 4 + ["cc"] * 16


def test_soc_geo_flags_and_candidate_counts():
    images, kps = make_tables(
        {
            "car_0000": ("car", [WHEELS[0], *HEADLIGHTS]),
            "car_0001": ("car", [WHEELS[0], WHEELS[2], HEADLIGHTS[0]]),
        }
    )
    pairs = build_image_pairs(images, kps, TAX, PairConfig())
    corr = corr_frame(pairs, kps)
    pid = "intra:car_0000:car_0001"
    assert rows(corr, pid, "soc") == {
        (WHEELS[0], WHEELS[0], "wheel_center", True, 2),
        (HEADLIGHTS[0], HEADLIGHTS[0], "headlight", False, 1),
    }
    assert rows(corr, pid, "cc") == {
        (WHEELS[0], WHEELS[0], "wheel_center", True, 2),
        (WHEELS[0], WHEELS[2], "wheel_center", True, 2),
        (HEADLIGHTS[0], HEADLIGHTS[0], "headlight", False, 1),
        (HEADLIGHTS[1], HEADLIGHTS[0], "headlight", False, 1),
    }
    # The reverse pair counts candidates on its own target (car_0000: one wheel, two headlights).
    back = "intra:car_0001:car_0000"
    assert rows(corr, back, "soc") == {
        (WHEELS[0], WHEELS[0], "wheel_center", False, 1),
        (HEADLIGHTS[0], HEADLIGHTS[0], "headlight", True, 2),
    }
    assert list(soc_counts(pairs, kps, TAX)) == [2, 2]


def test_cross_pairs_only_through_shared_ancestor_keypoints():
    images, kps = make_tables(
        {
            "car_0000": ("car", "all"),
            "tractor_0000": ("tractor", "all"),
            "dog_0000": ("dog", "all"),
        }
    )
    pairs = build_image_pairs(images, kps, TAX, PairConfig())
    cross = pairs[pairs.level == "cross"]
    assert set(zip(cross.src_image, cross.trg_image, cross.ancestor, cross.pair_group, strict=True)) == {
        ("car_0000", "tractor_0000", "vehicle", "tractor"),
        ("tractor_0000", "car_0000", "vehicle", "car"),
    }  # car <-> dog share no keypoints: no pairs
    corr = corr_frame(pairs, kps)
    pid = "cross:car_0000:tractor_0000"
    vehicle = TAX.shared_keypoints("car", "tractor")
    assert all(k.startswith("vehicle_") for k in vehicle) and len(vehicle) == 8
    assert {r[0] for r in rows(corr, pid, "soc")} == set(vehicle)
    cc = corr[(corr.pair_id == pid) & (corr.kind == "cc")]
    assert set(cc.src_keypoint) | set(cc.trg_keypoint) == set(vehicle)
    assert set(cc.concept) == {"wheel_center", "headlight", "taillight"}
    assert (corr[corr.pair_id == pid].level == "cross").all()
    # Candidates are counted among the shared keypoints only: 4 wheels, 2 headlights, 2 taillights.
    assert set(corr[corr.pair_id == pid].n_candidates) == {4, 2}
    cands = candidate_keypoints(cross, kps, TAX)
    assert set(cands[cands.pair_id == pid].keypoint.astype(str)) == set(vehicle)
    assert related_category_pairs(TAX, ["car", "dog"]).empty


def test_tables_follow_the_canonical_schemas():
    images, kps = make_tables(
        {
            "car_0000": ("car", "all"),
            "car_0001": ("car", WHEELS),
            "bus_0000": ("bus", "all"),
        }
    )
    pairs = build_image_pairs(images, kps, TAX, PairConfig(seed=3))
    validate(pairs, ImagePairSchema, "image_pairs")
    validate(corr_frame(pairs, kps), CorrespondenceSchema, "correspondences")
    assert (pairs.pair_id == pairs.level + ":" + pairs.src_image + ":" + pairs.trg_image).all()
    assert check_image_pairs(pairs, TAX, images) == []
    assert check_correspondences(build_correspondences(pairs, kps, TAX), pairs, kps, TAX) == []


def test_cross_sources_are_seeded_distinct_and_not_by_id_order():
    spec = {f"car_{i:04d}": ("car", WHEELS) for i in range(30)}
    spec |= {f"tractor_{i:04d}": ("tractor", WHEELS) for i in range(30)}
    images, kps = make_tables(spec)
    pairs = build_image_pairs(images, kps, TAX, PairConfig(seed=0, cross_sources_per_category=2))
    cross = pairs[pairs.level == "cross"]
    per_target = cross.groupby("trg_image").src_image.agg(["size", "nunique"])
    assert len(per_target) == 60 and (per_target["size"] == 2).all() and (per_target["nunique"] == 2).all()
    assert (cross.src_category != cross.trg_category).all()
    # Draws spread over the source images instead of taking the first ids.
    assert cross.src_image.nunique() > 30
    again = build_image_pairs(images, kps, TAX, PairConfig(seed=0, cross_sources_per_category=2))
    pd.testing.assert_frame_equal(pairs, again)
    other = build_image_pairs(images, kps, TAX, PairConfig(seed=1, cross_sources_per_category=2))
    assert set(other.pair_id) != set(pairs.pair_id)
    every = build_image_pairs(images, kps, TAX, PairConfig(cross_sources_per_category="all"))
    assert (every.level == "cross").sum() == 2 * 30 * 30


def test_results_do_not_depend_on_input_row_order():
    spec = {f"cow_{i:04d}": ("cow", "all" if i % 2 else ["animal_nose", "animal_left_eye"]) for i in range(6)}
    spec |= {f"pig_{i:04d}": ("pig", "all") for i in range(5)}
    images, kps = make_tables(spec)
    cfg = PairConfig(seed=2, intra_per_category=9, cross_per_category=3)
    pairs = build_image_pairs(images, kps, TAX, cfg)
    shuffled = build_image_pairs(
        images.sample(frac=1, random_state=1), kps.sample(frac=1, random_state=2), TAX, cfg
    )
    pd.testing.assert_frame_equal(pairs, shuffled)
    pd.testing.assert_frame_equal(
        corr_frame(pairs, kps), corr_frame(pairs, kps.sample(frac=1, random_state=3))
    )


def test_sample_without_replacement_is_distinct_and_in_range():
    n = np.array([1, 2, 3, 10, 40] * 200)
    out = _sample_without_replacement(n, 3, np.random.default_rng(0))
    for row, k in zip(out, n, strict=True):
        drawn = row[row >= 0]
        assert len(drawn) == min(3, k) and len(set(drawn)) == len(drawn) and (drawn < k).all()
    # Each offset of a 10-element range is drawn about equally often.
    counts = np.bincount(out[n == 10].ravel(), minlength=10)
    assert counts.min() > 0.6 * counts.mean()


def test_evaluation_sample_quota_determinism_and_seed():
    spec = {f"car_{i:04d}": ("car", WHEELS[: 1 + i % 4]) for i in range(12)}
    spec["car_0099"] = ("car", [])  # no visible keypoint: none of its pairs is eligible
    spec |= {f"bus_{i:04d}": ("bus", WHEELS) for i in range(6)}
    images, kps = make_tables(spec)
    cfg = PairConfig(seed=5, intra_per_category=20, cross_per_category=7)
    pairs = build_image_pairs(images, kps, TAX, cfg)
    ev = pairs[pairs.evaluated]
    assert ev.groupby(["level", "pair_group"]).size().to_dict() == {
        ("cross", "bus"): 6,
        ("cross", "car"): 7,
        ("intra", "bus"): 20,
        ("intra", "car"): 20,
    }  # cross bus: 6 targets x 1 source = 6 pairs, fewer than the quota
    assert not ev.src_image.eq("car_0099").any() and not ev.trg_image.eq("car_0099").any()
    assert (soc_counts(ev, kps, TAX) > 0).all()
    pd.testing.assert_series_equal(pairs.evaluated, build_image_pairs(images, kps, TAX, cfg).evaluated)
    other = build_image_pairs(
        images, kps, TAX, PairConfig(seed=6, intra_per_category=20, cross_per_category=7)
    )
    assert (other.evaluated != pairs.evaluated).any()

    everything = build_image_pairs(
        images, kps, TAX, PairConfig(intra_per_category="all", cross_per_category="all")
    )
    eligible = soc_counts(everything, kps, TAX) > 0
    involves_empty = (everything.src_image == "car_0099") | (everything.trg_image == "car_0099")
    assert (everything.evaluated.to_numpy() == eligible).all() and (eligible == ~involves_empty).all()


def test_evaluation_sample_does_not_favour_low_ids():
    images, kps = make_tables({f"dog_{i:04d}": ("dog", "all") for i in range(25)})  # 600 intra pairs
    ranks = []
    for seed in range(5):
        pairs = build_image_pairs(images, kps, TAX, PairConfig(seed=seed, intra_per_category=60))
        order = pairs.pair_id.rank().to_numpy() / len(pairs)
        ranks.append(order[pairs.evaluated.to_numpy()].mean())
        assert pairs.evaluated.sum() == 60
    assert 0.4 < np.mean(ranks) < 0.6  # a uniform sample has mean relative rank 0.5; id order gives 0.05


def test_counts_stream_and_evaluated_only(tmp_path):
    images, kps = make_tables(
        {
            "car_0000": ("car", WHEELS),
            "car_0001": ("car", WHEELS),
            "car_0002": ("car", WHEELS[:2]),
            "tractor_0000": ("tractor", [WHEELS[0], HEADLIGHTS[0], "farm_vehicle_exhaustpipe_top_tip"]),
        }
    )
    pairs = build_image_pairs(images, kps, TAX, PairConfig(intra_per_category=2, cross_per_category="all"))
    table = build_correspondences(pairs, kps, TAX)
    counts = pair_counts(pairs, table).set_index(["level", "kind"])
    corr = table.to_pandas()
    for level in ("intra", "cross"):
        sel = corr[corr.level == level]
        assert counts.loc[(level, "image_pairs"), "total"] == (pairs.level == level).sum()
        assert counts.loc[(level, "soc"), "total"] == (sel.kind == "soc").sum()
        assert counts.loc[(level, "soc_geo"), "total"] == ((sel.kind == "soc") & sel.geo).sum()
        assert counts.loc[(level, "cc"), "total"] == (sel.kind == "cc").sum()
    assert counts.loc[("intra", "image_pairs"), "evaluated"] == 2
    assert counts.loc[("intra", "soc"), "total"] == 4 + 2 + 4 + 2 + 2 + 2  # pairs among the three cars

    # Streaming in tiny batches writes the same rows; evaluated_only keeps only the sample's pairs.
    path = str(tmp_path / "out" / "correspondences.parquet")
    n = write_correspondences(pairs, kps, TAX, path, batch_rows=7)
    written = pq.read_table(path).to_pandas().astype(str)
    assert n == len(corr) and written.equals(corr.astype(str))
    assert len(list(iter_correspondences(pairs, kps, TAX, batch_rows=7))) > 3
    ev = build_correspondences(pairs, kps, TAX, evaluated_only=True).to_pandas()
    assert set(ev.pair_id.astype(str)) == set(pairs.pair_id[pairs.evaluated])
    assert (
        counts.loc[("intra", "cc"), "evaluated"] + counts.loc[("cross", "cc"), "evaluated"]
        == (ev.kind == "cc").sum()
    )


def test_empty_inputs_give_empty_tables(tmp_path):
    images, kps = make_tables({"car_0000": ("car", WHEELS)})
    pairs = build_image_pairs(images, kps, TAX, PairConfig())
    assert pairs.empty and list(pairs.columns)[0] == "pair_id"
    assert build_correspondences(pairs, kps, TAX).num_rows == 0
    path = str(tmp_path / "c.parquet")
    assert write_correspondences(pairs, kps, TAX, path) == 0
    assert pq.read_table(path).num_rows == 0


def test_check_image_pairs_catches_bad_rows():
    images, kps = make_tables(
        {"car_0000": ("car", WHEELS), "car_0001": ("car", WHEELS), "dog_0000": ("dog", "all")}
    )
    pairs = build_image_pairs(images, kps, TAX, PairConfig())
    bad = pd.concat(
        [
            pairs,
            pd.DataFrame(
                [
                    {
                        "pair_id": "intra:car_0000:car_0000",
                        "level": "intra",
                        "pair_group": "car",
                        "src_image": "car_0000",
                        "trg_image": "car_0000",
                        "src_category": "car",
                        "trg_category": "car",
                        "ancestor": "car",
                        "evaluated": False,
                    },
                    {
                        "pair_id": "cross:car_0000:dog_0000",
                        "level": "cross",
                        "pair_group": "dog",
                        "src_image": "car_0000",
                        "trg_image": "dog_0000",
                        "src_category": "car",
                        "trg_category": "dog",
                        "ancestor": "vehicle",
                        "evaluated": False,
                    },
                    pairs.iloc[0].to_dict(),
                ]
            ),
        ],
        ignore_index=True,
    )
    problems = "\n".join(check_image_pairs(bad, TAX, images))
    assert "pair an image with itself" in problems and "intra:car_0000:car_0000" in problems
    assert "share no keypoints" in problems and "cross:car_0000:dog_0000" in problems
    assert "share a pair_id" in problems
    unknown = "\n".join(
        check_image_pairs(pairs.assign(trg_category="spaceship", pair_group="spaceship"), TAX)
    )
    assert "missing from the taxonomy" in unknown


def test_check_correspondences_catches_bad_rows():
    images, kps = make_tables({"car_0000": ("car", "all"), "tractor_0000": ("tractor", WHEELS)})
    pairs = build_image_pairs(images, kps, TAX, PairConfig())
    good = corr_frame(pairs, kps)
    assert check_correspondences(good, pairs, kps, TAX) == []
    base = good[(good.pair_id == "cross:car_0000:tractor_0000") & (good.kind == "soc")].iloc[0].to_dict()
    bad = pd.DataFrame(
        [
            base
            | {
                "src_keypoint": "road_vehicle_sidemirror_left",
                "trg_keypoint": "road_vehicle_sidemirror_left",
                "concept": "mirror",
            },  # not shared by car and tractor, not in the tractor at all
            base | {"trg_keypoint": WHEELS[1]},  # SOC between different keypoints
            base | {"n_candidates": 3, "geo": True},  # wrong candidate count
            base | {"pair_id": "intra:nope:none"},
            base
            | {
                "src_keypoint": HEADLIGHTS[0],
                "trg_keypoint": HEADLIGHTS[0],
                "concept": "headlight",
            },  # invisible
        ]
    )
    problems = "\n".join(check_correspondences(bad, pairs, kps, TAX))
    for what in (
        "do not share",
        "two different keypoints",
        "n_candidates",
        "missing from image_pairs",
        "not visible in the target image",
    ):
        assert what in problems, what
    assert "road_vehicle_sidemirror_left" in problems


def test_bad_input_gets_a_clear_error():
    images, kps = make_tables({"car_0000": ("car", WHEELS), "car_0001": ("car", WHEELS)})
    wrong = kps.copy()
    wrong.loc[0, "keypoint"] = "vehicle_wheel_middle"
    wrong.loc[0, "visible"] = True
    with pytest.raises(ValueError, match="vehicle_wheel_middle"):
        build_image_pairs(images, wrong, TAX, PairConfig())
    mislabelled = kps.assign(concept=np.where(kps.keypoint == WHEELS[0], "headlight", kps.concept))
    with pytest.raises(ValueError, match="concept differs"):
        build_image_pairs(images, mislabelled, TAX, PairConfig())
    with pytest.raises(ValueError, match="duplicate image ids"):
        build_image_pairs(pd.concat([images, images]), kps, TAX, PairConfig())
    with pytest.raises(ValueError, match="spaceship"):
        build_image_pairs(images.assign(category="spaceship"), kps, TAX, PairConfig())
    with pytest.raises(ValueError, match="lacks columns"):
        build_image_pairs(images, kps.drop(columns="visible"), TAX, PairConfig())
    pairs = build_image_pairs(images, kps, TAX, PairConfig())
    with pytest.raises(ValueError, match="missing from the taxonomy"):
        build_correspondences(pairs.assign(trg_category="spaceship"), kps, TAX)
    with pytest.raises(ValueError, match="intra_per_category"):
        PairConfig(intra_per_category=-1)
    with pytest.raises(ValueError, match="cross_sources_per_category"):
        PairConfig(cross_sources_per_category="some")
