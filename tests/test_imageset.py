"""The filtered image set: every rejection has its reason, nothing disappears silently."""

from __future__ import annotations

import pandas as pd
import pytest

from soco_pipeline.data.imageset import build_image_set
from soco_pipeline.schemas import ImageSchema
from soco_pipeline.sources import SourceConfig, read_animal3d, read_imagenet3d
from soco_pipeline.storage import join
from soco_pipeline.taxonomy import load_taxonomy
from tests.fixtures_data import animal_record, obj, write_animal3d, write_imagenet3d

pytestmark = pytest.mark.unit

TAX = load_taxonomy()
NAN = float("nan")

CASES = {
    "bus_0000": ({}, ""),
    "bus_0001": ({"objects": [obj(), obj(bbox=(0, 0, 8, 8))]}, "crowded"),
    "bus_0002": ({"objects": [obj(dense="dense_yes")]}, "crowded"),
    "bus_0003": ({"objects": [obj(status="bad")]}, "bad_status"),
    "bus_0004": ({"objects": [obj(status="barely")]}, "bad_status"),
    "bus_0005": ({"objects": [obj(bbox=(0, 0, 10, 10))]}, "too_small"),  # 100 / 3072 < 5%
    "bus_0006": ({"objects": [obj(azimuth=NAN)]}, "invalid_pose"),
    "bus_0007": ({"image": "missing"}, "missing_image"),
    "bus_0008": ({"image": "corrupt"}, "corrupt_image"),
    "bus_0009": ({"objects": []}, "invalid_pose"),  # no object, hence no pose
    "unicorn_0000": ({}, "unknown_category"),
}


@pytest.fixture
def candidates(tmp_path):
    items = [{"image_id": i, "category": i.split("_")[0], **spec} for i, (spec, _) in CASES.items()]
    write_imagenet3d(str(tmp_path / "in3d"), items)
    write_animal3d(
        str(tmp_path / "a3d"),
        [
            animal_record("dog_0000"),
            animal_record("dog_0001", keypoints=[[1.0, 1.0, 0.0]] * 26),  # all invisible
            animal_record("dog_0002", keypoints=[[1.0, 1.0, 1.0]] * 17),  # not 26x3
            animal_record("dog_0003", bbox=(0, 0, 3, 3)),
        ],
    )
    return pd.concat(
        [read_imagenet3d(str(tmp_path / "in3d")), read_animal3d(str(tmp_path / "a3d"), TAX)[0]],
        ignore_index=True,
    )


def test_reasons_and_nothing_disappears(candidates):
    kept, rejected = build_image_set(candidates, SourceConfig(), TAX)
    expected = {i: r for i, (_, r) in CASES.items() if r} | {
        "dog_0001": "invalid_keypoints",
        "dog_0002": "invalid_keypoints",
        "dog_0003": "too_small",
    }
    assert dict(zip(rejected.image_id, rejected.reason, strict=True)) == expected
    assert sorted(kept.image_id) == ["bus_0000", "dog_0000"]
    assert len(kept) + len(rejected) == len(candidates)
    ImageSchema.validate(kept)
    bus = kept.set_index("image_id").loc["bus_0000"]
    assert bus.supercategory == "transportation" and bus.uri.endswith("images/bus/bus_0000.JPEG")
    assert (bus.width, bus.height) == (64, 48)


def test_min_bbox_fraction_and_category_selection(candidates):
    kept, rejected = build_image_set(candidates, SourceConfig(min_bbox_fraction=0.9), TAX)
    assert kept.empty and set(rejected.reason) >= {"too_small"}
    kept, rejected = build_image_set(candidates, SourceConfig(categories=("dog",)), TAX)
    assert set(kept.category) | set(rejected.category) == {"dog"}


def test_duplicate_ids_raise(candidates):
    with pytest.raises(ValueError, match="duplicate image ids.*bus_0000"):
        build_image_set(pd.concat([candidates, candidates.iloc[:1]]), SourceConfig(), TAX)


def test_memory_filesystem_and_size_from_header():
    root = "memory://imageset-test"
    write_imagenet3d(join(root, "in3d"), [{"image_id": "car_0000", "category": "car", "w": 80, "h": 60}])
    cands = read_imagenet3d(join(root, "in3d")).assign(width=NAN, height=NAN)
    kept, rejected = build_image_set(cands, SourceConfig(), TAX)
    assert rejected.empty and (kept.width.item(), kept.height.item()) == (80, 60)


def _outside_by_one_pixel(image_id: str, w: int = 64, h: int = 48) -> dict:
    rec = animal_record(image_id, w=w, h=h)
    rec["keypoint_2d"][3][:2] = [w + 1.0, 20.0]  # one visible paw 1 px right of the image
    return rec


