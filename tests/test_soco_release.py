"""SOCO release export and import: the round trip and bad pair files."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from soco_pipeline.sources import read_soco_release
from soco_pipeline.sources.soco_export import export_soco_release
from soco_pipeline.storage import join
from soco_pipeline.taxonomy import load_taxonomy
from tests.fixtures_data import canonical_tables

TAX = load_taxonomy()
# What the release carries (see soco_pipeline/export.py): images without source/uri/pose.
IMAGE_COLS = [
    "image_id",
    "category",
    "supercategory",
    "width",
    "height",
    "bbox_l",
    "bbox_t",
    "bbox_r",
    "bbox_b",
]


def _sorted(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    return df.sort_values(keys).reset_index(drop=True)


@pytest.fixture(params=["local", "memory"])
def exported(request, tmp_path):
    root = str(tmp_path) if request.param == "local" else f"memory://release-{tmp_path.name}"
    tables = canonical_tables(root, TAX)
    out = join(root, "SOCOv1")
    counts = export_soco_release(*tables, out, TAX)
    return tables, out, counts


def test_round_trip_gives_identical_tables(exported):
    (images, keypoints, pairs, corr), out, counts = exported
    rel = read_soco_release(out, TAX)
    evaluated = pairs[pairs.evaluated]
    assert counts["pairs"] == len(evaluated) > 0
    pd.testing.assert_frame_equal(
        _sorted(rel.images[IMAGE_COLS], ["image_id"]),
        _sorted(images[IMAGE_COLS], ["image_id"]),
        check_dtype=False,
    )
    assert (rel.images.source == "soco").all() and rel.images.azimuth.isna().all()
    cols = list(keypoints.columns)
    pd.testing.assert_frame_equal(
        _sorted(rel.keypoints[cols], ["image_id", "keypoint"]),
        _sorted(keypoints, ["image_id", "keypoint"]),
        check_dtype=False,
    )
    pd.testing.assert_frame_equal(
        _sorted(rel.image_pairs[list(pairs.columns)], ["pair_id"]),
        _sorted(evaluated, ["pair_id"]),
        check_dtype=False,
    )
    keys = ["pair_id", "kind", "src_keypoint", "trg_keypoint"]
    want = corr[corr.pair_id.isin(evaluated.pair_id)]
    assert want.geo.any() and (want.level == "cross").any()
    pd.testing.assert_frame_equal(
        _sorted(rel.correspondences[list(corr.columns)], keys), _sorted(want, keys), check_dtype=False
    )


def test_pair_files_follow_the_official_layout(exported):
    (images, _, pairs, _), out, _ = exported
    from soco_pipeline.storage import filesystem

    fs, base = filesystem(out)
    files = sorted(fs.glob(f"{base}/PairAnnotations/cross/*/*.json"))
    doc = json.loads(fs.cat_file(files[0]))
    for field in (
        "pair_id",
        "pair_group",
        "src_category",
        "trg_category",
        "src_image",
        "trg_image",
        "src_imsize",
        "trg_imsize",
        "src_bndbox",
        "trg_bndbox",
        "src_keypoints",
        "trg_keypoints",
        "semantic_overlap",
        "concept_matches",
    ):
        assert field in doc
    assert isinstance(doc["pair_id"], int) and doc["pair_group"] == doc["trg_category"]
    name = files[0].rsplit("/", 1)[-1]
    assert name == f"{doc['pair_id']:05d}-{doc['src_image'][:-5]}-{doc['trg_image'][:-5]}.json"
    assert set(doc["src_keypoints"][0]) == {"id", "name", "pos", "concept_id", "concept_name"}
    assert fs.exists(f"{base}/Images/{doc['src_category']}/{doc['src_image']}")
    assert fs.exists(f"{base}/Metadata/keypoint_taxonomy.json") and fs.exists(
        f"{base}/Metadata/filename_mapping.json"
    )
    with pytest.raises(FileExistsError):
        export_soco_release(*[images, *exported[0][1:]], out, TAX)


def _first_pair(out: str) -> str:
    from soco_pipeline.storage import filesystem

    fs, base = filesystem(out)
    return sorted(fs.glob(f"{base}/PairAnnotations/intra/*/*.json"))[0]


def test_bad_pair_files_name_the_file_and_field(tmp_path):
    root = str(tmp_path)
    out = join(root, "SOCOv1")
    export_soco_release(*canonical_tables(root, TAX, categories=("car",)), out, TAX)
    path = _first_pair(out)
    good = open(path).read()
    open(path, "w").write("{not json")
    with pytest.raises(ValueError, match=rf"{path}: not valid JSON"):
        read_soco_release(out, TAX)
    doc = json.loads(good)
    del doc["semantic_overlap"]
    open(path, "w").write(json.dumps(doc))
    with pytest.raises(ValueError, match=rf"{path}: missing field 'semantic_overlap'"):
        read_soco_release(out, TAX)
    doc = json.loads(good)
    del doc["trg_keypoints"][0]["concept_name"]
    open(path, "w").write(json.dumps(doc))
    with pytest.raises(ValueError, match=rf"{path}: trg_keypoints\[0\] missing field 'concept_name'"):
        read_soco_release(out, TAX)


def test_official_style_files_without_our_extra_fields(tmp_path):
    root = str(tmp_path)
    out = join(root, "SOCOv1")
    tables = canonical_tables(root, TAX, categories=("car", "bus"))
    export_soco_release(*tables, out, TAX)
    from soco_pipeline.storage import filesystem

    fs, base = filesystem(out)
    for f in fs.glob(f"{base}/PairAnnotations/*/*/*.json"):
        doc = json.loads(fs.cat_file(f))
        for extra in ("pair_key", "level", "ancestor", "category"):
            doc.pop(extra)
        fs.pipe_file(f, json.dumps(doc).encode())
    fs.rm(f"{base}/KeypointAnnotations", recursive=True)
    rel = read_soco_release(out, TAX)
    pairs = tables[2][tables[2].evaluated]
    pd.testing.assert_frame_equal(
        _sorted(rel.image_pairs[list(pairs.columns)], ["pair_id"]),
        _sorted(pairs, ["pair_id"]),
        check_dtype=False,
    )
    assert rel.keypoints.visible.all() and (rel.keypoints.n_annotators == 0).all()
