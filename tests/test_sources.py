"""Readers: ImageNet3D, Animal3D and click files through fsspec paths."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from soco_pipeline.sources import (
    ANIMAL3D_KEYPOINTS,
    RAW_KEYPOINT_COLUMNS,
    SourceConfig,
    animal_keypoint_names,
    read_animal3d,
    read_candidates,
    read_clicks,
    read_imagenet3d,
    read_raw_keypoints,
)
from soco_pipeline.storage import join, write_bytes_atomic, write_parquet_atomic
from soco_pipeline.taxonomy import load_taxonomy
from tests.fixtures_data import animal_record, npz_bytes, obj, write_animal3d, write_imagenet3d

pytestmark = pytest.mark.unit

TAX = load_taxonomy()


@pytest.fixture(params=["local", "memory"])
def root(request, tmp_path):
    if request.param == "local":
        return str(tmp_path / "data")
    return f"memory://soco-test-{tmp_path.name}"


def test_imagenet3d_one_row_per_image_with_objects_summarised(root):
    write_imagenet3d(
        join(root, "in3d"),
        [
            {"image_id": "bus_0000", "category": "bus", "objects": [obj(bbox=(1, 2, 30, 40))]},
            {
                "image_id": "bus_0001",
                "category": "bus",
                "objects": [obj(bbox=(0, 0, 5, 5)), obj(bbox=(2, 2, 60, 40))],
            },
            {"image_id": "mug_0000", "category": "mug", "image": "missing"},
        ],
    )
    df = read_imagenet3d(join(root, "in3d"))
    assert list(df.image_id) == ["bus_0000", "bus_0001", "mug_0000"]
    first = df.iloc[0]
    assert (first.bbox_l, first.bbox_t, first.bbox_r, first.bbox_b) == (1, 2, 30, 40)
    assert (first.n_objects, first.dense, first.object_status, first.width, first.height) == (
        1,
        "dense_no",
        "status_good",
        64,
        48,
    )
    assert first.azimuth == pytest.approx(0.3) and first.uri == join(
        root, "in3d", "images", "bus", "bus_0000.JPEG"
    )
    # The salient object of a crowded image is its largest box.
    assert df.iloc[1].n_objects == 2 and df.iloc[1].bbox_r == 60
    assert read_imagenet3d(join(root, "in3d"), categories=["mug"]).image_id.tolist() == ["mug_0000"]


def test_npz_without_annotations_names_the_file(tmp_path):
    write_bytes_atomic(str(tmp_path / "annotations" / "bus" / "bus_0000.npz"), npz_bytes(None))
    with pytest.raises(ValueError, match=r"bus_0000\.npz.*without an `annotations` entry"):
        read_imagenet3d(str(tmp_path))
    write_bytes_atomic(str(tmp_path / "annotations" / "bus" / "bus_0000.npz"), b"not a zip")
    with pytest.raises(ValueError, match=r"bus_0000\.npz: not a readable npz"):
        read_imagenet3d(str(tmp_path))


def test_animal3d_keypoints_map_onto_taxonomy_in_order(root):
    rec = animal_record("dog_0000")
    write_animal3d(join(root, "a3d"), [rec, animal_record("dog_0001", keypoints=[[1, 2, 1]] * 5)])
    images, kps = read_animal3d(join(root, "a3d"), TAX)
    assert images.keypoints_valid.tolist() == [True, False]
    assert images.iloc[0].bbox_r == rec["bbox"][0] + rec["bbox"][2]
    assert len(kps) == 26 and set(kps.image_id) == {"dog_0000"}
    assert kps.keypoint.tolist() == [f"animal_{n}" for n in ANIMAL3D_KEYPOINTS]
    assert kps.keypoint.tolist() == TAX.category_keypoints("dog")
    arr = np.asarray(rec["keypoint_2d"])
    np.testing.assert_array_equal(kps.x.to_numpy(), arr[:, 0])
    np.testing.assert_array_equal(kps.visible.to_numpy(), arr[:, 2] > 0)
    assert animal_keypoint_names(TAX, "horse")[4] == "animal_right_front_paw"


def test_clicks_csv_and_parquet(tmp_path):
    df = pd.DataFrame(
        {
            "image_id": ["a", "a"],
            "keypoint": ["k", "k"],
            "annotator": [0, 1],
            "x": [1.0, np.nan],
            "y": [2.0, np.nan],
            "visible": [True, False],
        }
    )
    write_parquet_atomic(df, str(tmp_path / "c.parquet"))
    csv = df.assign(visible=["true", "0"]).to_csv(index=False).encode()
    write_bytes_atomic(str(tmp_path / "c.csv"), csv)
    for name in ("c.parquet", "c.csv"):
        got = read_clicks(str(tmp_path / name))
        pd.testing.assert_frame_equal(got[df.columns.tolist()], df, check_dtype=False)
    write_bytes_atomic(
        str(tmp_path / "bad.csv"), df.assign(visible=["maybe", "no"]).to_csv(index=False).encode()
    )
    with pytest.raises(ValueError, match="visible='maybe'"):
        read_clicks(str(tmp_path / "bad.csv"))


def test_source_config_embedded_and_combined_readers(tmp_path):
    root = str(tmp_path)
    cfg = SourceConfig.embedded(root)
    assert cfg.imagenet3d_root == join(root, "imagenet3d") and cfg.clicks_path.endswith(
        "clicks/clicks.parquet"
    )
    assert cfg.with_categories(["bus"]).categories == ("bus",)
    write_imagenet3d(cfg.imagenet3d_root, [{"image_id": "bus_0000", "category": "bus"}])
    write_animal3d(cfg.animal3d_root, [animal_record("dog_0000")])
    wheel = "vehicle_wheel_front_left_center"
    write_parquet_atomic(
        pd.DataFrame(
            {
                "image_id": ["bus_0000"],
                "keypoint": [wheel],
                "annotator": [0],
                "x": [3.0],
                "y": [4.0],
                "visible": [True],
            }
        ),
        cfg.clicks_path,
    )
    cands = read_candidates(cfg, TAX)
    assert sorted(cands.source) == ["animal3d", "imagenet3d"]
    raw = read_raw_keypoints(cfg, TAX)
    assert list(raw.columns) == list(RAW_KEYPOINT_COLUMNS)
    assert (raw.origin == "animal3d").sum() == 26 and (raw.origin == "clicks").sum() == 1
    with pytest.raises(ValueError, match="min_bbox_fraction"):
        SourceConfig(min_bbox_fraction=2.0)
