"""Per-sample hashes and task hashes (identical inputs under two storage roots agree; one moved keypoint
changes exactly the pairs that use it), deterministic subsets, and the results record's schema."""

import json

import numpy as np
import pandas as pd
import pytest

from soco_pipeline.evaluation.protocol import load_protocol
from soco_pipeline.evaluation.subsets import (
    SubsetError,
    SubsetRule,
    apply_item_subset,
    apply_pair_subset,
    mark_partial,
    partial_display,
)
from soco_pipeline.taxonomy import load_taxonomy
from soco_pipeline.trust import hashes
from soco_pipeline.trust.provenance import (
    RecordError,
    build_record,
    diff_records,
    git_revision,
    validate_record,
)
from tests.fixtures_data import canonical_tables

pytestmark = pytest.mark.unit

MATCH = load_protocol().matching_hash()


def _tables(root):
    images, kps, pairs, corr = canonical_tables(str(root), load_taxonomy(), ("car", "bus", "dog"), 4, seed=3)
    return images, kps, pairs, corr


def _hashes(images, kps, pairs, corr):
    return hashes.pair_hashes(pairs, corr, kps, images, MATCH)


def test_identical_inputs_under_two_roots_give_identical_task_hashes(tmp_path):
    a, b = _tables(tmp_path / "root_a"), _tables(tmp_path / "root_b")
    assert a[0]["uri"].iloc[0] != b[0]["uri"].iloc[0]  # different storage roots
    ha, hb = _hashes(*a), _hashes(*b)
    assert len(ha) == len(a[2]) and ha["pair_hash"].str.fullmatch("[0-9a-f]{16}").all()
    assert ha["pair_hash"].is_unique
    assert (ha["pair_hash"].to_numpy() == hb["pair_hash"].to_numpy()).all()
    assert hashes.task_hash(ha.pair_id, ha.pair_hash) == hashes.task_hash(hb.pair_id, hb.pair_hash)
    # row order does not matter
    shuffled = ha.sample(frac=1.0, random_state=0)
    assert hashes.task_hash(shuffled.pair_id, shuffled.pair_hash) == hashes.task_hash(
        ha.pair_id, ha.pair_hash
    )


def test_one_moved_keypoint_changes_exactly_the_pairs_that_use_it(tmp_path):
    images, kps, pairs, corr = _tables(tmp_path)
    before = _hashes(images, kps, pairs, corr).set_index("pair_id")["pair_hash"]
    # a (target image, keypoint) used by exactly one pair's correspondences
    uses = corr.merge(pairs[["pair_id", "trg_image"]], on="pair_id")
    per = uses.groupby(["trg_image", "trg_keypoint"])["pair_id"].nunique()
    image, keypoint = per[per == 1].index[0]
    users = set(uses.loc[(uses.trg_image == image) & (uses.trg_keypoint == keypoint), "pair_id"])
    src_users = set(
        corr.merge(pairs[["pair_id", "src_image"]], on="pair_id").query(
            "src_image == @image and src_keypoint == @keypoint"
        )["pair_id"]
    )
    moved = kps.copy()
    at = (moved.image_id == image) & (moved.keypoint == keypoint)
    assert at.sum() == 1
    moved.loc[at, "x"] += 1.5
    after = _hashes(images, moved, pairs, corr).set_index("pair_id")["pair_hash"]
    changed = set(before.index[before != after.reindex(before.index)])
    assert changed == users | src_users and len(users) == 1
    assert hashes.task_hash(before.index, before) != hashes.task_hash(after.index, after)


def test_a_changed_image_or_protocol_changes_the_hash(tmp_path):
    images, kps, pairs, corr = _tables(tmp_path)
    base = _hashes(images, kps, pairs, corr)["pair_hash"]
    digests = hashes.image_digests(images)
    digests.iloc[0] = "0" * 16
    other_image = hashes.pair_hashes(pairs, corr, kps, images, MATCH, digests)["pair_hash"]
    uses = pairs.src_image.eq(images.image_id.iloc[0]) | pairs.trg_image.eq(images.image_id.iloc[0])
    assert ((base != other_image).to_numpy() == uses.to_numpy()).all()
    assert (hashes.pair_hashes(pairs, corr, kps, images, "another-protocol")["pair_hash"] != base).all()


def test_limit_subset_is_deterministic_nested_and_per_category(tmp_path):
    _, _, pairs, _ = _tables(tmp_path)
    ev = pairs.evaluated.astype(bool)
    two = apply_pair_subset(pairs, SubsetRule(limit=2))
    one = apply_pair_subset(pairs, SubsetRule(limit=1))
    assert (two.evaluated.astype(bool) <= ev).all()
    per = two[two.evaluated].groupby("pair_group").size()
    full = pairs[ev].groupby("pair_group").size()
    assert (per == np.minimum(full, 2).reindex(per.index)).all()
    assert set(one.loc[one.evaluated, "pair_id"]) <= set(two.loc[two.evaluated, "pair_id"])
    again = apply_pair_subset(pairs.sample(frac=1.0, random_state=1), SubsetRule(limit=2))
    assert set(again.loc[again.evaluated, "pair_id"]) == set(two.loc[two.evaluated, "pair_id"])
    assert pairs.evaluated.astype(bool).equals(ev)  # the input is untouched


