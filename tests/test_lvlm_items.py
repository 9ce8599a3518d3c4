"""LVLM items: settings x rotations, the right letter per rotation, marks at the rotated options, texts."""

import pytest

from soco_pipeline.lvlm.items import LvlmItemsError, build_items
from soco_pipeline.lvlm.protocol import load_lvlm_protocol
from soco_pipeline.lvlm.render import render_key, render_path
from tests.lvlm_helpers import small_tables

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("items")
    t = small_tables(root)
    from dataclasses import replace

    proto = replace(load_lvlm_protocol(), items_per_group=5)
    items = build_items(
        t["four_choice"],
        t["image_pairs"],
        t["keypoints"],
        t["descriptions"],
        t["image_set"],
        proto,
        str(root / "renders"),
        seed=0,
        workers=2,
    )
    return items, t, proto, str(root / "renders")


def test_every_item_in_every_setting_and_rotation(built):
    items, t, proto, _ = built
    n = items.g_index.nunique()
    assert n == 5 * items.pair_group.nunique()
    assert len(items) == 3 * 4 * n and items["index"].is_unique
    per = items.groupby(["setting", "g_index"])
    assert (per.rotation.apply(sorted).map(tuple) == (0, 1, 2, 3)).all()
    # the right letter moves one step back per rotation; every letter is right once per item
    assert (per.answer.apply(lambda s: "".join(sorted(s))) == "ABCD").all()
    assert items.loc[items.setting == "desc", "src_render"].isna().all()
    assert items.loc[items.setting != "desc", "src_render"].notna().all()
    vis_desc = items[items.setting == "vis_desc"]
    assert all(d in q for d, q in zip(vis_desc.description, vis_desc.question, strict=True))
    assert not items.loc[items.setting == "vis", "question"].str.contains("{", regex=False).any()


def test_target_marks_follow_the_rotation(built):
    items, t, proto, root = built
    kp = t["keypoints"].set_index(["image_id", "keypoint"])
    uri = t["image_set"].set_index("image_id")["uri"]
    four = t["four_choice"].set_index(["pair_id", "src_keypoint"])
    for row in items[items.setting == "vis"].head(12).itertuples():
        options = four.loc[
            (row.pair_id, row.src_keypoint), ["option_a", "option_b", "option_c", "option_d"]
        ].tolist()
        shown = [options[(j + row.rotation) % 4] for j in range(4)]
        points = [tuple(kp.loc[(row.trg_image, k), ["x", "y"]].to_numpy(float)) for k in shown]
        assert row.trg_render == render_path(root, render_key(uri[row.trg_image], points, "ABCD", proto))
        right = four.loc[(row.pair_id, row.src_keypoint), "answer"]
        assert shown["ABCD".index(row.answer)] == options[right] == row.src_keypoint
        src_point = [tuple(kp.loc[(row.src_image, row.src_keypoint), ["x", "y"]].to_numpy(float))]
        assert row.src_render == render_path(root, render_key(uri[row.src_image], src_point, None, proto))


def test_inconsistent_inputs_name_the_record(built):
    items, t, proto, root = built
    kps = t["keypoints"].copy()
    first = t["four_choice"].iloc[0]
    pairs = t["image_pairs"].set_index("pair_id")
    trg = pairs.loc[first.pair_id, "trg_image"]
    kps.loc[(kps.image_id == trg) & (kps.keypoint == first.option_b), "visible"] = False
    with pytest.raises(LvlmItemsError, match=first.option_b):
        build_items(
            t["four_choice"].head(3),
            t["image_pairs"],
            kps,
            t["descriptions"],
            t["image_set"],
            proto,
            root,
            seed=0,
        )


def test_schema_accepts_the_items_and_rejects_a_broken_rotation(built):
    import pandera.pandas as pa

    from soco_pipeline.lvlm.schemas import LvlmItemSchema

    items = built[0]
    LvlmItemSchema.validate(items, lazy=True)
    broken = items.copy()
    broken.loc[broken.index[1], "answer"] = broken.loc[
        broken.index[0], "answer"
    ]  # two rotations share a letter
    with pytest.raises(pa.errors.SchemaErrors, match="four_rotations_per_item"):
        LvlmItemSchema.validate(broken, lazy=True)
