"""SOCO release export and import: the round trip and bad pair files."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from soco_pipeline.data.soco_export import export_soco_release
from soco_pipeline.sources import read_soco_release
from soco_pipeline.storage import join
from soco_pipeline.taxonomy import load_taxonomy
from tests.fixtures_data import canonical_tables, release_renaming, rename_release

pytestmark = pytest.mark.unit

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


# ------------------------------------------------------------------ a release with its own vocabulary
RENAME_CATEGORIES = ("car", "bus", "tractor", "dog", "horse")


def _named(df: pd.DataFrame, mapping: dict[str, str], columns: list[str]) -> pd.DataFrame:
    """`df` with the names of `columns` renamed through `mapping`."""
    return df.assign(**{c: df[c].map(lambda v: mapping.get(v, v)) for c in columns})


@pytest.fixture(scope="module")
def renamed(tmp_path_factory):
    """Our tables exported as a release, and the same release with every name changed."""
    root = str(tmp_path_factory.mktemp("renamed"))
    tables = canonical_tables(root, TAX, categories=RENAME_CATEGORIES)
    export_soco_release(*tables, join(root, "plain"), TAX)
    mapping = release_renaming(TAX)
    rename_release(join(root, "plain"), join(root, "renamed"), mapping)
    return read_soco_release(join(root, "plain")), read_soco_release(join(root, "renamed")), mapping


def test_renamed_release_brings_its_own_taxonomy(renamed):
    plain, other, mapping = renamed
    tax = other.taxonomy
    assert not set(tax.categories) & set(TAX.categories)
    assert not set(tax.keypoints) & set(TAX.keypoints) and not set(tax.concepts) & set(TAX.concepts)
    assert sorted(tax.categories) == sorted(mapping[c] for c in RENAME_CATEGORIES)
    # The same tree under the new names: related categories, shared keypoints, concepts, super-categories.
    for a in RENAME_CATEGORIES:
        assert tax.supercategory(mapping[a]) == TAX.supercategory(a)
        assert tax.category_keypoints(mapping[a]) == [mapping[k] for k in TAX.category_keypoints(a)]
        for b in RENAME_CATEGORIES:
            assert set(tax.shared_keypoints(mapping[a], mapping[b])) == {
                mapping[k] for k in TAX.shared_keypoints(a, b)
            }
    assert tax.lowest_common_ancestor(mapping["car"], mapping["bus"]) == mapping["road_vehicle"]
    assert tax.lowest_common_ancestor(mapping["dog"], mapping["horse"]) == mapping["quadruped"]
    assert all(
        tax.keypoints[mapping[k]].concept == mapping[d.concept]
        for k, d in TAX.keypoints.items()
        if mapping[k] in tax.keypoints
    )
    # The un-renamed release gives back the taxonomy's own names and the same table under both.
    want = plain.taxonomy.to_table()
    got = other.taxonomy.to_table()
    inverse = {v: k for k, v in mapping.items()}
    # (the renaming also renames a part whose noun is a concept's name, e.g. the part "eye")
    got = _named(got, inverse, ["category", "keypoint", "concept", "node", "part"])
    got["lineage"] = got["lineage"].map(lambda s: "/".join(inverse.get(p, p) for p in s.split("/")))
    # Orders that seeded draws depend on do not depend on the names: keypoints within a category
    # (the release's ids), concepts (the release's concept ids).
    for t in (got, want):
        t["rank"] = t.groupby("category")["keypoint_order"].rank()
    text = ["category", "supercategory", "keypoint", "concept", "node", "lineage", "part", "where", "at"]
    key = ["category", "keypoint"]
    pd.testing.assert_frame_equal(
        _sorted(got[[*text, "rank", "concept_order"]], key),
        _sorted(want[[*text, "rank", "concept_order"]], key),
        check_dtype=False,
    )


def test_renamed_release_gives_the_same_tables_checks_and_four_choice_items(renamed):
    from soco_pipeline.pairs import check_correspondences, check_image_pairs
    from soco_pipeline.pairs.four_choice import build_four_choice

    plain, other, mapping = renamed
    cats = ["category"]
    pd.testing.assert_frame_equal(
        _sorted(_named(other.images, {v: k for k, v in mapping.items()}, cats)[IMAGE_COLS], ["image_id"]),
        _sorted(plain.images[IMAGE_COLS], ["image_id"]),
    )
    pd.testing.assert_frame_equal(
        _sorted(other.keypoints, ["image_id", "keypoint"]).drop(columns=["keypoint", "concept", "category"]),
        _sorted(plain.keypoints.pipe(_named, mapping, ["keypoint"]), ["image_id", "keypoint"]).drop(
            columns=["keypoint", "concept", "category"]
        ),
    )
    pair_names = ["pair_group", "src_category", "trg_category", "ancestor"]
    pd.testing.assert_frame_equal(
        _sorted(other.image_pairs, ["pair_id"]),
        _sorted(_named(plain.image_pairs, mapping, pair_names), ["pair_id"]),
    )
    keys = ["pair_id", "kind", "src_keypoint", "trg_keypoint"]
    pd.testing.assert_frame_equal(
        _sorted(other.correspondences, keys),
        _sorted(_named(plain.correspondences, mapping, ["src_keypoint", "trg_keypoint", "concept"]), keys),
    )
    for rel in (plain, other):
        assert check_image_pairs(rel.image_pairs, rel.taxonomy, rel.images) == []
        assert check_correspondences(rel.correspondences, rel.image_pairs, rel.keypoints, rel.taxonomy) == []
    items = [
        build_four_choice(rel.image_pairs, rel.correspondences, rel.keypoints, seed=3, taxonomy=rel.taxonomy)
        for rel in (plain, other)
    ]
    assert len(items[0]) > 0
    options = ["src_keypoint", "option_a", "option_b", "option_c", "option_d"]
    pd.testing.assert_frame_equal(items[1], _named(items[0], mapping, options))


def test_release_without_metadata_imports_with_a_warning(tmp_path):
    from soco_pipeline.data.descriptions import build_descriptions
    from soco_pipeline.sources.release_taxonomy import ReleaseWarning

    out = join(str(tmp_path), "SOCOv1")
    tables = canonical_tables(str(tmp_path), TAX, categories=("car", "bus"))
    export_soco_release(*tables, out, TAX)
    import shutil

    shutil.rmtree(join(out, "Metadata"))
    with pytest.warns(ReleaseWarning, match=r"Metadata/keypoint_taxonomy.json does not exist.*'unknown'"):
        rel = read_soco_release(out)
    assert set(rel.images.supercategory) == {"unknown"}
    assert set(rel.taxonomy.categories) == {"car", "bus"}
    assert rel.taxonomy.lowest_common_ancestor("car", "bus") == "road_vehicle"  # from the cross pairs
    desc = build_descriptions(rel.taxonomy).set_index(["category", "keypoint"]).description
    assert desc["bus", "vehicle_wheel_front_left_center"] == "the vehicle wheel front left center of a bus"


def test_metadata_lacking_parts_warns_naming_the_file_and_part(tmp_path):
    from soco_pipeline.sources.release_taxonomy import ReleaseWarning

    out = join(str(tmp_path), "SOCOv1")
    export_soco_release(*canonical_tables(str(tmp_path), TAX, categories=("car", "bus")), out, TAX)
    meta = join(out, "Metadata", "keypoint_taxonomy.json")
    doc = json.loads(open(meta).read())
    doc["categories"] = list(doc["categories"])  # a list: not the mapping the import reads
    del doc["templates"]
    open(meta, "w").write(json.dumps(doc))
    with pytest.warns(ReleaseWarning) as caught:
        rel = read_soco_release(out)
    messages = [str(w.message) for w in caught]
    assert any(m.startswith(meta) and "`categories`" in m and "'unknown'" in m for m in messages), messages
    assert any(m.startswith(meta) and "`templates`" in m for m in messages), messages
    assert rel.taxonomy.supercategory("car") == "unknown"
    # Keypoints still carry their own templates, so descriptions keep their wording.
    assert rel.taxonomy.keypoints["vehicle_wheel_front_left_center"].template.startswith("the center point")


def test_bad_release_inputs_name_the_file(tmp_path):
    out = join(str(tmp_path), "SOCOv1")
    export_soco_release(*canonical_tables(str(tmp_path), TAX, categories=("car", "bus")), out, TAX)
    meta = join(out, "Metadata", "keypoint_taxonomy.json")
    good_meta = open(meta).read()
    open(meta, "w").write('{"categories": ')
    with pytest.raises(ValueError, match=rf"{meta}: not valid JSON"):
        read_soco_release(out)
    open(meta, "w").write("[1, 2]")
    with pytest.raises(ValueError, match=rf"{meta}: malformed: the top level is a JSON list"):
        read_soco_release(out)
    open(meta, "w").write(good_meta)

    # One keypoint, two concepts in two pair files.
    path = _first_pair(out)
    good = open(path).read()
    doc = json.loads(good)
    kp = doc["src_keypoints"][0]
    kp["concept_name"] = "something_else"
    for g in doc["concept_matches"]:
        if kp["name"] in g["src_keypoints"]:
            g["src_keypoints"].remove(kp["name"])
    open(path, "w").write(json.dumps(doc))
    with pytest.raises(
        ValueError, match=rf"keypoint {kp['name']!r} has concept .* but .* gives it concept"
    ) as e:
        read_soco_release(out)
    assert path in str(e.value)
    open(path, "w").write(good)

    # A pair file naming a keypoint its image's annotation lacks.
    doc = json.loads(good)
    ann = join(out, "KeypointAnnotations", doc["src_category"], doc["src_image"].replace(".JPEG", ".json"))
    ann_doc = json.loads(open(ann).read())
    name = doc["src_keypoints"][0]["name"]
    ann_doc["keypoints"] = [k for k in ann_doc["keypoints"] if k["name"] != name]
    open(ann, "w").write(json.dumps(ann_doc))
    with pytest.raises(
        ValueError, match=rf"names keypoint {name!r} of image .* which its annotation {ann} lacks"
    ):
        read_soco_release(out)


def test_train_test_splits_become_a_split_column(tmp_path):
    root = str(tmp_path)
    images, keypoints, pairs, corr = canonical_tables(root, TAX, categories=("car", "bus"))
    intra = pairs.level == "intra"
    # Every other intra pair is in a split, evaluated or not: train / test alternately.
    picked = np.flatnonzero(intra.to_numpy())[::2]
    pairs["split"] = ""
    pairs.loc[pairs.index[picked], "split"] = np.where(np.arange(len(picked)) % 2 == 0, "train", "test")
    assert (pairs.split != "").any() and (~pairs.evaluated & (pairs.split != "")).any()
    out = join(root, "SOCOv1")
    export_soco_release(images, keypoints, pairs, corr, out, TAX)
    rel = read_soco_release(out)
    want = pairs[pairs.evaluated | (pairs.split != "")]
    pd.testing.assert_frame_equal(
        _sorted(rel.image_pairs[list(pairs.columns)], ["pair_id"]),
        _sorted(want, ["pair_id"]),
        check_dtype=False,
    )
    keys = ["pair_id", "kind", "src_keypoint", "trg_keypoint"]
    pd.testing.assert_frame_equal(
        _sorted(rel.correspondences[list(corr.columns)], keys),
        _sorted(corr[corr.pair_id.isin(want.pair_id)], keys),
        check_dtype=False,
    )
    # A pair listed in both splits is an error naming both files.
    from soco_pipeline.storage import filesystem

    fs, base = filesystem(out)
    train = sorted(fs.glob(f"{base}/PairAnnotations/trainsplits/train/*/*.json"))[0]
    fs.pipe_file(train.replace("/train/", "/test/").replace(".json", "-copy.json"), fs.cat_file(train))
    with pytest.raises(
        ValueError, match=r"is in the (train|test) split, but .* puts it in the (train|test) split"
    ):
        read_soco_release(out)


def test_metadata_lists_of_named_entries_read_as_mappings(tmp_path):
    out = join(str(tmp_path), "SOCOv1")
    export_soco_release(*canonical_tables(str(tmp_path), TAX, categories=("car", "dog")), out, TAX)
    meta = join(out, "Metadata", "keypoint_taxonomy.json")
    doc = json.loads(open(meta).read())
    doc["categories"] = [{"name": c, **v} for c, v in doc["categories"].items()]
    open(meta, "w").write(json.dumps(doc))
    rel = read_soco_release(out)
    assert (
        rel.taxonomy.supercategory("dog") == "animals"
        and rel.taxonomy.supercategory("car") == "transportation"
    )
