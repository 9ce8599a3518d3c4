"""PCK thresholds, reductions, 4-choice accuracy, theory helpers, leaderboard and protocol config."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from soco_pipeline.analysis.leaderboard import leaderboard, leaderboard_markdown, leaderboard_plot
from soco_pipeline.evaluation.four_choice_matching import rotation_picks
from soco_pipeline.evaluation.metrics import compute_metrics, four_choice_items
from soco_pipeline.evaluation.protocol import ProtocolConfig, ProtocolError, load_protocol, parse_protocol
from soco_pipeline.taxonomy import load_taxonomy
from tests.soco_theory import expected_concept_oracle_soc, random_feature_chance

pytestmark = pytest.mark.unit

TAX = load_taxonomy()
PROTOCOL = ProtocolConfig()
KP = "vehicle_wheel_front_left_center"


def tiny_tables(spec):
    """Tables for hand computations: spec = {pair_id: (category, [(dx, dy) prediction offsets])}.

    Every target image is 100 x 100 with bbox 0..50 (radius alpha * 50 px), S = 100 (scaling is the
    identity on integer pixels); each pair's k-th keypoint is a distinct car keypoint at integer pixels
    and its prediction is the ground truth moved by (dx, dy).
    """
    kps = TAX.category_keypoints("car")
    images, keypoints, pairs, corr, preds = [], [], [], [], []
    for n, (pid, (cat, offsets)) in enumerate(spec.items()):
        src, trg = f"{cat}_s{n}", f"{cat}_t{n}"
        for iid in (src, trg):
            images.append(
                dict(
                    image_id=iid,
                    category=cat,
                    width=100,
                    height=100,
                    bbox_l=0.0,
                    bbox_t=0.0,
                    bbox_r=50.0,
                    bbox_b=50.0,
                )
            )
            for k, name in enumerate(kps):
                keypoints.append(dict(image_id=iid, keypoint=name, x=10.0 + 5 * k, y=20.0, visible=True))
        pairs.append(
            dict(pair_id=pid, level="intra", pair_group=cat, src_image=src, trg_image=trg, evaluated=True)
        )
        for k, (dx, dy) in enumerate(offsets):
            corr.append(
                dict(
                    pair_id=pid,
                    level="intra",
                    kind="soc",
                    src_keypoint=kps[k],
                    trg_keypoint=kps[k],
                    concept="c",
                    geo=False,
                    n_candidates=1,
                )
            )
            preds.append(
                dict(
                    backbone="b",
                    pair_id=pid,
                    src_keypoint=kps[k],
                    mode="free",
                    pred_x=10.0 + 5 * k + dx,
                    pred_y=20.0 + dy,
                    similarity=1.0,
                    input_size=100,
                )
            )
    return tuple(map(pd.DataFrame, (images, keypoints, pairs, corr, preds)))


def scores(spec, protocol=PROTOCOL, alphas=None):
    images, keypoints, pairs, corr, preds = tiny_tables(spec)
    return compute_metrics(preds, None, corr, keypoints, images, pairs, TAX, protocol, alphas=alphas)


def pick(m, metric="soc", reduction="official", scope="all", group="all", alpha=0.1):
    row = m[
        (m.metric == metric)
        & (m.reduction == reduction)
        & (m.scope == scope)
        & (m.group == group)
        & np.isclose(m.alpha, alpha)
    ]
    assert len(row) == 1
    return float(row.value.iloc[0])


def test_threshold_is_strict_at_the_boundary():
    # radius = 0.1 * 50 = 5 px; a (3, 4) offset is exactly 5 px away.
    spec = {"p0": ("car", [(3, 4)]), "p1": ("car", [(3, 3.99)])}
    m = scores(spec)
    assert pick(m, scope="category", group="car") == 50.0
    inclusive = scores(spec, replace(PROTOCOL, threshold="inclusive"))
    assert pick(inclusive, scope="category", group="car") == 100.0


def test_official_and_keypoint_reductions_by_hand():
    far, near = (30, 0), (0, 0)
    spec = {
        "a1": ("car", [near, near, far]),  # 2/3
        "a2": ("car", [near]),  # 1
        "b1": ("bus", [far, far]),  # 0
        "c1": ("mug", [near, far]),  # 1/2
    }
    m = scores(spec)
    car, bus, mug = (2 / 3 + 1) / 2, 0.0, 0.5
    assert pick(m, scope="category", group="car") == pytest.approx(100 * car)
    assert pick(m, scope="category", group="bus") == 0.0
    assert pick(m, scope="supercategory", group="transportation") == pytest.approx(100 * (car + bus) / 2)
    assert pick(m, scope="supercategory", group="handheld") == pytest.approx(50.0)
    assert pick(m) == pytest.approx(100 * (car + bus + mug) / 3)
    # keypoint pooling: 4 of 8 keypoints right; transportation 3 of 6.
    assert pick(m, reduction="keypoint") == pytest.approx(50.0)
    assert pick(m, reduction="keypoint", scope="supercategory", group="transportation") == pytest.approx(50.0)
    assert pick(m, reduction="keypoint", scope="category", group="car") == pytest.approx(75.0)
    n = m[(m.metric == "soc") & (m.scope == "all") & np.isclose(m.alpha, 0.1)].n
    assert (n == 8).all()


def test_alphas_rescore_without_features():
    m = scores({"p0": ("car", [(0, 8), (0, 6), (0, 1)])}, alphas=(0.1, 0.15, 0.2))
    assert [pick(m, alpha=a) for a in (0.1, 0.15, 0.2)] == pytest.approx([100 / 3, 100 * 2 / 3, 100.0])


def test_stale_predictions_are_named():
    images, keypoints, pairs, corr, preds = tiny_tables({"p0": ("car", [(0, 0), (0, 0)])})
    with pytest.raises(ValueError, match="stale"):
        compute_metrics(preds.iloc[:1], None, corr, keypoints, images, pairs, TAX, PROTOCOL)


def test_four_choice_plain_and_circular():
    sims = np.array(
        [
            [0.9, 0.1, 0.2, 0.3],  # answer 0: right under every rotation
            [
                0.5,
                0.5,
                0.1,
                0.1,
            ],  # answer 0: tie with option 1 -> rotation 1 presents 1 first: circular wrong
            [0.5, 0.5, 0.1, 0.1],  # answer 1: rotation 0 picks 0 -> plain wrong
            [0.1, 0.2, 0.3, 0.4],  # answer 2: wrong everywhere
        ]
    )
    picks = rotation_picks(sims)
    np.testing.assert_array_equal(picks, [[0, 0, 0, 0], [0, 1, 0, 0], [0, 1, 0, 0], [3, 3, 3, 3]])
    fc = pd.DataFrame(
        {
            "backbone": "b",
            "pair_id": ["a1", "a1", "a2", "b1"],
            "src_keypoint": list("wxyz"),
            "answer": [0, 0, 1, 2],
            **{f"pick_{r}": picks[:, r] for r in range(4)},
        }
    )
    pairs = pd.DataFrame(
        {
            "pair_id": ["a1", "a2", "b1"],
            "pair_group": ["car", "car", "mug"],
            "level": "intra",
            "trg_image": "unused",
            "evaluated": True,
        }
    )
    items = four_choice_items(fc, pairs)
    plain = items[items.metric == "four_choice"].score.tolist()
    circ = items[items.metric == "four_choice_circular"].score.tolist()
    assert plain == [1, 1, 0, 0] and circ == [1, 0, 0, 0]
    images, keypoints, _, corr, preds = tiny_tables({"a1": ("car", [(0, 0)])})
    m = compute_metrics(preds.iloc[:0], fc, corr.iloc[:0], keypoints, images, pairs, TAX, PROTOCOL)
    val = m.set_index(["metric", "reduction", "scope", "group"]).value
    # official: car = mean(pair a1 = 1, pair a2 = 0) = 0.5, mug = 0 -> 25; keypoint: 2 / 4.
    assert val[("four_choice", "official", "all", "all")] == pytest.approx(25.0)
    assert val[("four_choice", "keypoint", "all", "all")] == pytest.approx(50.0)
    # circular: pair a1 = mean(1, 0), a2 = 0 -> car 0.25, mug 0 -> 12.5.
    assert val[("four_choice_circular", "official", "category", "car")] == pytest.approx(25.0)
    assert val[("four_choice_circular", "official", "all", "all")] == pytest.approx(12.5)


def test_concept_oracle_counts_instances_inside_the_radius():
    # One SOC keypoint with 3 candidates: the right one, one 3 px away (inside radius 5), one far away.
    images, keypoints, pairs, corr, _ = tiny_tables({"p0": ("car", [(0, 0)])})
    kps = TAX.category_keypoints("car")
    trg = pairs.trg_image.iloc[0]
    keypoints.loc[(keypoints.image_id == trg) & (keypoints.keypoint == kps[1]), ["x", "y"]] = [13.0, 20.0]
    keypoints.loc[(keypoints.image_id == trg) & (keypoints.keypoint == kps[2]), ["x", "y"]] = [80.0, 80.0]
    corr = corr.assign(n_candidates=3, geo=True)
    cc = pd.DataFrame(
        {
            "pair_id": "p0",
            "level": "intra",
            "kind": "cc",
            "src_keypoint": kps[0],
            "trg_keypoint": kps[:3],
            "concept": "c",
            "geo": True,
            "n_candidates": 3,
        }
    )
    corr = pd.concat([corr, cc], ignore_index=True)
    assert expected_concept_oracle_soc(corr, pairs) == pytest.approx(100 / 3)
    assert expected_concept_oracle_soc(corr, pairs, keypoints, images, alpha=0.1) == pytest.approx(200 / 3)
    assert expected_concept_oracle_soc(corr, pairs, keypoints, images, alpha=0.1, geo=True) == pytest.approx(
        200 / 3
    )


def test_random_chance_by_hand():
    # Target 100 x 100, S = 100, 10 x 10 grid: cell corners at multiples of 10 px. Keypoint at (10, 20),
    # radius 0.1 * 50 = 5 px strict: only the corner (10, 20) itself -> 1 of 100 cells.
    images, keypoints, pairs, corr, _ = tiny_tables({"p0": ("car", [(0, 0)])})
    assert random_feature_chance(corr, pairs, keypoints, images, (10, 10), 100, PROTOCOL) == pytest.approx(
        1.0
    )
    # alpha 0.25 -> radius 12.5: corners (10,10) (0,20) (10,20) (20,20) (10,30) -> 5 cells.
    assert random_feature_chance(
        corr, pairs, keypoints, images, (10, 10), 100, PROTOCOL, alpha=0.25
    ) == pytest.approx(5.0)
    # A 100 x 50 target: only 50 cells hold image pixels.
    images.loc[images.image_id == pairs.trg_image.iloc[0], ["height", "bbox_b"]] = [50, 50.0]
    assert random_feature_chance(
        corr, pairs, keypoints, images, (10, 10), 100, PROTOCOL, alpha=0.25, support="image"
    ) == pytest.approx(10.0)


def test_leaderboard_markdown_and_plot(tmp_path):
    rows = []
    for b, base in (("strong", 80.0), ("weak", 20.0)):
        for metric, drop in (("cc", 0), ("soc", 10), ("soc_geo", 20), ("cross_soc", 15), ("cross_cc", 5)):
            rows.append((b, metric, 0.1, "official", "all", "all", base - drop, 10))
            rows.append((b, metric, 0.05, "official", "all", "all", base - drop - 5, 10))
        for sup, d in (("transportation", 1), ("animals", -1)):
            rows.append((b, "soc", 0.1, "official", "supercategory", sup, base - 10 + d, 5))
        rows.append((b, "four_choice", np.nan, "official", "all", "all", base / 2, 4))
        rows.append((b, "four_choice_circular", np.nan, "official", "all", "all", base / 4, 4))
    m = pd.DataFrame(
        rows, columns=["backbone", "metric", "alpha", "reduction", "scope", "group", "value", "n"]
    )
    board = leaderboard(m)
    assert list(board.backbone) == ["strong", "weak"]
    s = board.set_index("backbone").loc["strong"]
    assert (s.cc, s.soc, s.soc_geo, s.cross_soc, s.cross_cc) == (80, 70, 60, 65, 75)
    assert s.cc_to_soc_drop == 10 and s.soc_to_cross_drop == 5
    assert s.soc_transportation == 71 and s.soc_animals == 69
    assert s.four_choice == 40 and s.four_choice_circular == 20
    md = leaderboard_markdown(board)
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in md.splitlines()]
    assert cells[0][:3] == ["backbone", "cc", "soc"] and ["strong", "80.0", "70.0"] in [
        r[:3] for r in cells[2:]
    ]
    assert set(cells[1][1]) <= set("-:") and cells[1][1].endswith(":")  # numbers right-aligned
    path = leaderboard_plot(board, str(tmp_path / "board.png"))
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_protocol_file_and_hashes(tmp_path):
    p = load_protocol()
    assert p == ProtocolConfig() and p.version_hash() == ProtocolConfig().version_hash()
    assert replace(p, prediction_point="center").matching_hash() != p.matching_hash()
    assert replace(p, threshold="inclusive").matching_hash() == p.matching_hash()
    with pytest.raises(ProtocolError, match="prediction_point"):
        parse_protocol({"prediction_point": "middle"})
    with pytest.raises(ProtocolError, match=r"unknown field\(s\) \['alpha'\]"):
        parse_protocol({"alpha": 0.1})
    with pytest.raises(ProtocolError, match="headline_alpha"):
        parse_protocol({"alphas": [0.05], "headline_alpha": 0.1})


def test_leaderboard_markdown_leaves_missing_values_blank():
    board = pd.DataFrame({"backbone": ["a", "b"], "cc": [12.34, np.nan]})
    rows = [
        [c.strip() for c in line.strip("|").split("|")] for line in leaderboard_markdown(board).splitlines()
    ]
    assert rows[2] == ["a", "12.3"] and rows[3] == ["b", ""]


def test_console_board_keeps_the_headline_columns_with_the_soc_interval_and_marks_partial_rows():
    from soco_pipeline.analysis.leaderboard import console_board

    board = pd.DataFrame(
        {
            "backbone": ["a", "b"],
            "cc": [90.0, 50.0],
            "soc": [60.9, 30.0],
            "soc_geo": [45.0, 44.0],
            "retrieval_map": [1.0, 2.0],
            "ci95_lo_boot_category_soc": [48.4, np.nan],
            "ci95_hi_boot_category_soc": [71.6, np.nan],
            "partial": [False, True],
            "subset": ["", '{"limit": 2}'],
        }
    )
    out = console_board(board)
    assert list(out.columns) == ["backbone", "cc", "soc", "SOC 95% CI", "soc_geo"]
    assert out["SOC 95% CI"].tolist() == ["[48.4, 71.6]", ""]
    assert out["backbone"].tolist() == ["a", 'b [partial: {"limit": 2}]']
