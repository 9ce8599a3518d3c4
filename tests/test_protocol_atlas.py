"""The protocol-sensitivity atlas (issue 55): a board whose ranking flips under one knob reports the flip, its
Kendall tau and CI; a knob that keeps the order reports tau 1 and no flip; the oracles are left out."""

import numpy as np
import pandas as pd
import pytest
from scipy.stats import kendalltau

from soco_pipeline.analysis.protocol_atlas import (
    FGBMK_BALANCED,
    MMVM_FORCED,
    TPIPS_MAJORITY,
    atlas_figure_png,
    fgbmk_knob_table,
    kendall_tau_b,
    mmvm_knob_table,
    protocol_atlas,
    soco_knob_table,
    tpips_knob_table,
)
from soco_pipeline.evaluation.metrics import METRIC_COLUMNS

pytestmark = pytest.mark.unit

CATEGORIES = [f"cat{i}" for i in range(8)]
# SOC per alpha: A leads B at the headline alpha 0.1 and at 0.15, B leads A at 0.05; C trails; the oracle is
# perfect everywhere (a control: it must not enter the ranking)
SOC = {
    "model_a": {0.05: 30.0, 0.1: 60.0, 0.15: 70.0},
    "model_b": {0.05: 40.0, 0.1: 50.0, 0.15: 65.0},
    "model_c": {0.05: 10.0, 0.1: 20.0, 0.15: 30.0},
    "oracle_part": {0.05: 100.0, 0.1: 100.0, 0.15: 100.0},
}


def _metrics() -> pd.DataFrame:
    rows = []
    for model, by_alpha in SOC.items():
        for alpha, value in by_alpha.items():
            for i, cat in enumerate(CATEGORIES):
                v = value + (i % 3 - 1)  # +-1 across categories: the order holds in every resample
                for reduction in ("official", "keypoint"):
                    rows.append([model, "soc", alpha, reduction, "category", cat, v, 10 + i])
    return pd.DataFrame(rows, columns=METRIC_COLUMNS)


def test_a_ranking_that_flips_under_one_knob_reports_the_flip():
    long = soco_knob_table(_metrics(), 0.1, (0.05, 0.1, 0.15), ("official", "keypoint"))
    atlas = protocol_atlas(long, controls={"oracle_part"}, n_resamples=200, seed=0).set_index("knob")
    assert set(atlas.index) == {"alpha 0.1 -> 0.05", "alpha 0.1 -> 0.15", "reduction official -> keypoint"}
    flip = atlas.loc["alpha 0.1 -> 0.05"]
    assert flip["n_models"] == 3 and flip["n_units"] == len(CATEGORIES)
    assert "oracle_part" not in flip["models"]
    assert flip["n_flipped"] == 1 and flip["flipped_pairs"] == "model_a > model_b -> model_b > model_a"
    assert flip["tau"] == pytest.approx(1 / 3)  # one discordant pair of three
    assert flip["tau_low"] <= flip["tau"] <= flip["tau_high"]
    assert flip["largest_change_model"] == "model_a" and flip["largest_change"] == pytest.approx(-30.0)
    for knob in ("alpha 0.1 -> 0.15", "reduction official -> keypoint"):
        same = atlas.loc[knob]
        assert same["n_flipped"] == 0 and same["flipped_pairs"] == ""
        assert same["tau"] == pytest.approx(1.0) and same["tau_low"] == pytest.approx(1.0)
    assert atlas_figure_png(atlas.reset_index()).startswith(b"\x89PNG")


def test_kendall_tau_b_matches_scipy_with_ties():
    rng = np.random.default_rng(0)
    for _ in range(20):
        x, y = rng.integers(0, 4, 7).astype(float), rng.integers(0, 4, 7).astype(float)
        expected = kendalltau(x, y).statistic
        got = float(kendall_tau_b(x, y))
        assert (np.isnan(expected) and np.isnan(got)) or got == pytest.approx(expected)


def _mmvm_rows(model: str, with_none: list[bool], forced: list[bool], absent: list[bool]) -> pd.DataFrame:
    n = len(with_none)
    return pd.DataFrame(
        {
            "model": model,
            "method": "zero_shot",
            "split": "test",
            "status": "ok",
            "item_id": [f"i{k}" for k in range(n)],
            "match_type": [f"[{k % 3}]" for k in range(n)],  # three match types: the bootstrap unit
            "query_absent": absent,
            "correct": with_none,
            "correct_forced": forced,
        }
    )