def test_an_animal3d_keypoint_one_pixel_outside_rejects_that_image_only(tmp_path):
    """The whole data stage (candidates, image set, keypoints) runs; only the bad image is left out."""
    from soco_pipeline.data.keypoints import aggregate_keypoints
    from soco_pipeline.sources import read_candidates, read_raw_keypoints

    root = str(tmp_path / "a3d")
    write_animal3d(
        root,
        [animal_record("dog_0000"), _outside_by_one_pixel("dog_0001"), animal_record("dog_0002", seed=2)],
    )
    cfg = SourceConfig(animal3d_root=root)
    kept, rejected = build_image_set(read_candidates(cfg, TAX), cfg, TAX)
    assert dict(zip(rejected.image_id, rejected.reason, strict=True)) == {
        "dog_0001": "keypoint_outside_image"
    }
    assert sorted(kept.image_id) == ["dog_0000", "dog_0002"]
    keypoints, _ = aggregate_keypoints(read_raw_keypoints(cfg, TAX), kept, TAX, cfg)
    assert set(keypoints.image_id) == {"dog_0000", "dog_0002"} and keypoints.visible.sum() == 40
    # On the edge (x == width) is inside.
    rec = animal_record("dog_0003")
    rec["keypoint_2d"][3][:2] = [64.0, 48.0]
    write_animal3d(root, [rec])
    kept, rejected = build_image_set(read_candidates(cfg, TAX), cfg, TAX)
    assert rejected.empty and list(kept.image_id) == ["dog_0003"]


def test_unknown_or_absent_categories_in_the_config_are_named(tmp_path):
    from soco_pipeline.sources import read_candidates

    root = str(tmp_path / "a3d")
    write_animal3d(root, [animal_record("dog_0000")])
    with pytest.raises(ValueError, match=r"'dgo' is not a taxonomy category \(did you mean 'dog'\?\)"):
        read_candidates(SourceConfig(animal3d_root=root, categories=("dog", "dgo")), TAX)
    with pytest.raises(ValueError, match=r"\['horse'\] have no images in the sources .*a3d"):
        read_candidates(SourceConfig(animal3d_root=root, categories=("dog", "horse")), TAX)
    assert list(read_candidates(SourceConfig(animal3d_root=root, categories=("dog",)), TAX).image_id) == [
        "dog_0000"
    ]


def _bus_clicks(image_ids: list[str], x: float = 20.0) -> pd.DataFrame:
    """Three annotators' visible clicks on one wheel centre of each bus image, at (x, 20)."""
    rows = [(i, "vehicle_wheel_front_left_center", a, x + a, 20.0, True) for i in image_ids for a in range(3)]
    return pd.DataFrame(rows, columns=["image_id", "keypoint", "annotator", "x", "y", "visible"])


def test_one_annotators_click_one_pixel_outside_rejects_that_image_only(tmp_path):
    """As for an Animal3D keypoint: the image set rejects the clicked image ("keypoint_outside_image") and
    the keypoints stage runs on the others (it used to stop, naming the click)."""
    from soco_pipeline.data.keypoints import aggregate_keypoints
    from soco_pipeline.sources import read_candidates, read_raw_keypoints

    root = str(tmp_path / "in3d")
    ids = ["bus_0000", "bus_0001", "bus_0002"]
    write_imagenet3d(root, [{"image_id": i, "category": "bus"} for i in ids])  # 64 x 48
    clicks = _bus_clicks(ids)
    clicks.loc[(clicks.image_id == "bus_0001") & (clicks.annotator == 2), "x"] = 65.0  # width 64: 1 px out
    clicks.loc[(clicks.image_id == "bus_0002") & (clicks.annotator == 2), "x"] = 64.0  # on the edge: inside
    clicks.to_parquet(tmp_path / "clicks.parquet")
    cfg = SourceConfig(imagenet3d_root=root, clicks_path=str(tmp_path / "clicks.parquet"))
    kept, rejected = build_image_set(read_candidates(cfg, TAX), cfg, TAX)
    assert dict(zip(rejected.image_id, rejected.reason, strict=True)) == {
        "bus_0001": "keypoint_outside_image"
    }
    assert sorted(kept.image_id) == ["bus_0000", "bus_0002"]
    keypoints, stats = aggregate_keypoints(read_raw_keypoints(cfg, TAX), kept, TAX, cfg)
    assert set(keypoints.image_id) == {"bus_0000", "bus_0002"} and keypoints.visible.sum() == 2
    assert stats["raw_rows_outside_image_set"] == 3  # the rejected image's clicks, counted


def test_clicks_on_an_unknown_image_id_are_named_not_dropped(tmp_path):
    """A click whose image id no image of the source has (a typo) stops the stage with the id and the file;
    clicks on a known image of another category (left out by the selection) are fine."""
    from soco_pipeline.sources import read_raw_keypoints

    root = str(tmp_path / "in3d")
    write_imagenet3d(
        root, [{"image_id": "bus_0000", "category": "bus"}, {"image_id": "car_0000", "category": "car"}]
    )
    _bus_clicks(["bus_0000", "car_0000"]).to_parquet(tmp_path / "good.parquet")
    cfg = SourceConfig(imagenet3d_root=root, clicks_path=str(tmp_path / "good.parquet"), categories=("bus",))
    assert len(read_raw_keypoints(cfg, TAX)) == 6
    _bus_clicks(["bus_0000", "bus_00O1"]).to_parquet(tmp_path / "typo.parquet")
    cfg = SourceConfig(imagenet3d_root=root, clicks_path=str(tmp_path / "typo.parquet"))
    with pytest.raises(ValueError, match=r"typo.parquet: 3 clicks on 1 image ids .*\['bus_00O1'\].*Fix"):
        read_raw_keypoints(cfg, TAX)