def test_explicit_ids_and_unknown_ids(tmp_path):
    _, _, pairs, _ = _tables(tmp_path)
    ids = tuple(pairs.loc[pairs.evaluated.astype(bool), "pair_id"].iloc[:3])
    sub = apply_pair_subset(pairs, SubsetRule(pair_ids=ids))
    assert tuple(sorted(sub.loc[sub.evaluated, "pair_id"])) == tuple(sorted(ids))
    with pytest.raises(SubsetError, match="not in the evaluated sample"):
        apply_pair_subset(pairs, SubsetRule(pair_ids=("nope",)))
    rule = SubsetRule(limit=3, pair_ids=ids)
    assert SubsetRule.from_json(rule.to_json()) == rule and SubsetRule().to_json() == ""


def test_item_subset_keeps_whole_rotation_groups():
    items = pd.DataFrame(
        {
            "setting": np.repeat(["vis", "desc"], 16),
            "g_index": np.tile(np.repeat(range(4), 4), 2),
            "rotation": np.tile(range(4), 8),
        }
    )
    sub = apply_item_subset(items, SubsetRule(items_per_setting=2))
    assert sub.groupby("setting")["g_index"].nunique().to_dict() == {"desc": 2, "vis": 2}
    assert (sub.groupby(["setting", "g_index"]).size() == 4).all()
    assert set(apply_item_subset(items, SubsetRule(item_ids=(1,)))["g_index"]) == {1}


def test_partial_rows_are_marked_in_the_leaderboard():
    board = pd.DataFrame({"backbone": ["a", "b"], "soc": [50.0, 40.0]})
    marked = mark_partial(board, {"b": SubsetRule(limit=5).to_json()})
    assert marked["partial"].tolist() == [False, True] and marked["subset"].tolist() == [
        "",
        "limit=5/category",
    ]
    assert partial_display(marked)["backbone"].tolist() == ["a", "b [partial: limit=5/category]"]


def _record(**over):
    ci = pd.DataFrame(
        [
            {
                "model": "m",
                "metric": "soc",
                "value": 50.0,
                "ci95_lo_boot_category": 40.0,
                "ci95_hi_boot_category": 60.0,
                "se_cluster_image": 4.0,
                "ci95_lo_cluster_image_logit": 42.0,
                "ci95_hi_cluster_image_logit": 58.0,
                "n_units": 10,
                "n_categories": 3,
                "n_clusters": 8,
            }
        ]
    )
    args = dict(
        model="m",
        family="soco_correspondence",
        spec={"kind": "oracle"},
        spec_hash="abc",
        protocol={"name": "p"},
        protocol_hash="def",
        intervals=ci,
        n_samples={"pairs": {"requested": 10, "evaluated": 10}},
        subset={"partial": False, "rule": {}, "description": ""},
        sample_hashes={"pairs": {"p1": "0123456789abcdef"}},
        task_hashes={"pairs": "0123456789abcdef"},
        device="cpu",
        timing={"stages": {"predictions": {"wall_s": 1.5, "gpu_s": None}}, "source": "test"},
    )
    return build_record(**(args | over))


def test_record_validates_and_names_a_bad_key():
    rec = _record()
    for key in (
        "versions",
        "git_hash",
        "environment",
        "timing",
        "n-samples",
        "subset",
        "task_hashes",
        "input",
    ):
        assert key in rec
    assert rec["versions"]["torch"] != "not installed" and rec["versions"]["dagster"]
    json.dumps(rec, allow_nan=False)
    bad = json.loads(json.dumps(rec))
    bad["task_hashes"]["pairs"] = "xyz"
    with pytest.raises(RecordError, match="task_hashes/pairs"):
        validate_record(bad)


def test_git_revision_outside_a_checkout_is_unknown(tmp_path):
    assert git_revision(tmp_path) == {"commit": "unknown", "dirty": None}


def test_diff_records_names_the_changed_samples():
    a = _record()
    b = _record(
        sample_hashes={"pairs": {"p1": "fedcba9876543210", "p2": "0000000000000000"}},
        task_hashes={"pairs": "1111111111111111"},
    )
    d = diff_records(a, b)
    assert not d["same_inputs"] and d["task_hashes"]["pairs"] == ["0123456789abcdef", "1111111111111111"]
    assert d["samples"]["pairs"] == {"changed": ["p1"], "only_in_a": [], "only_in_b": ["p2"]}
    assert "date" not in d["keys"]
    assert diff_records(a, a)["same_inputs"] and not diff_records(a, a)["samples"]