def test_mmvm_forced_choice_flip_is_reported_per_match_type():
    # x: right on every item with the None option, but its forced argmax is wrong on half the present items;
    # y: wrong on the absent items (never says None), right on every forced choice
    absent = [k % 2 == 1 for k in range(12)]
    x = _mmvm_rows("x", [True] * 12, [k % 4 == 0 for k in range(12)], absent)
    y = _mmvm_rows("y", [not a for a in absent], [True] * 12, absent)
    long = mmvm_knob_table(pd.concat([x, y], ignore_index=True))
    assert set(long["knob"]) == {"shipped", MMVM_FORCED} and set(long["unit"]) == {"[0]", "[1]", "[2]"}
    row = protocol_atlas(long, n_resamples=100).iloc[0]
    assert (row["family"], row["metric"], row["unit"]) == ("mmvm", "accuracy/zero_shot", "match type")
    assert row["flipped_pairs"] == "x > y -> y > x" and row["tau"] == pytest.approx(-1.0)
    assert row["largest_change_model"] == "x" and row["largest_change"] == pytest.approx(-50.0)


def test_tpips_majority_hit_flip_is_reported_per_aspect():
    # every row's votes are 60 / 40 / 0 %: p always picks the 40 % image (agreement 40, never the majority);
    # q picks the 60 % image on half the rows and the 0 % one on the others (agreement 30, majority hit 50)
    aspects = ["colour", "pose", "shape"]
    ooo = pd.DataFrame(
        {
            "triplet_id": [k for k in range(12)],  # ints here, str in the outcomes: joined as text
            "aspect": [aspects[k % 3] for k in range(12)],
            "split": "test",
            "y_0": 0.6,
            "y_1": 0.4,
            "y_2": 0.0,
        }
    )
    base = {"method": "cosine", "split": "test", "judgements": "simulated"}
    ids = {"triplet_id": ooo["triplet_id"].astype(str), "aspect": ooo["aspect"]}
    p = pd.DataFrame({"model": "p", **base, **ids, "agreement": 0.4})
    q = pd.DataFrame(
        {"model": "q", **base, **ids, "agreement": [0.6 if k % 2 == 0 else 0.0 for k in range(12)]}
    )
    other = p.assign(method="lpips_style", agreement=1.0)  # another method: not this table's
    long = tpips_knob_table(pd.concat([p, q, other], ignore_index=True), ooo)
    assert set(long["knob"]) == {"shipped", TPIPS_MAJORITY} and set(long["unit"]) == set(aspects)
    sh = long[long.knob == "shipped"].assign(vw=lambda d: d.value * d.weight).groupby("model")
    shipped = sh.vw.sum() / sh.weight.sum()
    assert shipped.to_dict() == pytest.approx({"p": 40.0, "q": 30.0})
    row = protocol_atlas(long, n_resamples=100).iloc[0]
    assert (row["family"], row["metric"], row["unit"]) == ("tpips", "ooo/cosine", "aspect")
    assert row["flipped_pairs"] == "p > q -> q > p" and row["tau"] == pytest.approx(-1.0)
    assert row["largest_change_model"] == "p" and row["largest_change"] == pytest.approx(-40.0)


def test_fgbmk_class_balanced_flip_is_reported_per_class():
    # class 0 holds 8 test images, class 1 holds 2: u is right on every class-0 image and no class-1 one
    # (pooled 80, balanced 50); v on half the class-0 images and both class-1 ones (pooled 60, balanced 75)
    labels = [0] * 8 + [1] * 2
    u = [True] * 8 + [False] * 2
    v = [True, False] * 4 + [True] * 2
    rows = [
        pd.DataFrame(
            {
                "backbone": b,
                "image_id": [f"im{k}" for k in range(10)],
                "level": "subclass",
                "predicted": 0,
                "label": labels,
                "correct": c,
                "probe_head": "h",
                "simulated": True,
            }
        )
        for b, c in (("u", u), ("v", v))
    ]
    long = fgbmk_knob_table(pd.concat(rows, ignore_index=True))
    assert set(long["knob"]) == {"shipped", FGBMK_BALANCED} and set(long["unit"]) == {"0", "1"}
    row = protocol_atlas(long, n_resamples=100).iloc[0]
    assert (row["family"], row["metric"], row["unit"]) == ("fgbmk", "top1/subclass", "class")
    assert row["flipped_pairs"] == "u > v -> v > u" and row["tau"] == pytest.approx(-1.0)
    assert row["largest_change_model"] == "u" and row["largest_change"] == pytest.approx(-30.0)
